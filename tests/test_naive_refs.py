"""The Numba kernels against the slow references in tests/naive.py.

* the event queue (``kbfast.sim.heap``) against :class:`naive.NaiveEventQueue` (``heapq`` over (time,
  sequence, payload)), with many events per time and with distinct times that share a slot of the
  queue's hash table;
* the fluid schedule's water-filling (``kbfast.fast.waterfill._rates``) against textbook max-min
  fairness (:func:`naive.max_min_fair`), and against the invariants that define max-min fairness where
  the two models differ (see :func:`test_rates_are_max_min_fair_over_the_shared_resources`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.sim import heap as heap_mod
from kbfast.sim.heap import heap_new, heap_pop, heap_push, pack, unpack
from naive import NaiveEventQueue, global_filling, max_min_fair
from conftest import BWS, run_rates

# ---------------------------------------------------------------------------------------------------------
# event queue


def _slot(time: float) -> int:
    """The hash-table slot ``heap_push`` looks a time's bucket up in (transcribed from kbfast.sim.heap)."""
    return ((int(time * 4096.0) * heap_mod._MIX) >> 40) & ((1 << heap_mod._TABLE_BITS) - 1)


def _colliding_times() -> list[float]:
    """Distinct times that share hash slots, so the queue opens a fresh bucket for a time whose slot holds
    another time's bucket: three multiples of 1/8 on one slot, and times closer than 1/4096 (one slot)."""
    by_slot = defaultdict(list)
    for k in range(1, 2000):
        by_slot[_slot(k / 8)].append(k / 8)
    group = next(ts for ts in by_slot.values() if len(ts) >= 3)[:3]
    return group + [1.0, 1.0 + 1e-9, 1.0 + 1e-4]


COLLIDING = _colliding_times()
TIMES = [0.0, 0.5, 2.5, 7.0, 1e9] + COLLIDING


def test_the_colliding_times_do_collide() -> None:
    slots = [_slot(t) for t in COLLIDING]
    assert len(set(COLLIDING)) == 6 and slots[0] == slots[1] == slots[2] and slots[3] == slots[4] == slots[5]


# a push (time from a small set, so that many events share their time; sequence gap 1..3) or a pop
ACTIONS = st.lists(st.one_of(st.tuples(st.just("push"), st.sampled_from(TIMES), st.integers(0, 1 << 40),
                                       st.integers(1, 3)),
                             st.tuples(st.just("pop"), st.just(0.0), st.just(0), st.just(0))), max_size=300)


@settings(max_examples=150, deadline=None)
@given(ACTIONS)
def test_event_queue_pops_like_heapq_with_insertion_order_on_ties(actions) -> None:
    """Any interleaving of pushes and pops: the same (time, payload) sequence as ``heapq`` over (time,
    insertion sequence, payload).  The kernel is given a strictly increasing sequence number, not
    necessarily consecutive (only its order matters); the queue's own ``queue[0][0]`` is the next time."""
    heap, size, seq = heap_new(512), 0, 0
    ref = NaiveEventQueue()
    for what, time, payload, gap in actions:
        if what == "push":
            heap_push(heap, size, seq, time, payload)
            size, seq = size + 1, seq + gap
            ref.push(time, payload)
        elif len(ref):
            assert heap[0][0] == ref.peek_time()
            assert heap_pop(heap, size) == ref.pop()
            size -= 1
    while len(ref):
        assert heap_pop(heap, size) == ref.pop()
        size -= 1


@settings(deadline=None)   # the first example compiles pack and unpack
@given(st.integers(0, 15), st.integers(0, (1 << 27) - 1), st.integers(0, (1 << 20) - 1), st.integers(0, (1 << 12) - 1))
def test_event_payloads_round_trip(kind, a, b, c) -> None:
    assert unpack(pack(kind, a, b, c)) == (kind, a, b, c)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TIMES), st.integers(0, 15), st.integers(0, (1 << 27) - 1),
                          st.integers(0, (1 << 20) - 1), st.integers(0, (1 << 12) - 1)), max_size=100))
