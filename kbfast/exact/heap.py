"""An array-based binary min-heap of events keyed by (time, insertion sequence), for Numba.

Equal times pop in insertion order, which makes every replay reproducible bit
for bit (design §5 "Ties").  The heap is a tuple ``(time, seq, payload)`` of
parallel arrays; an event's kind and fields are packed into the int64 payload
(:func:`pack`).  Callers own ``size`` and the sequence counter and size the
heap for the most events that can be pending at once (one per flit in flight,
see ``kbfast.exact.replay.heap_capacity``): a fixed capacity keeps the hot loop
free of reallocation.  Plain functions (no jitclass) keep the replay kernel
cacheable on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# payload bits: kind 4 | a 27 | b 20 | c 12
_KIND_SHIFT, _A_SHIFT, _B_SHIFT = 59, 32, 12
MAX_A, MAX_B, MAX_C = (1 << 27) - 1, (1 << 20) - 1, (1 << 12) - 1


@njit(cache=True, inline="always")
def pack(kind, a, b, c):  # pragma: no cover - jitted
    return (np.int64(kind) << _KIND_SHIFT) | (np.int64(a) << _A_SHIFT) | (np.int64(b) << _B_SHIFT) | np.int64(c)


@njit(cache=True, inline="always")
def unpack(p):  # pragma: no cover - jitted
    return (np.int64(p >> _KIND_SHIFT), np.int64((p >> _A_SHIFT) & MAX_A), np.int64((p >> _B_SHIFT) & MAX_B),
            np.int64(p & MAX_C))


@njit(cache=True)
def heap_new(capacity):  # pragma: no cover - jitted
    capacity = max(capacity, 16)
    return np.empty(capacity, np.float64), np.empty(capacity, np.int64), np.empty(capacity, np.int64)


@njit(cache=True, inline="always")
def heap_push(heap, size, seq, time, payload):  # pragma: no cover - jitted
    """Insert at the hole ``size`` (the caller guarantees capacity) and sift the hole up."""
    ht, hs, hp = heap
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if time < ht[parent] or (time == ht[parent] and seq < hs[parent]):
            ht[i] = ht[parent]
            hs[i] = hs[parent]
            hp[i] = hp[parent]
            i = parent
        else:
            break
    ht[i] = time
    hs[i] = seq
    hp[i] = payload


@njit(cache=True, inline="always")
def heap_pop(heap, size):  # pragma: no cover - jitted
    """Remove the root of a heap of ``size`` items; returns (time, payload).  New size is size-1."""
    ht, hs, hp = heap
    time, payload = ht[0], hp[0]
    n = size - 1
    if n > 0:
        lt, ls, lp = ht[n], hs[n], hp[n]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            right = child + 1
            if right < n and (ht[right] < ht[child] or (ht[right] == ht[child] and hs[right] < hs[child])):
                child = right
            if ht[child] < lt or (ht[child] == lt and hs[child] < ls):
                ht[i] = ht[child]
                hs[i] = hs[child]
                hp[i] = hp[child]
                i = child
            else:
                break
        ht[i] = lt
        hs[i] = ls
        hp[i] = lp
    return time, payload
