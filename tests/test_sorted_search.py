"""The bounds' allocation-free sort and searches (kbfast.fast.runs) give numpy's answers: the stable order of
``np.argsort(kind="mergesort")`` and ``np.searchsorted`` on a sub-range, ties and infinities included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.fast.runs import SMALL_SORT, count_at_most, count_below, stable_argsort_into

# few distinct values, so that ties are common; infinities as the schedules' open windows
KEYS = st.lists(st.sampled_from([-np.inf, -1.5, 0.0, 0.25, 2.0, 3.0, 7.5, np.inf]), max_size=3 * SMALL_SORT)


@settings(max_examples=200, deadline=None)
@given(KEYS, st.integers(0, 5))
def test_stable_argsort_into_is_numpys_stable_order(keys, spare) -> None:
    """Below and above ``SMALL_SORT``, in a buffer longer than the keys (the rest stays untouched)."""
    key = np.array(keys + [9.0] * spare, np.float64)
    n = len(keys)
    out = np.full(len(key) + 1, -7, np.int64)
    stable_argsort_into(key, n, out)
    assert out[:n].tolist() == np.argsort(key[:n], kind="mergesort").tolist()
    assert (out[n:] == -7).all()


@settings(max_examples=200, deadline=None)
@given(KEYS, st.data())
def test_counts_are_searchsorted_on_the_sub_range(keys, data) -> None:
    a = np.sort(np.array(keys, np.float64))
    lo = data.draw(st.integers(0, len(a)))
    hi = data.draw(st.integers(lo, len(a)))
    x = data.draw(st.sampled_from([-np.inf, -2.0, -1.5, 0.0, 0.1, 2.0, 7.5, 8.0, np.inf]))
    assert count_at_most(a, lo, hi, x) == lo + np.searchsorted(a[lo:hi], x, side="right")
    assert count_below(a, lo, hi, x) == lo + np.searchsorted(a[lo:hi], x, side="left")
