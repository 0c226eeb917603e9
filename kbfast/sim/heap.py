"""The event queue of both evaluators, keyed by (time, insertion sequence), for Numba.

Equal times pop in insertion order, which makes every replay reproducible bit
for bit (design §5 "Ties").  Many events share their time (an instant often
holds dozens), so events wait in FIFO *buckets*, one per pending time, and a
binary min-heap orders the buckets by (time, sequence of their first event): a
push at a time that already has a bucket is an append, a pop that leaves its
bucket non-empty is O(1).  A small direct-mapped table (hash of the time) finds
a time's bucket; when two times collide a fresh bucket is opened, and only the
newest bucket of a time takes appends, which keeps the exact (time, sequence)
order.  An event's kind and fields are packed into an int64 payload
(:func:`pack`).

The queue is a tuple of arrays whose first is the buckets' heap of times, so
``queue[0][0]`` is the next event's time.  Callers own ``size`` (pending events)
and the sequence counter and size the queue for the most events that can be
pending at once (one per flit in flight, see
``kbfast.sim.lowering.heap_capacity``): a fixed capacity keeps the hot loops
free of allocation.  Plain functions (no jitclass) keep the kernels cacheable
on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# payload bits: kind 4 | a 27 | b 20 | c 12
_KIND_SHIFT, _A_SHIFT, _B_SHIFT = 59, 32, 12
MAX_A, MAX_B, MAX_C = (1 << 27) - 1, (1 << 20) - 1, (1 << 12) - 1
_TABLE_BITS = 10
_MIX = -7046029254386353131   # 0x9E3779B97F4A7C15 as int64 (Fibonacci hashing)


@njit(cache=True, inline="always")
def pack(kind, a, b, c):  # pragma: no cover - jitted
    """An event's kind and three ids in one int64 (bit fields; :func:`unpack` reverses it)."""
    return (np.int64(kind) << _KIND_SHIFT) | (np.int64(a) << _A_SHIFT) | (np.int64(b) << _B_SHIFT) | np.int64(c)


@njit(cache=True, inline="always")
def unpack(p):  # pragma: no cover - jitted
    """(kind, a, b, c) of an event packed by :func:`pack`."""
    return (np.int64(p >> _KIND_SHIFT), np.int64((p >> _A_SHIFT) & MAX_A), np.int64((p >> _B_SHIFT) & MAX_B),
            np.int64(p & MAX_C))


@njit(cache=True)
def heap_new(capacity):  # pragma: no cover - jitted
    """An empty queue for up to ``capacity`` pending events.

    O(1) set-up apart from the hash table: event slots and buckets are handed out from a
    high-water mark first, then from their free stacks (the free lists are not initialised;
    capacity is often far above the events ever pending at once).
    """
    capacity = max(capacity, 16)
    # free event slots, free buckets, then: counts of both stacks, buckets in the heap, high-water marks of both
    heap = (np.empty(capacity, np.float64), np.empty(capacity, np.int64), np.empty(capacity, np.int64),
            np.empty(capacity, np.float64), np.empty(capacity, np.int64), np.empty(capacity, np.int64),
            np.empty(capacity, np.int64), np.empty(capacity, np.int64), np.empty(1 << _TABLE_BITS, np.int64),
            np.empty(2 * capacity + 5, np.int64))
    heap_reset(heap)
    return heap


@njit(cache=True, _nrt=False)
def heap_reset(heap):  # pragma: no cover - jitted
    """Empty the queue ``heap`` (:func:`heap_new`'s) for another run: no event, no bucket, the hash table
    cleared."""
    table, free = heap[8], heap[9]
    free[2 * len(heap[0]):] = 0
    table[:] = -1


@njit(cache=True, _nrt=False)
def heap_push(heap, size, seq, time, payload):  # pragma: no cover - jitted
    """Queue ``payload`` at ``time`` with sequence ``seq`` (the caller guarantees capacity)."""
    ht, hs, hb, b_time, b_head, b_tail, nxt, pay, table, free = heap
    cap = len(ht)
    n_free = free[2 * cap]
    if n_free > 0:
        ev = free[n_free - 1]
        free[2 * cap] = n_free - 1
    else:
        ev = free[2 * cap + 3]
        free[2 * cap + 3] = ev + 1
    pay[ev] = payload
    nxt[ev] = -1
    slot = ((np.int64(time * 4096.0) * _MIX) >> 40) & ((1 << _TABLE_BITS) - 1)
    b = table[slot]
    if b >= 0 and b_head[b] >= 0 and b_time[b] == time:
        nxt[b_tail[b]] = ev
        b_tail[b] = ev
        return
    nb_free = free[2 * cap + 1]
    if nb_free > 0:
        b = free[cap + nb_free - 1]
        free[2 * cap + 1] = nb_free - 1
    else:
        b = free[2 * cap + 4]
        free[2 * cap + 4] = b + 1
    table[slot] = b
    b_time[b] = time
    b_head[b] = ev
    b_tail[b] = ev
    i = free[2 * cap + 2]
    free[2 * cap + 2] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if time < ht[parent] or (time == ht[parent] and seq < hs[parent]):
            ht[i] = ht[parent]
            hs[i] = hs[parent]
            hb[i] = hb[parent]
            i = parent
        else:
            break
    ht[i] = time
    hs[i] = seq
    hb[i] = b


@njit(cache=True, _nrt=False)
def heap_pop(heap, size):  # pragma: no cover - jitted
    """Remove the next event of a non-empty queue; returns (time, payload).  New size is size-1."""
    ht, hs, hb, b_time, b_head, b_tail, nxt, pay, table, free = heap
    cap = len(ht)
    b = hb[0]
    ev = b_head[b]
    time, payload = ht[0], pay[ev]
    n_free = free[2 * cap]
    free[n_free] = ev
    free[2 * cap] = n_free + 1
    b_head[b] = nxt[ev]
    if b_head[b] >= 0:
        return time, payload
    nb_free = free[2 * cap + 1]
    free[cap + nb_free] = b
    free[2 * cap + 1] = nb_free + 1
    n = free[2 * cap + 2] - 1
    free[2 * cap + 2] = n
    if n > 0:
        lt, ls, lb = ht[n], hs[n], hb[n]
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
                hb[i] = hb[child]
                i = child
            else:
                break
        ht[i] = lt
        hs[i] = ls
        hb[i] = lb
    return time, payload
