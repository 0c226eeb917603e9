"""The Numba event queue against ``heapq``, and the fluid schedule's water-filling against textbook max-min
fairness (references in tests/naive.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.sim.heap import heap_new, heap_pop, heap_push, pack, unpack
from naive import NaiveEventQueue, global_filling, max_min_fair

# a push (time from a small set, so that many events share their time) or a pop
ACTIONS = st.lists(st.one_of(st.tuples(st.just("push"), st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0, 1e9]),
                                       st.integers(0, 1 << 20)),
                             st.tuples(st.just("pop"), st.just(0.0), st.just(0))), max_size=300)


@settings(max_examples=150, deadline=None)
@given(ACTIONS)
def test_event_queue_pops_like_heapq_with_insertion_order_on_ties(actions) -> None:
    heap, size, seq = heap_new(512), 0, 0
    ref = NaiveEventQueue()
    for what, time, payload in actions:
        if what == "push":
            heap_push(heap, size, seq, time, payload)
            size, seq = size + 1, seq + 1
            ref.push(time, payload)
        elif len(ref):
            assert heap_pop(heap, size) == ref.pop()
            size -= 1
    while len(ref):
        assert heap_pop(heap, size) == ref.pop()
        size -= 1


@given(st.integers(0, 15), st.integers(0, (1 << 27) - 1), st.integers(0, (1 << 20) - 1), st.integers(0, (1 << 12) - 1))
def test_event_payloads_round_trip(kind, a, b, c) -> None:
    assert unpack(pack(kind, a, b, c)) == (kind, a, b, c)


@st.composite
def wire_instances(draw):
    """Flows over wires only (no node overhead: every weight is 1), each with a demand no larger than the
    capacity of any of its wires, as the fluid schedule's flows are (their demand is their bottleneck)."""
    n_res = draw(st.integers(1, 8))
    cap = [draw(st.sampled_from([32.0, 64.0, 128.0, 256.0])) for _ in range(n_res)]
    flows = [draw(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=3, unique=True))
             for _ in range(draw(st.integers(1, 10)))]
    demand = [min(cap[r] for r in f) / draw(st.sampled_from([1.0, 1.0, 2.0, 4.0])) for f in flows]
    return flows, cap, demand


@settings(max_examples=200, deadline=None)
@given(wire_instances())
def test_water_filling_is_textbook_max_min_fairness_on_wires(inst) -> None:
    flows, cap, demand = inst
    users = np.bincount([r for f in flows for r in f], minlength=len(cap))
    got = global_filling(flows, np.array(demand), np.array(cap), np.zeros(len(cap)), np.full(len(flows), 4096),
                         users)
    want = max_min_fair(flows, cap, demand)
    assert np.allclose(got, want, rtol=1e-9, atol=0.0)
