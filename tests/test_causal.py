"""Causal order of flows (kbfast.fast.causal) against the event-graph search in tests/naive.py, a hand-derived
chain, and the causal interference kernel against the pairwise reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbfast.config import load_system
from kbfast.fast.bounds import window_offsets
from kbfast.fast.causal import _add_crossing_charges, _heaviest_common_order, causal_interference, fifo_order
from kbfast.fast.plan import causal_order, plan_fast
from kbfast.fast.runs import RunCoefs, no_runs, run_units
from kbfast.ir import Op, ProgramBuilder
from kbfast.topology.builder import build_tables
from kbfast.topology.names import node_id
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce, pe2pe
from naive import causal_before, fifo_behind, pairwise_interference


def _pair_runs(B, R: RunCoefs, nbytes, flit):
    """The run charge of co-user ``g`` (class ``d``) to an op of class ``c``, read off ``R`` entry by entry
    (inf where ``c`` is not done or ``d`` is no partner of it)."""
    units = run_units(B, nbytes, flit)

    def charge(c: int, d: int, g: int) -> float:
        if not R.done[c]:
            return np.inf
        for j in range(R.p_ptr[c], R.p_ptr[c + 1]):
            if R.p_cls[j] == d:
                return float(sum(R.p_coef[j, u] * units[g, u] for u in range(4)))
        return np.inf
    return charge


def _before(p, cz, flows) -> set[tuple[int, int]]:
    """(g, o): the kernel's clocks say flow g has ended when flow o begins."""
    out = set()
    for g in flows:
        rg = cz.rows[g]
        if cz.comp[rg] < 0:
            continue
        for o in flows:
            if o != g and cz.clock[cz.rows[o], cz.comp[rg]] >= cz.need[rg]:
                out.add((int(g), int(o)))
    return out


@pytest.fixture(scope="module")
def small(tables, router):
    """Programs small enough for the pairwise reference: lrab on one SIP of 3x2 cubes and on the default
    two SIPs, and a PE-to-PE IPCQ transfer."""
    mesh = build_tables(load_system(overrides={"sips.count": 1, "sip.cube_mesh.w": 3, "sip.cube_mesh.h": 2}))
    return [allreduce(mesh, Router(mesh), 4096).program, allreduce(tables, router, 4096).program,
            pe2pe(tables, router, "h3", 4096).program]


@pytest.fixture(scope="module")
def programs(small, torus6_tables):
    """Besides ``small``: lrab on torus6 with and without tile loads and stores, and on ring6 with rings of
    one slot (up to 5 messages a channel: every SEND after the first waits for a credit)."""
    ring1 = build_tables(load_system("ring6", {"ipcq.n_slots": 1}))
    r6 = Router(torus6_tables)
    return small + [allreduce(torus6_tables, r6, 4096).program, allreduce(torus6_tables, r6, 16, tile_io=False).program,
                    allreduce(ring1, Router(ring1), 3000).program]


def test_clocks_match_the_event_graph(programs) -> None:
    for p in programs:
        B = plan_fast(p).bounds
        want = causal_before(p, B.ops)
        assert want or len(B.ops) < 2, p.name          # a case with two flows or more has causal pairs
        assert _before(p, causal_order(p, B), B.ops) == want, p.name


def _two_messages(tables, router):
    """Two 4 KiB messages on one channel from cube 0's pe0 to cube 5's: the Program, the first SEND, the
    second."""
    b = ProgramBuilder(tables, router, "fifo")
    a0, a1 = (b.pe_agent(node_id(tables, f"sip0.cube{i}.pe0.pe_dma")) for i in (0, 5))
    ch = b.channel(a0, a1, n_slots=4)
    first, second = b.send(a0, ch, 4096), b.send(a0, ch, 4096)
    b.recv(a1, ch, 4096)
    b.recv(a1, ch, 4096)
    return b.build(), first, second


def test_a_later_message_of_a_channel_does_not_delay_the_one_before_it(tables, router) -> None:
    """Two messages of one channel leave through the same first-in first-out queue on the same route: the
    second is behind the first at every server.  With every window overlapping, the first is charged
    nothing and the second the first's work on every server of the route."""
    p, first, second = _two_messages(tables, router)
    B = plan_fast(p).bounds
    everywhere = np.full(p.n_ops, -np.inf), np.full(p.n_ops, np.inf)
    zero, posted = np.zeros(p.n_ops), np.zeros(p.n_ops, np.bool_)
    no_k = np.zeros(len(B.res))
    extra = causal_interference(B, p.op_nbytes, 256, *everywhere, zero, posted, causal_order(p, B), no_k, no_k,
                                np.full(len(B.res), -1, np.int64), no_runs(len(B.cls_ptr) - 1))
    (c,) = {c for c in range(len(B.cls_ptr) - 1) if first in B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]}
    work = sum(B.base[k] * (4096, 1, 16)[B.kind[k]] for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]))
    assert extra[first] == 0.0
    assert extra[second] == pytest.approx(work) and work > 0


