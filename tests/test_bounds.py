"""The interference bound (kbfast.fast.bounds) against the obvious pairwise reference kept here."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.fast.bounds import interference


def reference(res_ptr, res_ids, res_work, users_ptr, users, begin_lo, end_hi, use_windows, own_extra):
    """extra[o] = own + the work of every other op on o's resources whose window overlaps o's."""
    extra = own_extra.copy()
    for o in range(len(res_ptr) - 1):
        for k in range(res_ptr[o], res_ptr[o + 1]):
            r = res_ids[k]
            for j in range(users_ptr[r], users_ptr[r + 1]):
                g = users[j, 0]
                if g == o or (use_windows and (end_hi[g] < begin_lo[o] or end_hi[o] < begin_lo[g])):
                    continue
                extra[o] += res_work[users[j, 1]]
    return extra


def random_plan(rng: np.random.Generator, n_ops: int, n_res: int):
    """Each op uses a random set of distinct resources; entries grouped by op, users grouped by resource."""
    ops, res = [], []
    for o in range(n_ops):
        for r in rng.choice(n_res, size=rng.integers(0, n_res + 1), replace=False):
            ops.append(o)
            res.append(int(r))
    ops, res = np.array(ops, np.int64), np.array(res, np.int64)
    res_ptr = np.concatenate([[0], np.cumsum(np.bincount(ops, minlength=n_ops))]).astype(np.int64)
    order = np.lexsort((ops, res))
    users_ptr = np.concatenate([[0], np.cumsum(np.bincount(res, minlength=n_res))]).astype(np.int64)
    users = np.stack([ops[order], order]).T.astype(np.int64) if len(ops) else np.zeros((0, 2), np.int64)
    return res_ptr, res, users_ptr, users


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(1, 30), n_res=st.integers(1, 8), windows=st.booleans(),
       ties=st.booleans())
def test_interference_matches_the_pairwise_reference(seed, n_ops, n_res, windows, ties) -> None:
    rng = np.random.default_rng(seed)
    res_ptr, res_ids, users_ptr, users = random_plan(rng, n_ops, n_res)
    work = rng.random(len(res_ids)) * 100
    begin = rng.integers(0, 20, n_ops).astype(float) if ties else rng.random(n_ops) * 1000
    end = begin + (rng.integers(0, 10, n_ops).astype(float) if ties else rng.random(n_ops) * 300)
    own = rng.random(n_ops)
    got = interference(res_ptr, res_ids, work, users_ptr, users, begin, end, windows, own)
    want = reference(res_ptr, res_ids, work, users_ptr, users, begin, end, windows, own)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