def test_packed_events_come_back_in_order_and_whole(events) -> None:
    """Packed payloads through the queue: unpacked on the way out, in heapq's (time, insertion) order."""
    heap, ref = heap_new(128), NaiveEventQueue()
    for seq, (time, *fields) in enumerate(events):
        heap_push(heap, seq, seq, time, pack(*fields))
        ref.push(time, tuple(fields))
    for size in range(len(events), 0, -1):
        time, payload = heap_pop(heap, size)
        assert (time, unpack(payload)) == ref.pop()


# ---------------------------------------------------------------------------------------------------------
# water-filling

BIG = 1e9      # a flow's own bottleneck far above any capacity: it never binds


def assert_max_min_fair(flows, rate, bn, cap, weight) -> None:
    """The invariants that define (weighted-use) max-min fairness with per-flow caps ``bn``, over the
    resources whose ``weight[r]`` dict lists each user's use per B/ns:

    * feasible: no flow above its cap, no resource above its capacity;
    * every flow below its cap is bottlenecked: one of its resources is saturated and no user of that
      resource runs faster than it.
    """
    assert np.all(rate >= 0.0) and np.all(rate <= np.asarray(bn) * (1 + 1e-12))
    used = {r: sum(w * rate[o] for o, w in us.items()) for r, us in weight.items()}
    for r in weight:
        assert used[r] <= cap[r] * (1 + 1e-9), (r, used[r], cap[r])
    for o, f in enumerate(flows):
        if rate[o] >= bn[o] * (1 - 1e-9):
            continue
        assert any(used[r] >= cap[r] * (1 - 1e-9) and rate[o] >= max(rate[g] for g in weight[r]) * (1 - 1e-9)
                   for r in f if r in weight), (o, rate.tolist())


@st.composite
def shared_wire_instances(draw):
    """Flows over wires (no overhead) where every used wire has two or more users."""
    n_res = draw(st.integers(1, 8))
    n_flows = draw(st.integers(2, 12))
    flows = [draw(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=3, unique=True)) for _ in range(n_flows)]
    for r in range(n_res):
        us = [o for o, f in enumerate(flows) if r in f]
        if len(us) == 1:
            other = draw(st.sampled_from([o for o in range(n_flows) if o != us[0]]))
            flows[other].append(r)
    cap = [draw(st.sampled_from(BWS)) for _ in range(n_res)]
    return flows, cap


@settings(max_examples=150, deadline=None)
@given(shared_wire_instances())
def test_rates_are_textbook_max_min_fairness_on_shared_wires(inst) -> None:
    """Every overhead 0 (all weights 1), every own bottleneck far above any capacity, and every used wire
    shared (``_rates`` leaves one-user resources out, see the next test): plain max-min fairness."""
    flows, cap = inst
    n = len(flows)
    got = run_rates(flows, np.full(n, BIG), cap, np.zeros(len(cap)), np.full(n, 4096))
    want = max_min_fair(flows, cap)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0.0)


@st.composite
def wire_instances(draw):
    """Flows over wires (no overhead), any number of users per wire, each flow's own bottleneck either far
    above every capacity or at most the bw of each of its wires (as the fluid schedule's flows are)."""
    n_res = draw(st.integers(1, 8))
    cap = [draw(st.sampled_from(BWS)) for _ in range(n_res)]
    flows = [draw(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=3, unique=True))
             for _ in range(draw(st.integers(1, 12)))]
    own = draw(st.booleans())
    bn = [min(cap[r] for r in f) / draw(st.sampled_from([1.0, 1.0, 2.0, 4.0])) if own else BIG for f in flows]
    return flows, cap, bn


