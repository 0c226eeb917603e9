"""The interference bound (kbfast.fast.bounds) against the obvious pairwise reference kept here."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.fast.bounds import BoundTables, interference

FLIT = 64


def reference(B: BoundTables, nbytes, begin_lo, end_hi, use_windows, own_extra):
    """extra[o] = own + the work of every other op on o's resources whose window overlaps o's."""
    cls = np.full(len(nbytes), -1)
    for c in range(len(B.cls_ptr) - 1):
        cls[B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]] = c

    def work(k, g):
        return B.base[k] * (nbytes[g], 1, -(-nbytes[g] // FLIT))[B.kind[k]]

    def entries(o):
        return range(B.cls_ptr[cls[o]], B.cls_ptr[cls[o] + 1]) if cls[o] >= 0 else range(0)

    extra = own_extra.copy()
    for o in range(len(nbytes)):
        for k in entries(o):
            for g in range(len(nbytes)):
                if g == o or (use_windows and (end_hi[g] < begin_lo[o] or end_hi[o] < begin_lo[g])):
                    continue
                extra[o] += sum(work(j, g) for j in entries(g) if B.res[j] == B.res[k])
    return extra


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
                       base=rng.random(len(res)) * 10, ops_ptr=ops_ptr, ops=ops, users_ptr=users_ptr, users=users)


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
    got = interference(B, nbytes, FLIT, begin, end, windows, own)
    want = reference(B, nbytes, begin, end, windows, own)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
