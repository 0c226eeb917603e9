"""The event queue (kbfast/sim/heap.py) pops in (time, insertion sequence) order, as a plain binary heap of
(time, sequence) pairs does (Python's heapq, the slow obvious reference), whatever the mix of equal times,
colliding hash slots and pushes between pops."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.sim.heap import heap_new, heap_pop, heap_push, pack, unpack

# a delay after the last popped time: zero (a tie), a few repeating steps (many events on one time), or any
delays = st.one_of(st.just(0.0), st.sampled_from([0.25, 1.0, 8.0, 4096.0]), st.floats(0.0, 1e6))
# each step: push this many events (0: pop one)
steps = st.lists(st.tuples(st.integers(0, 6), st.lists(delays, min_size=6, max_size=6)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_pops_come_in_time_then_insertion_order(script) -> None:
    heap = heap_new(512)
    size, seq, now = np.int64(0), 0, 0.0
    ref: list[tuple[float, int, int]] = []
    got, want = [], []
    for n_push, ds in script:
        if n_push == 0 and ref:
            t, p = heap_pop(heap, size)
            size -= 1
            got.append((t, int(p)))
            rt, _, rp = heapq.heappop(ref)
            want.append((rt, rp))
            now = rt
            continue
        for d in ds[:n_push]:
            p = int(pack(np.int64(1), np.int64(seq % 1000), np.int64(0), np.int64(0)))
            heap_push(heap, size, np.int64(seq), now + d, np.int64(p))
            size += 1
            heapq.heappush(ref, (now + d, seq, p))
            seq += 1
    while ref:                                     # drain
        t, p = heap_pop(heap, size)
        size -= 1
        got.append((t, int(p)))
        rt, _, rp = heapq.heappop(ref)
        want.append((rt, rp))
    assert got == want
    assert all(unpack(np.int64(p))[0] == 1 for _, p in got)