@settings(max_examples=150, deadline=None)
@given(wire_instances())
def test_rates_are_max_min_fair_over_the_shared_resources(inst) -> None:
    """Where the models differ: ``_rates`` leaves out every resource with one user (in the schedule a
    lone flow's bottleneck ``bn`` already accounts for its own wires), textbook filling counts them.

    * If each flow's ``bn`` is at most the bw of each of its wires, a one-user wire cannot bind, and
      ``_rates`` equals textbook max-min fairness with ``bn`` as demand over all wires;
    * if ``bn`` is far above the capacities, a lone flow may exceed its one-user wire: ``_rates`` then
      equals textbook filling over the shared wires only, and satisfies the max-min invariants there.
    """
    flows, cap, bn = inst
    n = len(flows)
    got = run_rates(flows, bn, cap, np.zeros(len(cap)), np.full(n, 4096))
    users = np.bincount([r for f in flows for r in f], minlength=len(cap))
    shared = [[r for r in f if users[r] > 1] for f in flows]
    want = max_min_fair(shared, cap, bn)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0.0)
    if bn[0] < BIG:
        np.testing.assert_allclose(got, max_min_fair(flows, cap, bn), rtol=1e-9, atol=0.0)
    weight = {r: {o: 1.0 for o in range(n) if r in flows[o]} for r in range(len(cap)) if users[r] > 1}
    assert_max_min_fair(flows, got, bn, cap, weight)


@st.composite
def worker_instances(draw):
    """Wires and serial workers (overhead per op, capacity 1), as in tests/test_fast_rates.py."""
    n_res = draw(st.integers(1, 10))
    worker = [draw(st.booleans()) for _ in range(n_res)]
    res_ovh = [draw(st.sampled_from([2.0, 8.0])) if k else 0.0 for k in worker]
    res_cap = [1.0 if k else draw(st.sampled_from(BWS)) for k in worker]
    n_flows = draw(st.integers(1, 14))
    flows = [draw(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=4, unique=True)) for _ in range(n_flows)]
    bn = [draw(st.sampled_from(BWS)) for _ in range(n_flows)]
    nbytes = [draw(st.sampled_from([256, 4096, 65536, 1000])) for _ in range(n_flows)]
    return flows, bn, res_cap, res_ovh, nbytes


@settings(max_examples=100, deadline=None)
@given(worker_instances())
def test_weighted_rates_satisfy_the_max_min_invariants(inst) -> None:
    """With overheads a flow uses ``overhead / bytes`` of a worker per B/ns: no textbook reference, but
    the max-min invariants still hold over the shared resources (and the global filling agrees)."""
    flows, bn, res_cap, res_ovh, nbytes = inst
    n = len(flows)
    got = run_rates(flows, bn, res_cap, res_ovh, nbytes)
    users = np.bincount([r for f in flows for r in f], minlength=len(res_cap))
    weight = {r: {o: (res_ovh[r] / nbytes[o] if res_ovh[r] > 0 else 1.0) for o in range(n) if r in flows[o]}
              for r in range(len(res_cap)) if users[r] > 1}
    assert_max_min_fair(flows, got, bn, res_cap, weight)
    assert got.tolist() == global_filling(flows, np.array(bn), np.array(res_cap), np.array(res_ovh),
                                          np.array(nbytes), users)


@st.composite
def capped_wire_instances(draw):
    """Flows over wires only, each with a demand no larger than the capacity of any of its wires."""
    n_res = draw(st.integers(1, 8))
    cap = [draw(st.sampled_from([32.0, 64.0, 128.0, 256.0])) for _ in range(n_res)]
    flows = [draw(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=3, unique=True))
             for _ in range(draw(st.integers(1, 10)))]
    demand = [min(cap[r] for r in f) / draw(st.sampled_from([1.0, 1.0, 2.0, 4.0])) for f in flows]
    return flows, cap, demand


@settings(max_examples=100, deadline=None)
@given(capped_wire_instances())
def test_global_filling_is_textbook_max_min_fairness_on_wires(inst) -> None:
    """The two references agree with each other where both apply (weights 1)."""
    flows, cap, demand = inst
    users = np.bincount([r for f in flows for r in f], minlength=len(cap))
    got = global_filling(flows, np.array(demand), np.array(cap), np.zeros(len(cap)), np.full(len(flows), 4096),
                         users)
    want = max_min_fair(flows, cap, demand)
    assert np.allclose(got, want, rtol=1e-9, atol=0.0)