def test_an_earlier_message_of_a_channel_pays_its_run_charge(tables, router) -> None:
    """The same two messages with the run bound: the first crosses the whole route ahead of the second, one
    pipeline, so the second pays the first's run charge (its train once, at the slowest wire, and each node
    once), far below its work summed over every server; the first is still charged nothing."""
    p, first, second = _two_messages(tables, router)
    plan = plan_fast(p)
    B = plan.bounds
    everywhere = np.full(p.n_ops, -np.inf), np.full(p.n_ops, np.inf)
    zero, posted, no_k = np.zeros(p.n_ops), np.zeros(p.n_ops, np.bool_), np.zeros(len(B.res))
    args = (B, p.op_nbytes, 256, *everywhere, zero, posted, causal_order(p, B), no_k, no_k,
            np.full(len(B.res), -1, np.int64))
    per_server = causal_interference(*args, no_runs(len(B.cls_ptr) - 1))
    runs = causal_interference(*args, plan.runs)
    (c,) = {c for c in range(len(B.cls_ptr) - 1) if first in B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]}
    assert plan.runs.done[c]
    assert runs[first] == per_server[first] == 0.0
    assert runs[second] == pytest.approx(_pair_runs(B, plan.runs, p.op_nbytes, 256)(c, c, first))
    assert 0.0 < runs[second] < 0.5 * per_server[second]


def test_one_flit_messages_crossing_each_other_delay_each_other_at_one_server(tables, router) -> None:
    """A -> B and B -> A at 16 B: the two routes share node workers, in opposite order.  A one-flit message
    can only be delayed by the other along servers both visit in the same order: one server here.  With
    every window overlapping, each is charged the other's largest work on one shared server, not the sum."""
    b = ProgramBuilder(tables, router, "crossing")
    a0, a1 = (b.pe_agent(node_id(tables, f"sip0.cube{i}.pe0.pe_dma")) for i in (0, 5))
    there_ch, back_ch = b.channel(a0, a1), b.channel(a1, a0)
    there, back = b.send(a0, there_ch, 16), b.send(a1, back_ch, 16)
    b.recv(a1, there_ch, 16)
    b.recv(a0, back_ch, 16)
    p = b.build()
    B = plan_fast(p).bounds
    order = fifo_order(B)
    cls = {g: c for c in range(len(B.cls_ptr) - 1) for g in B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]}
    entries = {o: {B.res[k]: k for k in range(B.cls_ptr[cls[o]], B.cls_ptr[cls[o] + 1])} for o in (there, back)}
    shared = sorted(set(entries[there]) & set(entries[back]), key=lambda r: order[entries[there][r]])
    assert len(shared) >= 3 and all(order[entries[o][r]] >= 0 for o in (there, back) for r in shared)
    assert all(order[entries[back][r]] > order[entries[back][q]] for r, q in zip(shared, shared[1:]))  # reversed
    everywhere = np.full(p.n_ops, -np.inf), np.full(p.n_ops, np.inf)
    zero, posted, no_k = np.zeros(p.n_ops), np.zeros(p.n_ops, np.bool_), np.zeros(len(B.res))
    cz = causal_order(p, B)
    extra = causal_interference(B, p.op_nbytes, 256, *everywhere, zero, posted, cz, no_k, no_k, order,
                                no_runs(len(B.cls_ptr) - 1))
    every = causal_interference(B, p.op_nbytes, 256, *everywhere, zero, posted, cz, no_k, no_k,
                                np.full(len(B.res), -1, np.int64), no_runs(len(B.cls_ptr) - 1))
    for o, g in ((there, back), (back, there)):
        work = [B.base[entries[g][r]] * (16, 1)[B.kind[entries[g][r]]] for r in shared]
        assert extra[o] == pytest.approx(max(work))
        assert every[o] == pytest.approx(sum(work)) and max(work) < sum(work)


