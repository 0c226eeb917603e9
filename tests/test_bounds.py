"""The interference bound (kbfast.fast.bounds) against the pairwise reference in tests/naive.py."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.fast.bounds import BoundTables, interference
from naive import pairwise_interference

FLIT = 64


def random_tables(rng: np.random.Generator, n_ops: int, n_cls: int, n_res: int) -> BoundTables:
    """Each class uses a random set of distinct resources; each op is in a random class or in none."""
    cls_res = [rng.choice(n_res, size=rng.integers(0, n_res + 1), replace=False) for _ in range(n_cls)]
    cls_ptr = np.concatenate([[0], np.cumsum([len(x) for x in cls_res])]).astype(np.int64)
    res = np.concatenate(cls_res).astype(np.int64)
    op_cls = rng.integers(-1, n_cls, n_ops)
    ops = np.concatenate([np.flatnonzero(op_cls == c) for c in range(n_cls)]).astype(np.int64)
    ops_ptr = np.concatenate([[0], np.cumsum([(op_cls == c).sum() for c in range(n_cls)])]).astype(np.int64)
    owner = np.repeat(np.arange(n_cls), np.diff(cls_ptr))
    order = np.lexsort((np.arange(len(res)), res))
    users_ptr = np.concatenate([[0], np.cumsum(np.bincount(res, minlength=n_res))]).astype(np.int64)
    users = np.stack([owner[order], order]).T.astype(np.int64).reshape(-1, 2)
    return BoundTables(cls_ptr=cls_ptr, res=res, kind=rng.integers(0, 3, len(res)).astype(np.int8),
                       base=rng.random(len(res)) * 10, ops_ptr=ops_ptr, ops=ops, users_ptr=users_ptr, users=users,
                       serial=rng.random(n_cls) < 0.5)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(1, 30), n_cls=st.integers(1, 10), n_res=st.integers(1, 8),
       windows=st.booleans(), ties=st.booleans())
def test_interference_matches_the_pairwise_reference(seed, n_ops, n_cls, n_res, windows, ties) -> None:
    rng = np.random.default_rng(seed)
    B = random_tables(rng, n_ops, n_cls, n_res)
    nbytes = rng.integers(1, 1000, n_ops)
    begin = rng.integers(0, 20, n_ops).astype(float) if ties else rng.random(n_ops) * 1000
    end = begin + (rng.integers(0, 10, n_ops).astype(float) if ties else rng.random(n_ops) * 300)
    own = rng.random(n_ops)
    posted = rng.random(n_ops) < 0.3
    got = interference(B, nbytes, FLIT, begin, end, windows, own, posted)
    want = pairwise_interference(B, nbytes, begin, end, windows, own, FLIT, posted)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
