"""Exact replay engine behaviour: determinism, guards (event budget, deadlock, memory estimate), op semantics
(async DMAs and WAIT, COMPUTE, host transfers) and the kernel-launch barrier.

Timing values are derived by hand on the default topology with propagation zeroed (see the derivations in
``test_exact_handcases.py``: a local single-flit PE DMA round trip is 14 ns, ``n_flits + 13`` in general).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kbfast.config import load_system
from kbfast.errors import KbfastError
from kbfast.exact import ExactResult, ReplayBudgetExceeded, ReplayDeadlock, run_exact
from kbfast.sim.lowering import estimate_memory_bytes
from kbfast.ir import Op, Program, ProgramBuilder
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.launch import launch_timing
from kbfast.workloads.probe_catalogue import build_catalogue

KiB = 1024


@pytest.fixture(scope="module")
def t0() -> Tables:
    """Default topology, propagation zeroed."""
    return build_tables(load_system(overrides={"fabric.ns_per_mm": 0.0}))


def mixed_program(t: Tables) -> Program:
    """A contended mix: 8 PEs of cube0 hammer pe0's slice (async + waits + compute), plus host writes/reads."""
    b = ProgramBuilder(t, name="mixed")
    hot = hbm_ctrl(t, 0, 0, 0)
    for pe in range(8):
        a = b.pe_agent(pe_block(t, 0, 0, pe), start_ns=float(pe))
        b.start(a)
        o1 = b.dma(a, hot, 4 * KiB + 17 * pe, addr=pe * 4096, is_async=True)
        b.dma(a, hbm_ctrl(t, 0, 1, pe), 2 * KiB, addr=0, write=False, is_async=True)
        b.compute(a, 3.25)
        b.wait(a, o1)
        b.dma(a, hot, 1 * KiB, addr=2048 * pe)
        b.wait(a)
    h = b.host_agent(0)
    b.dma(h, hbm_ctrl(t, 0, 0, 0), 8 * KiB, is_async=True)
    b.dma(h, hbm_ctrl(t, 0, 4, 0), 8 * KiB, write=False, is_async=True)
    b.wait(h)
    h1 = b.host_agent(1, start_ns=5.0)
    b.dma(h1, hbm_ctrl(t, 1, 0, 3), 4 * KiB)
    return b.build()