def test_a_relayed_message_is_apart_from_the_one_before_it(tables, router) -> None:
    """A sends to B; B receives, then sends to C.  The first SEND's data has arrived before B's RECV
    returns, so before B's SEND begins; a SEND of A that is not waited for stays a co-user of both."""
    b = ProgramBuilder(tables, router, "relay")
    a0, a1, a2 = (b.pe_agent(node_id(tables, f"sip0.cube0.pe{i}.pe_dma")) for i in range(3))
    ab, bc = b.channel(a0, a1), b.channel(a1, a2)
    ac = b.channel(a0, a2)
    first = b.send(a0, ab, 4096)
    other = b.send(a0, ac, 4096)
    b.recv(a1, ab, 4096)
    second = b.send(a1, bc, 4096)
    b.recv(a2, bc, 4096)
    b.recv(a2, ac, 4096)
    p = b.build()
    flows = plan_fast(p).bounds.ops
    before = _before(p, causal_order(p, plan_fast(p).bounds), flows)
    assert (first, second) in before
    assert not {(other, second), (second, other), (first, other), (other, first)} & before
    assert before == causal_before(p, flows)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_causal_interference_matches_the_pairwise_reference(small, seed) -> None:
    rng = np.random.default_rng(seed)
    for p, flit in itertools.product(small, (256, 8192)):    # at 8 KiB a flit, every message is one flit
        plan = plan_fast(p)
        B = plan.bounds
        begin = rng.random(p.n_ops) * 3000
        end = begin + rng.random(p.n_ops) * 2000
        own = rng.random(p.n_ops)
        posted = rng.random(p.n_ops) < 0.3
        cz = causal_order(p, B)
        pre, post, _, _ = window_offsets(B, p.op_nbytes, flit, p.op_code == Op.SEND)
        got = causal_interference(B, p.op_nbytes, flit, begin, end, own, posted, cz, pre, post, fifo_order(B),
                                  plan.runs)
        want = pairwise_interference(B, p.op_nbytes, begin, end, True, own, flit, posted,
                                     before=causal_before(p, B.ops), pre=pre, post=post, behind=fifo_behind(p),
                                     crossing=(fifo_order(B), flit),
                                     pair_runs=_pair_runs(B, plan.runs, p.op_nbytes, flit))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


def _recurrence(pos_g, work) -> float:
    """The heaviest common-order subsequence by its O(m^2) recurrence, in float64 as the kernel adds."""
    best = []
    for i in range(len(pos_g)):
        b = work[i]
        for j in range(i):
            if pos_g[j] < pos_g[i]:
                b = max(b, best[j] + work[i])
        best.append(b)
    return max(best, default=0.0)


_WORK = st.floats(0.0, 1e4, allow_nan=False, allow_subnormal=False)


@settings(deadline=None)                 # the first example compiles the kernel
@given(servers=st.lists(st.tuples(st.integers(0, 40), _WORK), max_size=40), rising=st.booleans())
def test_heaviest_common_order_is_the_recurrence_bit_for_bit(servers, rising) -> None:
    """Rising places (the common case) take the O(m) sum; it is what the recurrence adds up, bit for bit."""
    if rising:
        servers = [(i * 3 + p % 3, w) for i, (p, w) in enumerate(servers)]
    pos_g = np.array([p for p, _ in servers], np.int64)
    work = np.array([w for _, w in servers])
    assert _heaviest_common_order(pos_g, work) == _recurrence(pos_g, work)


@settings(deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 12), st.integers(0, 12), _WORK), min_size=1,
                        max_size=120), x0=_WORK)
def test_crossing_charges_group_by_co_user_then_order_on_the_op_route(entries, x0) -> None:
    """Per co-user in ascending order, its entries sorted stably by their place on o's route, each co-user's
    heaviest subsequence added to ``x`` in turn: the same float as a stable sort on (co-user, place)."""
    g, po, pg, w = (np.array(col) for col in zip(*entries))
    g, po, pg = g.astype(np.int64), po.astype(np.int64), pg.astype(np.int64)
    want = x0
    by = np.argsort(g * 100 + po, kind="stable")
    for user in np.unique(g):
        rows = by[g[by] == user]
        want += _recurrence(pg[rows], w[rows])
    by_po, head, tail = np.zeros(14, np.int64), np.full(7, -1, np.int64), np.empty(7, np.int64)
    assert _add_crossing_charges(x0, g, po, pg, w, len(g), by_po, head, tail) == want
    assert not by_po.any() and (head == -1).all()        # ready for the next op
