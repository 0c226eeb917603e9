"""An array-based binary min-heap of events keyed by (time, insertion sequence), for Numba.

Equal times pop in insertion order, which makes every replay reproducible bit
for bit (design §5 "Ties").  The heap is a tuple of parallel arrays
``(time, seq, kind, a, b, c)``; callers own ``size`` and the sequence counter,
and call :func:`heap_reserve` before pushing.  Plain functions (no jitclass) keep the
replay kernel cacheable on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _less(ht, hs, i, j):  # pragma: no cover - jitted
    return ht[i] < ht[j] or (ht[i] == ht[j] and hs[i] < hs[j])


@njit(cache=True, inline="always")
def _swap(ht, hs, hk, ha, hb, hc, i, j):  # pragma: no cover - jitted
    ht[i], ht[j] = ht[j], ht[i]
    hs[i], hs[j] = hs[j], hs[i]
    hk[i], hk[j] = hk[j], hk[i]
    ha[i], ha[j] = ha[j], ha[i]
    hb[i], hb[j] = hb[j], hb[i]
    hc[i], hc[j] = hc[j], hc[i]


@njit(cache=True)
def heap_new(capacity):  # pragma: no cover - jitted
    capacity = max(capacity, 16)
    return (np.empty(capacity, np.float64), np.empty(capacity, np.int64), np.empty(capacity, np.int8),
            np.empty(capacity, np.int32), np.empty(capacity, np.int32), np.empty(capacity, np.int32))


@njit(cache=True)
def heap_reserve(heap, need):  # pragma: no cover - jitted
    """Return ``heap`` with room for ``need`` items (doubling; the old arrays are copied)."""
    ht, hs, hk, ha, hb, hc = heap
    if need <= len(ht):
        return heap
    n = max(2 * len(ht), need)
    t, s, k, a, b, c = heap_new(n)
    m = len(ht)
    t[:m] = ht
    s[:m] = hs
    k[:m] = hk
    a[:m] = ha
    b[:m] = hb
    c[:m] = hc
    return t, s, k, a, b, c


@njit(cache=True)
def heap_push(heap, size, seq, time, kind, a, b, c):  # pragma: no cover - jitted
    """Insert at position ``size`` (capacity must allow it, see heap_reserve) and sift up."""
    ht, hs, hk, ha, hb, hc = heap
    i = size
    ht[i] = time
    hs[i] = seq
    hk[i] = kind
    ha[i] = a
    hb[i] = b
    hc[i] = c
    while i > 0:
        parent = (i - 1) >> 1
        if _less(ht, hs, i, parent):
            _swap(ht, hs, hk, ha, hb, hc, i, parent)
            i = parent
        else:
            break


@njit(cache=True)
def heap_pop(heap, size):  # pragma: no cover - jitted
    """Remove the root of a heap of ``size`` items; returns (time, kind, a, b, c). New size is size-1."""
    ht, hs, hk, ha, hb, hc = heap
    time, kind, a, b, c = ht[0], hk[0], ha[0], hb[0], hc[0]
    n = size - 1
    if n > 0:
        _swap(ht, hs, hk, ha, hb, hc, 0, n)
        i = 0
        while True:
            left = 2 * i + 1
            if left >= n:
                break
            child = left
            if left + 1 < n and _less(ht, hs, left + 1, left):
                child = left + 1
            if _less(ht, hs, child, i):
                _swap(ht, hs, hk, ha, hb, hc, child, i)
                i = child
            else:
                break
    return time, kind, a, b, c
