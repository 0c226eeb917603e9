"""Cross-check: the SimPy reference (kbfast.exact.simpy_ref) against the Numba exact engine.

Both must give the same per-op timestamps (within 1e-9 relative).  The two
order simultaneous events differently (SimPy: scheduling order; Numba: time
then insertion sequence), so cases with several agents use distinct, "odd"
start times: no two flits of different transactions then reach a node at
exactly the same time, and tie order cannot change the result.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.reference.simpy_ref import run_simpy
from kbfast.ir import WAIT_ALL, ProgramBuilder
from kbfast.topology.builder import build_tables
from kbfast.topology.kinds import NodeKind
from kbfast.topology.names import node_id
from kbfast.topology.routing import Router
from conftest import both

@pytest.fixture(scope="module")
def penalty_tables():
    return build_tables(load_system(overrides={"hbm.switch_penalty_ns": 4.0}))


def pe(t, sip, cube, x):
    return node_id(t, f"sip{sip}.cube{cube}.pe{x}.pe_dma")


def ctrl(t, sip, cube, x):
    return node_id(t, f"sip{sip}.cube{cube}.hbm_ctrl.pe{x}")


def single(t, router, dst, nbytes, write=True, addr=0):
    b = ProgramBuilder(t, router)
    a = b.pe_agent(pe(t, 0, 0, 0))
    b.start(a)
    b.dma(a, dst, nbytes, addr, write=write)
    return b.build()


@pytest.mark.parametrize("nbytes, write, expect", [(16384, True, 77.0), (4096, True, 29.0),
                                                   (16384, False, 69.0), (4096, False, 21.0)])
def test_local_dma_calibration(tables, router, nbytes, write, expect):
    """A write waits for its last PC commit (8 ns); a read's response leaves once its last flit is taken."""
    ex, sp = both(single(tables, router, ctrl(tables, 0, 0, 0), nbytes, write))
    assert sp.op_end_ns[1] == pytest.approx(expect)


@pytest.mark.parametrize("nbytes", [0, 1, 255, 256, 257, 1000])
def test_partial_flits(tables, router, nbytes):
    both(single(tables, router, ctrl(tables, 0, 0, 0), nbytes, addr=100))


@pytest.mark.parametrize("write", [True, False])
def test_cross_cube(tables, router, write):
    ex, _ = both(single(tables, router, ctrl(tables, 0, 1, 3), 8192, write))
    local, _ = both(single(tables, router, ctrl(tables, 0, 0, 3), 8192, write))
    assert ex.op_end_ns[1] > local.op_end_ns[1]


def test_cross_sip_store_and_forward(tables, router):
    p = single(tables, router, ctrl(tables, 1, 5, 2), 8192)
    kinds = tables.node_kind[tables.edge_dst[p.route(p.op_route[1])]]
    assert np.sum(kinds == NodeKind.PCIE_EP) == 2          # reassembled twice
    both(p)
    both(single(tables, router, ctrl(tables, 1, 5, 2), 8192, write=False))


@pytest.mark.parametrize("is_async", [False, True])
def test_host_write_and_read(tables, router, is_async):
    b = ProgramBuilder(tables, router)
    h = b.host_agent(0)
    for c in (0, 4, 8, 12):
        b.dma(h, ctrl(tables, 0, c, 1), 4096, addr=300, is_async=is_async)
        b.dma(h, ctrl(tables, 0, c, 2), 3000 + c, write=False, is_async=is_async)
    b.dma(h, ctrl(tables, 0, 0, 1), 0, write=False, is_async=is_async)
    b.wait(h)
    both(b.build())


def test_host_cross_sip(tables, router):
    b = ProgramBuilder(tables, router)
    h = b.host_agent(1)
    b.dma(h, ctrl(tables, 0, 4, 0), 2048)
    b.dma(h, ctrl(tables, 0, 4, 0), 2048, write=False)
    both(b.build())


def contention(t, router, nbytes, starts, addr=lambda k: 0, write=lambda k: True):
    b = ProgramBuilder(t, router)
    for k, s in enumerate(starts):
        a = b.pe_agent(pe(t, 0, 0, k), start_ns=s)
        b.dma(a, ctrl(t, 0, 0, 0), nbytes, addr(k), write=write(k))
    return b.build()


def test_contention_at_one_controller(tables, router):
    ex, _ = both(contention(tables, router, 4096, [0.0, 0.3, 0.7]))
    alone = [both(contention(tables, router, 4096, [0.0, 0.3, 0.7][:1]))[0].op_end_ns[0]]
    assert ex.op_end_ns.max() > alone[0] + 20       # the streams really do share wires and PCs


def test_same_address_pc_serialization(tables, router):
    starts = [k * 1.37 for k in range(8)]
    same, _ = both(contention(tables, router, 1, starts))
    spread, _ = both(contention(tables, router, 1, starts, addr=lambda k: 256 * k))
    assert same.pcs.commits.iloc[0] == 8 and spread.pcs.commits.max() == 1
    assert same.op_end_ns.sum() > spread.op_end_ns.sum()    # later arrivals queue on PC 0