# --------------------------------------------------------------------------------------------------------------
def _assert_identical(a: ExactResult, b: ExactResult) -> None:
    for name in ("agent_finish_ns", "op_issue_ns", "op_begin_ns", "op_end_ns"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes(), name
    assert a.n_events == b.n_events
    pd.testing.assert_frame_equal(a.edges, b.edges, check_exact=True)
    pd.testing.assert_frame_equal(a.pcs, b.pcs, check_exact=True)
    for col in a.edges.columns:
        if a.edges[col].dtype.kind == "f":
            assert a.edges[col].to_numpy().tobytes() == b.edges[col].to_numpy().tobytes(), col
    for col in ("busy_ns", "max_backlog_ns"):
        assert a.pcs[col].to_numpy().tobytes() == b.pcs[col].to_numpy().tobytes(), col


def test_determinism_same_program_twice(tables: Tables) -> None:
    p = mixed_program(tables)
    r1, r2 = run_exact(p), run_exact(p)
    _assert_identical(r1, r2)
    assert np.all(r1.op_end_ns >= r1.op_issue_ns) and np.all(r1.agent_finish_ns >= 0)


def test_determinism_rebuilt_program(tables: Tables, router: Router) -> None:
    # Rebuilding the Program (fresh arrays, same content) changes nothing either.
    _assert_identical(run_exact(mixed_program(tables)), run_exact(mixed_program(tables)))
    case = build_catalogue(tables, router)["all_pe_cube0_to_pe0"]
    _assert_identical(run_exact(case.program(tables, router, 4 * KiB)), run_exact(case.program(tables, router, 4 * KiB)))


# --------------------------------------------------------------------------------------------------------------
def test_event_budget(t0: Tables) -> None:
    p = mixed_program(t0)
    with pytest.raises(ReplayBudgetExceeded) as exc:
        run_exact(p, max_events=10)
    msg = str(exc.value)
    assert "'mixed'" in msg and "budget of 10 events" in msg and "max_events" in msg
    assert isinstance(exc.value, KbfastError) and exc.value.exit_code == 2
    # a budget exactly as large as the replay needs is enough
    need = run_exact(p).n_events
    assert run_exact(p, max_events=need).n_events == need
    with pytest.raises(ReplayBudgetExceeded):
        run_exact(p, max_events=need - 1)


def test_deadlock_names_the_blocked_agent(t0: Tables) -> None:
    # pe0 WAITs for its own DMA that comes later in program order: it can never run.  pe1 is healthy.
    b = ProgramBuilder(t0, name="self_wait")
    a0 = b.pe_agent(pe_block(t0, 0, 0, 0))
    a1 = b.pe_agent(pe_block(t0, 0, 0, 1))
    b.start(a0)
    b.wait(a0, 2)                                   # op 2 is added next
    later = b.dma(a0, hbm_ctrl(t0, 0, 0, 0), 256)
    assert later == 2
    b.dma(a1, hbm_ctrl(t0, 0, 0, 1), 256)
    with pytest.raises(ReplayDeadlock) as exc:
        run_exact(b.build())
    msg = str(exc.value)
    assert "deadlock" in msg and "'self_wait'" in msg
    assert "sip0.cube0.pe0" in msg
    assert "op 2 (DMA_WRITE)" in msg
    assert "sip0.cube0.pe1" not in msg
    assert isinstance(exc.value, KbfastError)


def test_wait_on_another_pes_op_is_rejected_at_build(t0: Tables) -> None:
    """A WAIT is a done wire inside a PE: an agent may wait for an op of an agent on the same PE only."""
    b = ProgramBuilder(t0)
    a1 = b.pe_agent(pe_block(t0, 0, 0, 1))
    o = b.dma(a1, hbm_ctrl(t0, 0, 0, 1), 256)
    a0 = b.pe_agent(pe_block(t0, 0, 0, 0))
    b.wait(a0, o)
    with pytest.raises(KbfastError, match="an agent on the same PE"):
        b.build()


def test_wait_on_an_agent_of_the_same_pe(t0: Tables) -> None:
    """Two agents on pe0: the second waits for the first's DMA (13 + 256/256 = 14 ns round trip), then
    computes 5 ns; the first's WAIT on the second's COMPUTE wakes at its end."""
    b = ProgramBuilder(t0)
    pe0 = pe_block(t0, 0, 0, 0)
    a, c = b.pe_agent(pe0), b.pe_agent(pe0)
    o = b.dma(a, hbm_ctrl(t0, 0, 0, 0), 256)
    b.wait(c, o)
    work = b.compute(c, 5.0)
    w = b.wait(a, work)
    res = run_exact(b.build())
    assert res.op_end_ns[o] == 14.0 and res.op_end_ns[work] == 19.0 and res.op_end_ns[w] == 19.0



def test_builder_op_ids_with_interleaved_agents(t0: Tables) -> None:
    b = ProgramBuilder(t0)
    a0 = b.pe_agent(pe_block(t0, 0, 0, 0))
    a1 = b.pe_agent(pe_block(t0, 0, 0, 1))
    b.dma(a0, hbm_ctrl(t0, 0, 0, 0), 256)
    b.dma(a1, hbm_ctrl(t0, 0, 0, 1), 256)
    o = b.dma(a0, hbm_ctrl(t0, 0, 0, 0), 4096)     # returns 2; in the Program a0's second op is op 1
    p = b.build()
    assert p.op_nbytes[o] == 4096 and p.op_agent[o] == a0


def test_memory_estimate_guard(t0: Tables) -> None:
    p = mixed_program(t0)
    need = estimate_memory_bytes(p)
    assert need > 0
    with pytest.raises(KbfastError, match=r"GiB.*fast path") as exc:
        run_exact(p, max_memory_bytes=1024)
    assert not isinstance(exc.value, (ReplayDeadlock, ReplayBudgetExceeded))
    assert "'mixed'" in str(exc.value)
    run_exact(p, max_memory_bytes=need)             # exactly enough is accepted


# --------------------------------------------------------------------------------------------------------------
def test_async_dmas_and_wait_all(t0: Tables) -> None:
    # pe0: async 4 KiB write and async 4 KiB read to its own slice (separate channels: both begin at 0), a
    # COMPUTE of 5 ns, then WAIT_ALL.  Both trains share the pe_dma -> r0c0 wire: write flits arrive at r0c0 at
    # 1..16, read flits at 17..32.  Write: controller at 4+i, last commit 27, done 29 (= 16 + 13).  Read:
    # r0c0 serves its flit 0 at 17 + 2 = 19, the r0c0 -> ctrl wire is free at 19 (write flit 15), read flit j
    # reaches the controller at 20+j; its PC (j mod 8) is freed exactly then (write flit 8+j mod 8 ended at
    # 20 + j mod 8, read flit j-8 at 28 + j-8): commits end 28+j, last 43.  The read's response leaves when
    # the controller took its last flit (35, hbm.read_response: accepted): done 37; the PCs work until 43.
    b = ProgramBuilder(t0, name="async")
    a = b.pe_agent(pe_block(t0, 0, 0, 0))
    ctrl = hbm_ctrl(t0, 0, 0, 0)
    w = b.dma(a, ctrl, 4 * KiB, 0, write=True, is_async=True)
    r = b.dma(a, ctrl, 4 * KiB, 0, write=False, is_async=True)
    c = b.compute(a, 5.0)
    wa = b.wait(a)
    res = run_exact(b.build())
    assert res.op_issue_ns[[w, r]].tolist() == [0.0, 0.0]
    assert res.op_begin_ns[[w, r]].tolist() == [0.0, 0.0]
    assert res.op_end_ns[[w, r]].tolist() == [29.0, 37.0]
    assert (res.op_begin_ns[c], res.op_end_ns[c]) == (0.0, 5.0)   # computes while the DMAs fly
    assert res.op_issue_ns[wa] == 5.0 and res.op_end_ns[wa] == 37.0
    assert res.agent_finish_ns[0] == 37.0 and res.makespan_ns == 37.0
    assert (res.pcs["max_backlog_ns"] == 0.0).all() and res.pcs["commits"].tolist() == [4] * 8


def test_wait_for_one_op(t0: Tables) -> None:
    # Two async writes queue on the write channel (14 ns round trips): WAIT(first) resumes at 14, then a
    # COMPUTE of 1 ns, then WAIT_ALL at 28.
    b = ProgramBuilder(t0, name="wait_one")
    a = b.pe_agent(pe_block(t0, 0, 0, 0))
    ctrl = hbm_ctrl(t0, 0, 0, 0)
    o1 = b.dma(a, ctrl, 256, 0, is_async=True)
    o2 = b.dma(a, ctrl, 256, 256, is_async=True)
    w1 = b.wait(a, o1)
    c = b.compute(a, 1.0)
    w2 = b.wait(a)
    res = run_exact(b.build())
    assert res.op_end_ns[[o1, o2]].tolist() == [14.0, 28.0]
    assert res.op_begin_ns[o2] == 14.0
    assert res.op_end_ns[w1] == 14.0 and res.op_begin_ns[c] == 14.0 and res.op_end_ns[c] == 15.0
    assert res.op_issue_ns[w2] == 15.0 and res.op_end_ns[w2] == 28.0
    # a WAIT on an op that already finished passes through at once
    b = ProgramBuilder(t0)
    a = b.pe_agent(pe_block(t0, 0, 0, 0))
    o = b.dma(a, ctrl, 256)
    wt = b.wait(a, o)
    b.wait(a)
    res = run_exact(b.build())
    assert res.op_end_ns[o] == 14.0 and res.op_issue_ns[wt] == 14.0 and res.op_end_ns[wt] == 14.0
    assert res.agent_finish_ns[0] == 14.0


@pytest.mark.parametrize("ns", [0.0, 1.0, 37.5, 1e3 + 0.125])
def test_compute_delays_the_next_op_by_exactly_its_ns(t0: Tables, ns: float) -> None:
    # Agent starts at 100: START, COMPUTE(ns), COMPUTE(ns), 256 B local DMA (14 ns).
    b = ProgramBuilder(t0, name="compute")
    a = b.pe_agent(pe_block(t0, 0, 0, 0), start_ns=100.0)
    s = b.start(a)
    c1 = b.compute(a, ns)
    c2 = b.compute(a, ns)
    d = b.dma(a, hbm_ctrl(t0, 0, 0, 0), 256)
    res = run_exact(b.build())
    assert res.op_begin_ns[s] == res.op_end_ns[s] == 100.0
    assert (res.op_begin_ns[c1], res.op_end_ns[c1]) == (100.0, 100.0 + ns)
    assert (res.op_begin_ns[c2], res.op_end_ns[c2]) == (100.0 + ns, 100.0 + 2 * ns)
    assert res.op_issue_ns[d] == 100.0 + 2 * ns
    assert res.op_end_ns[d] == 100.0 + 2 * ns + 14.0
    assert res.makespan_ns == 2 * ns + 14.0


def test_compute_rejects_negative_time(t0: Tables) -> None:
    b = ProgramBuilder(t0)
    with pytest.raises(KbfastError):
        b.compute(b.pe_agent(pe_block(t0, 0, 0, 0)), -1.0)


def test_ops_table(t0: Tables) -> None:
    b = ProgramBuilder(t0)
    a = b.pe_agent(pe_block(t0, 0, 0, 3))
    b.start(a)
    b.dma(a, hbm_ctrl(t0, 0, 0, 3), 256)
    res = run_exact(b.build())
    ops = res.ops()
    assert ops["agent"].tolist() == ["sip0.cube0.pe3"] * 2
    assert ops["op"].tolist() == ["START", "DMA_WRITE"]
    assert ops["end_ns"].tolist() == [0.0, 14.0]


# --------------------------------------------------------------------------------------------------------------
def test_host_write_completes_at_hbm_finalize(t0: Tables) -> None:
    # A 256 B H2D write to sip0.cube0.hbm_ctrl.pe0 reaches the controller at 29 (derivation in
    # test_exact_handcases.py) and completes when its commit ends, 37: no response leg.  The same write
    # to pe4's slice leaves r0c0 through the cube's west UCIe endpoint, 0 mm from its connections (the kernbench
    # router's zero-length bus): r0c0 -> ucie-W.conn0 (128 GB/s, 2 ns) -> ucie-W (0.5 ns, 8 ns overhead) ->
    # ucie-W.conn2 (0.5 ns) -> r4c0 (2 ns, 2 ns router) => 37 + 15.  (pe1's slice is no farther: it enters the
    # cube at r0c1 via ucie-N.conn1.)
    b = ProgramBuilder(t0, name="h2d")
    h = b.host_agent(0)
    w0 = b.dma(h, hbm_ctrl(t0, 0, 0, 0), 256)
    w1 = b.dma(h, hbm_ctrl(t0, 0, 0, 1), 256)
    w4 = b.dma(h, hbm_ctrl(t0, 0, 0, 4), 256)
    res = run_exact(b.build())
    assert res.op_latency_ns(w0) == 37.0
    assert res.op_latency_ns(w1) == 37.0
    assert res.op_latency_ns(w4) == 37.0 + 2 + 0.5 + 8 + 0.5 + 2 + 2
    assert res.op_issue_ns[w4] == res.op_end_ns[w1]    # blocking host writes run one after another
    assert res.pcs["commits"].sum() == 3


@pytest.mark.parametrize("nbytes", [256, 4 * KiB, 64 * KiB])
def test_host_read_not_faster_than_write(tables: Tables, router: Router, nbytes: int) -> None:
    cat = build_catalogue(tables, router)
    for cube in (0, 4):
        h2d = run_exact(cat[f"H2D_CUBE{cube}"].program(tables, router, nbytes))
        d2h = run_exact(cat[f"D2H_CUBE{cube}"].program(tables, router, nbytes))
        assert d2h.op_latency_ns(0) >= h2d.op_latency_ns(0)
        assert h2d.program.agent_kind[0] == 1 and d2h.program.op_code[0] == Op.DMA_READ
        # the D2H chunk loop commits one burst per 256 B on the controller's PCs
        assert int(d2h.pcs["commits"].sum()) == -(-nbytes // 256)


def test_host_agent_has_no_channel_limit(t0: Tables) -> None:
    # Two async host writes of 256 B to different slices both begin at 0 (a PE would queue the second).
    b = ProgramBuilder(t0)
    h = b.host_agent(0)
    o1 = b.dma(h, hbm_ctrl(t0, 0, 0, 0), 256, is_async=True)
    o2 = b.dma(h, hbm_ctrl(t0, 0, 0, 1), 256, is_async=True)
    b.wait(h)
    res = run_exact(b.build())
    assert res.op_begin_ns[[o1, o2]].tolist() == [0.0, 0.0]


# --------------------------------------------------------------------------------------------------------------
def test_launch_timing_barrier(tables: Tables, router: Router) -> None:
    case = build_catalogue(tables, router)["LAUNCH_NOOP"]
    pes = np.array([f.issuer for f in case.flows], np.int64)
    lt = launch_timing(tables, router, pes)
    assert len(pes) == tables.layout.n_cubes_per_sip * len(tables.plan.pe_router)
    assert lt.pe_arrival_ns.shape == (len(pes),)
    assert np.all(lt.pe_arrival_ns <= lt.target_start_ns)
    assert lt.pe_arrival_ns.max() == lt.target_start_ns          # the farthest PE defines the barrier
    assert np.all(lt.pe_arrival_ns > lt.io_cpu_ready_ns) and lt.io_cpu_ready_ns > 0
    with pytest.raises(KbfastError):
        launch_timing(tables, router, np.zeros(0, np.int64))


def test_launch_noop_starts_every_pe_together(tables: Tables, router: Router) -> None:
    case = build_catalogue(tables, router)["LAUNCH_NOOP"]
    p = case.program(tables, router, 0)
    lt = launch_timing(tables, router, p.agent_node)
    res = run_exact(p)
    starts = res.op_begin_ns[p.op_code == Op.START]
    assert len(starts) == p.n_agents == case.n_issuers
    assert np.all(starts == lt.target_start_ns)
    assert p.launch_ns == lt.target_start_ns
    assert np.all(res.agent_finish_ns == lt.target_start_ns)
    assert starts.min() >= lt.pe_arrival_ns.max()


def test_an_event_kind_the_evaluator_does_not_handle_raises() -> None:
    """``kbfast.sim.agents.handle`` dispatches the shared kinds only; any other kind is an evaluator's bug."""
    from kbfast.sim.agents import handle, new_state
    from kbfast.sim.heap import heap_new
    from kbfast.sim.lowering import make_prog

    t = build_tables(load_system())
    b = ProgramBuilder(t, Router(t))
    b.dma(b.pe_agent(pe_block(t, 0, 0, 0)), hbm_ctrl(t, 0, 0, 0), 256, write=False)
    P = make_prog(b.build())
    S = new_state(P)
    with pytest.raises(ValueError, match="unknown event kind"):
        handle(99, 0, 0, 0.0, P, S, heap_new(64), np.int64(0), np.int64(0), np.zeros(8, np.int64), np.int64(0))