def test_switch_penalty_mixed_read_write(penalty_tables):
    t = penalty_tables
    router = Router(t)
    p = contention(t, router, 4096, [0.0, 0.45, 1.15, 2.6], write=lambda k: k % 2 == 0)
    with_penalty, _ = both(p)
    b = ProgramBuilder(t, router)
    a = b.pe_agent(pe(t, 0, 0, 0))
    for k in range(3):
        b.dma(a, ctrl(t, 0, 0, 0), 2048, addr=512 * k, is_async=True)
        b.dma(a, ctrl(t, 0, 0, 0), 2048, addr=512 * k + 128, write=False, is_async=True)
    b.wait(a)
    both(b.build())
    # The penalty matters: the same program without it finishes earlier.
    t0 = build_tables(load_system())
    p0 = contention(t0, Router(t0), 4096, [0.0, 0.45, 1.15, 2.6], write=lambda k: k % 2 == 0)
    without, _ = both(p0)
    assert with_penalty.agent_finish_ns.max() > without.agent_finish_ns.max()


def test_channel_queueing_blocking_async_wait(tables, router):
    b = ProgramBuilder(tables, router)
    a = b.pe_agent(pe(tables, 0, 0, 2), start_ns=3.0)
    dst = ctrl(tables, 0, 0, 2)
    b.start(a)
    b.dma(a, dst, 4096)                                     # blocking
    w1 = b.dma(a, dst, 4096, is_async=True)
    w2 = b.dma(a, dst, 1024, addr=4096, is_async=True)      # queues behind w1 (write channel)
    r1 = b.dma(a, ctrl(tables, 0, 0, 3), 2048, write=False, is_async=True)   # read channel, in parallel
    b.wait(a, w2)
    b.compute(a, 12.5)
    b.dma(a, dst, 512, write=False)                         # queues behind r1 if still running
    b.dma(a, dst, 300, is_async=True)
    b.wait(a)
    ex, _ = both(b.build())
    assert ex.op_begin_ns[w2] == ex.op_end_ns[w1]           # FIFO channel hand-over
    assert ex.op_begin_ns[r1] == ex.op_issue_ns[r1]


# -- random small programs ---------------------------------------------------------------

# Destinations: controllers of cube 0 and its neighbours (1 east, 4 south) in SIP 0.
CUBES = (0, 1, 4)


@st.composite
def programs(draw):
    agents = draw(st.lists(st.tuples(st.sampled_from(CUBES), st.integers(0, 7)), min_size=2, max_size=4,
                           unique=True))
    host = draw(st.booleans())
    spec = []
    for k, who in enumerate(agents + ([None] if host else [])):
        start = draw(st.integers(0, 40)) * 0.7310585 + k * 0.1414213   # "odd" offsets: no exact ties
        ops = []
        for _ in range(draw(st.integers(1, 4))):
            ops.append(("dma", draw(st.sampled_from(CUBES)), draw(st.integers(0, 7)), draw(st.integers(1, 8192)),
                        draw(st.integers(0, 8191)), draw(st.booleans()), draw(st.booleans())))
            if draw(st.integers(0, 3)) == 0:
                ops.append(("compute", draw(st.integers(0, 30)) * 0.37))
        if draw(st.booleans()):
            ops.append(draw(st.sampled_from([("wait",), ("wait_first",)])))
        spec.append((who, start, ops))
    return spec


def build_random(t, router, spec):
    """Build ``spec``, adding the agents' ops round-robin (op ids interleave across agents)."""
    b = ProgramBuilder(t, router, name="random")
    agents = [b.host_agent(0, start) if who is None else b.pe_agent(pe(t, 0, *who), start)
              for who, start, _ in spec]
    first_dma = {}
    for a in agents:
        b.start(a)
    for k in range(max(len(ops) for _, _, ops in spec)):
        for a, (_, _, ops) in zip(agents, spec):
            if k >= len(ops):
                continue
            op = ops[k]
            if op[0] == "dma":
                _, cube, x, nbytes, addr, write, is_async = op
                o = b.dma(a, ctrl(t, 0, cube, x), nbytes, addr, write=write, is_async=is_async)
                first_dma.setdefault(a, o)
            elif op[0] == "compute":
                b.compute(a, op[1])
            else:
                b.wait(a, first_dma[a] if op[0] == "wait_first" else WAIT_ALL)
    return b.build()


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=programs())
def test_random_programs_agree(tables, router, spec):
    both(build_random(tables, router, spec))


def test_deadlock_is_reported(tables, router):
    from kbfast.sim.diagnostics import ReplayDeadlock

    b = ProgramBuilder(tables, router)
    a = b.pe_agent(pe(tables, 0, 0, 0))
    b.wait(a, 1)                                            # waits for the op after itself
    b.dma(a, ctrl(tables, 0, 0, 0), 256)
    p = b.build()
    for run in (run_exact, run_simpy):
        with pytest.raises(ReplayDeadlock):
            run(p)


def test_fifo_on_infinite_bandwidth_pcie_edge(tables, router):
    """Regression: on the PCIe edges (bw = inf) all flits of a train arrive at once; a transaction put
    on the same wire at the same instant must still queue behind the whole train (wire FIFO)."""
    b = ProgramBuilder(tables, router)
    h = b.host_agent(0)
    b.dma(h, ctrl(tables, 1, 15, 3), 512, is_async=True)              # 2 flits, put first
    b.dma(h, ctrl(tables, 1, 15, 3), 1, addr=1024, is_async=True)     # 1 flit, same instant, same wires
    b.wait(h)
    both(b.build())
