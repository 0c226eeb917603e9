"""Parity contract between the fast path and exact mode (design §7).

* **P1** — where the fast path claims exactness (no two flows ever share a
  resource) its per-op times equal exact mode within 1e-9 relative: every
  single-issuer probe case at sizes from 1 B to 64 MiB, contention-free
  multi-flow programs (``sip_local_all``, dependent chains, async DMAs on both
  channels, COMPUTE gaps, PC switch history) and random isolated flows on random
  topologies (hypothesis).  For an isolated flow the lower bound equals the
  point estimate and the upper bound is >= exact.
* **P2** — on every congestion probe case, and on random contended flow sets,
  ``lower <= exact <= upper`` per op, per agent and for the makespan, and the point
  estimate of the makespan is within the per-(case, size) tolerance of
  ``P2_TOLERANCE`` below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kbfast.config import load_system
from kbfast.exact import ExactResult, run_exact
from kbfast.fast.evaluate import FastResult, run_fast
from kbfast.ir import Program, ProgramBuilder
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import ProbeCase, build_catalogue
from conftest import assert_bounds, describe, destination, le, topo  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
REL = 1e-9

# --------------------------------------------------------------------------------------------------------------
# P2 point-estimate tolerance: |fast makespan - exact makespan| / exact makespan, per (case, size), on the
# default topology (ahbm_2sip, kernbench routing, the 3 mm floor plan).  Each value is the error measured when
# this table was written (in the comment, %) rounded up to the next 0.5 % with a margin of at least 0.05 %, so the
# test pins today's accuracy and fails on any regression.  A 0.0 entry means the point estimate is exact today
# (checked to 1e-9).  Entries above the 5 % target (design §7 P2) are known gaps of the fluid max-min
# model, listed per case and size in docs/fast_path.md; they are not accepted targets.  The kernbench router
# funnels cross-cube flows through UCIe endpoints used as buses, which is where ucie_eastbound_8pe and
# sip_hotspot_pe0 lose accuracy at small sizes.  If a model change improves an entry, tighten it here.
P2_TOLERANCE: dict[str, dict[int, float]] = {
    #                      256 B   4 KiB       16 KiB       64 KiB       256 KiB       1 MiB
    "ctrl_hot_1":          {256: 0.0, 4 * KiB: 0.0, 16 * KiB: 0.0, 64 * KiB: 0.0, 256 * KiB: 0.0, MiB: 0.0},
    #                        +0.000, +0.000, +0.000, +0.000, +0.000, +0.000 (one flow)
    "ctrl_hot_2":          {256: 0.0, 4 * KiB: 0.07, 16 * KiB: 0.03, 64 * KiB: 0.01, 256 * KiB: 0.005, MiB: 0.005},
    #                        +0.000, -6.452, -2.532, -0.738, -0.192, -0.049
    "ctrl_hot_3":          {256: 0.08, 4 * KiB: 0.09, 16 * KiB: 0.0, 64 * KiB: 0.0, 256 * KiB: 0.0, MiB: 0.0},
    #                        -7.653, +8.642, +0.000, +0.000, +0.000, +0.000
    "all_pe_cube0_to_pe0": {256: 0.235, 4 * KiB: 0.055, 16 * KiB: 0.015, 64 * KiB: 0.01, 256 * KiB: 0.005,
                            MiB: 0.005},
    #                        -23.333, +5.294, -1.228, -0.474, -0.121, -0.030
    "ucie_eastbound_8pe":  {256: 0.17, 4 * KiB: 0.185, 16 * KiB: 0.09, 64 * KiB: 0.025, 256 * KiB: 0.01,
                            MiB: 0.005},
    #                        +16.762, +18.425, +8.770, +2.314, +0.587, +0.147
    "sip_hotspot_pe0":     {256: 0.175, 4 * KiB: 0.055, 16 * KiB: 0.015, 64 * KiB: 0.005, 256 * KiB: 0.005,
                            MiB: 0.005},
    #                        +17.290, +5.267, +1.396, +0.354, +0.089, +0.022
}
P2_SIZES = (256, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB)

# P1: every single-issuer, contention-free probe case of the default topology (checked against the
# catalogue in test_p1_case_list_is_complete) and the sizes, with partial flits around one flit.
P1_CASES = (
    "SAME_CUBE_PE_LOCAL", "SAME_CUBE_PE_REMOTE_BEST", "SAME_CUBE_PE_REMOTE_WORST",
    "REMOTE_CUBE_PE_REMOTE_BEST", "REMOTE_CUBE_PE_REMOTE_WORST", "REMOTE_SIP",
    "PROBE_PE_SAME_HALF", "PROBE_PE_CROSS_HALF",
    "H2D_CUBE0", "D2H_CUBE0", "H2D_CUBE4", "D2H_CUBE4", "H2D_CUBE8", "D2H_CUBE8", "H2D_CUBE12", "D2H_CUBE12",
)
P1_SIZES = (1, 255, 256, 257, 4 * KiB, 16 * KiB, 1 * MiB, 64 * MiB)


# --------------------------------------------------------------------------------------------------------------
# helpers
def close(a: np.ndarray | float, b: np.ndarray | float, rel: float = REL) -> np.ndarray:
    """Elementwise |a - b| <= rel * max(|a|, |b|) (with a 1e-12 ns floor for zero times)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.abs(a - b) <= rel * np.maximum(np.abs(a), np.abs(b)) + 1e-12


def assert_p1(p: Program, isolated: bool = False) -> tuple[FastResult, ExactResult]:
    """Fast == exact per op (issue, begin, end), bounds bracket exact; lo == point for isolated flows."""
    ex, fast = run_exact(p), run_fast(p)
    assert not fast.shared, f"{p.name}: the fast path saw shared resources in a contention-free program"
    bad = ~close(fast.op_end_ns, ex.op_end_ns)
    assert not bad.any(), describe(p, fast, ex, bad)
    assert close(fast.op_issue_ns, ex.op_issue_ns).all(), p.name
    assert close(fast.op_begin_ns, ex.op_begin_ns).all(), p.name
    assert close(fast.agent_finish_ns, ex.agent_finish_ns).all(), p.name
    assert close(fast.makespan_ns, ex.makespan_ns)
    assert le(fast.op_end_lo_ns, ex.op_end_ns).all(), describe(p, fast, ex, ~le(fast.op_end_lo_ns, ex.op_end_ns))
    assert le(ex.op_end_ns, fast.op_end_hi_ns).all(), describe(p, fast, ex, ~le(ex.op_end_ns, fast.op_end_hi_ns))
    if isolated:
        assert close(fast.op_end_lo_ns, fast.op_end_ns).all(), describe(p, fast, ex, ~close(fast.op_end_lo_ns,
                                                                                             fast.op_end_ns))
        assert close(fast.makespan_lo_ns, fast.makespan_ns)
    return fast, ex


@pytest.fixture(scope="module")
def catalogue(tables: Tables, router: Router) -> dict[str, ProbeCase]:
    return build_catalogue(tables, router)


@pytest.fixture(scope="module")
def t_sw() -> Tables:
    """Default topology with a 4 ns HBM read/write turnaround penalty."""
    return build_tables(load_system(overrides={"hbm.switch_penalty_ns": 4.0}))


# --------------------------------------------------------------------------------------------------------------
# P1: single-issuer probe cases
def test_p1_case_list_is_complete(catalogue: dict[str, ProbeCase]) -> None:
    single = {n for n, c in catalogue.items() if c.group in ("no_congestion", "probe", "host") and c.n_issuers == 1}
    assert single == set(P1_CASES)


@pytest.mark.parametrize(("name", "nbytes"), [(n, b) for n in P1_CASES for b in P1_SIZES],
                         ids=[f"{n}-{b}B" for n in P1_CASES for b in P1_SIZES])
def test_p1_probe_single_issuer(tables: Tables, router: Router, catalogue: dict[str, ProbeCase], name: str,
                                nbytes: int) -> None:
    p = catalogue[name].program(tables, router, nbytes)
    assert p.n_ops == 1
    fast, ex = assert_p1(p, isolated=True)
    assert close(fast.op_latency_ns(0), ex.op_latency_ns(0))
    assert le(ex.op_latency_ns(0), fast.op_end_hi_ns[0] - fast.op_issue_ns[0])


# --------------------------------------------------------------------------------------------------------------
# P1: contention-free multi-flow programs
@pytest.mark.parametrize("nbytes", [1, 257, 4 * KiB, 64 * KiB])
def test_p1_sip_local_all(tables: Tables, router: Router, catalogue: dict[str, ProbeCase], nbytes: int) -> None:
    """128 PEs, each to its own slice: disjoint routes, so every flow keeps its isolated latency."""
    assert_p1(catalogue["sip_local_all"].program(tables, router, nbytes))


def _blocking_chain(t: Tables, router: Router, name: str) -> Program:
    """One PE, blocking DMAs in sequence to controllers of its cube, other cubes and the other SIP."""
    b = ProgramBuilder(t, router, name=name)
    a = b.pe_agent(pe_block(t, 0, 0, 0))
    b.start(a)
    dsts = [(0, 0, 0), (0, 0, 3), (0, 1, 5), (0, 15, 7), (1, 0, 2), (0, 0, 0), (1, 9, 6)]
    for k, (sip, cube, pe) in enumerate(dsts):
        b.dma(a, hbm_ctrl(t, sip, cube, pe), 3000 + 997 * k, 777 * k, write=k % 3 != 1)
        if k % 2:
            b.compute(a, 13.5 + k)
    return b.build()


def _async_both_channels(t: Tables, router: Router, name: str) -> Program:
    """Async DMAs on the write and read channels that never overlap in time on a shared wire.

    Each channel queues its DMAs FIFO (capacity 1, held through the round trip); COMPUTE gaps longer
    than the outstanding transfers separate the write phase from the read phase.
    """
    b = ProgramBuilder(t, router, name=name)
    a = b.pe_agent(pe_block(t, 0, 0, 0))
    ws = [b.dma(a, hbm_ctrl(t, 0, 0, k), 2048 + 5 * k, 256 * k + 3, write=True, is_async=True) for k in range(4)]
    b.compute(a, 500.0)
    rs = [b.dma(a, hbm_ctrl(t, 0, 2, k), 1500 + 11 * k, 100 * k, write=False, is_async=True) for k in range(3)]
    b.wait(a, rs[1])
    b.wait(a, ws[0])
    b.wait(a)
    b.compute(a, 7.25)
    last = b.dma(a, hbm_ctrl(t, 1, 3, 1), 4096, 0, write=True, is_async=True)
    b.wait(a, last)
    return b.build()


def _parallel_disjoint_chains(t: Tables, router: Router, name: str) -> Program:
    """Several PEs (and the host) at once, each with a chain on its own resources."""
    b = ProgramBuilder(t, router, name=name)
    for cube, pe in ((0, 0), (0, 5), (3, 2), (10, 7)):
        a = b.pe_agent(pe_block(t, 0, cube, pe), start_ns=1.5 * pe)
        b.start(a)
        for k in range(3):
            b.dma(a, hbm_ctrl(t, 0, cube, pe), 1024 * (k + 1) + pe, 4096 * k, write=k != 1)
            b.compute(a, 3.0 * k)
        w = b.dma(a, hbm_ctrl(t, 0, cube, pe), 999, 0, write=True, is_async=True)
        b.compute(a, 1000.0)
        r = b.dma(a, hbm_ctrl(t, 0, cube, pe), 1001, 512, write=False, is_async=True)
        b.wait(a, w)
        b.wait(a, r)
    h = b.host_agent(1)
    b.dma(h, hbm_ctrl(t, 1, 0, 0), 8192, 0, write=True)
    b.dma(h, hbm_ctrl(t, 1, 4, 0), 5000, 3, write=False)
    return b.build()


def _switch_history(t: Tables, router: Router, name: str) -> Program:
    """Write, then read back and rewrite the same PCs: the read/write turnaround depends on history."""
    b = ProgramBuilder(t, router, name=name)
    a = b.pe_agent(pe_block(t, 0, 0, 1))
    ctrl = hbm_ctrl(t, 0, 0, 1)
    b.dma(a, ctrl, 4096, 0, write=True)
    b.dma(a, ctrl, 2048, 512, write=False)
    b.dma(a, ctrl, 300, 256, write=False)
    b.dma(a, ctrl, 5000, 0, write=True)
    h = b.host_agent(0, start_ns=20_000.0)
    b.dma(h, ctrl, 1024, 1024, write=False)
    b.dma(h, ctrl, 700, 1024, write=True)
    return b.build()


CHAINS = {"blocking_chain": _blocking_chain, "async_both_channels": _async_both_channels,
          "parallel_disjoint_chains": _parallel_disjoint_chains, "switch_history": _switch_history}


@pytest.mark.parametrize("penalty", [False, True], ids=["no_penalty", "switch_penalty"])
@pytest.mark.parametrize("kind", list(CHAINS))
def test_p1_chains(tables: Tables, router: Router, t_sw: Tables, kind: str, penalty: bool) -> None:
    t = t_sw if penalty else tables
    assert_p1(CHAINS[kind](t, router, f"{kind}{'+penalty' if penalty else ''}"))


# --------------------------------------------------------------------------------------------------------------
# P1 with hypothesis: isolated flows over random topologies


bandwidths = st.one_of(st.sampled_from([16.0, 64.0, 128.0, 256.0, 512.0, math.inf]),
                       st.floats(4.0, 2048.0, allow_nan=False))
overheads = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 5.0, 8.0]), st.floats(0.0, 40.0, allow_nan=False))


@st.composite
def topologies(draw) -> dict:
    return {
        "sips.count": draw(st.integers(1, 16)),
        "sips.topology": "ring_1d",
        "sip.cube_mesh.w": draw(st.sampled_from([1, 1, 2, 2, 3, 4, 4, 6])),
        "sip.cube_mesh.h": draw(st.sampled_from([1, 1, 2, 2, 3, 4, 4, 6])),
        "link.router_mesh.bw_gbs": draw(bandwidths),
        "link.ucie_conn.bw_gbs": draw(bandwidths),
        "link.pe_to_router.bw_gbs": draw(bandwidths),
        "link.pcie.bw_gbs": draw(bandwidths),
        "overhead_ns.router": draw(overheads),
        "overhead_ns.ucie": draw(overheads),
        "overhead_ns.pcie_ep": draw(overheads),
        "fabric.ns_per_mm": draw(st.one_of(st.sampled_from([0.0, 2.5]), st.floats(0.0, 10.0, allow_nan=False))),
    }


@st.composite
def isolated_flows(draw) -> tuple[dict, dict]:
    ov = draw(topologies())
    flow = {
        "host": draw(st.booleans()),
        "write": draw(st.booleans()),
        "nbytes": draw(st.one_of(st.integers(1, 2 * MiB), st.sampled_from([1, 255, 256, 257, 4096]))),
        "aligned": draw(st.booleans()),
        "addr": draw(st.integers(0, (1 << 30) - 1)),
        "where": draw(st.sampled_from(["same_cube", "other_cube", "other_sip"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }
    return ov, flow


def _isolated_program(t: Tables, router: Router, flow: dict) -> Program:
    lay = t.layout
    rng = np.random.default_rng(flow["seed"])
    n_pe = len(t.plan.pe_router)
    src_sip, src_cube = int(rng.integers(lay.n_sips)), int(rng.integers(lay.n_cubes_per_sip))
    dst_sip, dst_cube = destination(t, rng, flow["where"], src_sip, src_cube)
    addr = flow["addr"] & ~255 if flow["aligned"] else flow["addr"]
    b = ProgramBuilder(t, router, name=f"isolated:{flow}")
    a = b.host_agent(src_sip) if flow["host"] else b.pe_agent(pe_block(t, src_sip, src_cube, int(rng.integers(n_pe))))
    b.dma(a, hbm_ctrl(t, dst_sip, dst_cube, int(rng.integers(n_pe))), flow["nbytes"], addr, write=flow["write"])
    return b.build()


_SMALLEST = {"sips.count": 1, "sips.topology": "ring_1d", "sip.cube_mesh.w": 1, "sip.cube_mesh.h": 1,
             "link.router_mesh.bw_gbs": 256.0, "link.ucie_conn.bw_gbs": 128.0, "link.pe_to_router.bw_gbs": 256.0,
             "link.pcie.bw_gbs": math.inf, "overhead_ns.router": 2.0, "overhead_ns.ucie": 8.0,
             "overhead_ns.pcie_ep": 5.0, "fabric.ns_per_mm": 2.5}
_LARGEST = {**_SMALLEST, "sips.count": 16, "sip.cube_mesh.w": 6, "sip.cube_mesh.h": 6,
            "link.pcie.bw_gbs": 64.0, "link.ucie_conn.bw_gbs": 33.3, "overhead_ns.pcie_ep": 17.5}
_FLOW = {"host": False, "write": True, "nbytes": 5000, "aligned": False, "addr": 12345, "where": "other_sip",
         "seed": 7}


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(isolated_flows())
@example((_SMALLEST, _FLOW))
@example((_SMALLEST, {**_FLOW, "host": True, "write": False, "nbytes": 257}))
@example((_LARGEST, _FLOW))
@example((_LARGEST, {**_FLOW, "host": True, "write": False, "nbytes": 70_001, "aligned": True}))
@example(({**_LARGEST, "sip.cube_mesh.h": 1, "link.router_mesh.bw_gbs": math.inf,
           "link.pe_to_router.bw_gbs": math.inf, "link.ucie_conn.bw_gbs": math.inf}, {**_FLOW, "where": "other_cube"}))
def test_p1_random_isolated_flow(case: tuple[dict, dict]) -> None:
    ov, flow = case
    t, router = topo(ov)
    assert_p1(_isolated_program(t, router, flow), isolated=True)


# --------------------------------------------------------------------------------------------------------------
# P2: congestion probe cases
def _p2_params():
    for name, tol in P2_TOLERANCE.items():
        for nbytes in P2_SIZES:
            yield pytest.param(name, nbytes, tol[nbytes], id=f"{name}-{nbytes}B")


@pytest.mark.parametrize(("name", "nbytes", "tol"), list(_p2_params()))
def test_p2_congestion_probe(tables: Tables, router: Router, catalogue: dict[str, ProbeCase], name: str, nbytes: int,
                             tol: float, record_property) -> None:
    p = catalogue[name].program(tables, router, nbytes)
    fast, ex = assert_bounds(p)
    err = abs(fast.makespan_ns - ex.makespan_ns) / ex.makespan_ns
    record_property("point_rel_err", err)
    assert err <= tol + REL, (f"{name} @ {nbytes} B: point estimate {fast.makespan_ns} vs exact {ex.makespan_ns} "
                              f"is off by {100 * err:.3f} % (tolerance {100 * tol:.3f} %)")


def test_p2_tolerance_table_covers_congestion_cases(catalogue: dict[str, ProbeCase]) -> None:
    congested = {n for n, c in catalogue.items() if c.group == "congestion"} - {"sip_local_all"}
    assert congested == set(P2_TOLERANCE)


# P2 with hypothesis: random contended flow sets on cubes 0 and 1 of the default topology
@st.composite
def flow_sets(draw) -> list[dict]:
    n_pe = draw(st.integers(2, 8))
    pes = draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 7)), min_size=n_pe, max_size=n_pe,
                        unique=True))
    cubes = draw(st.sampled_from([(0,), (1,), (0, 1)]))
    agents = []
    for cube, pe in pes:
        ops = []
        for _ in range(draw(st.integers(1, 3))):
            ops.append({
                "cube": draw(st.sampled_from(cubes)), "pe": draw(st.integers(0, 7)),
                "nbytes": draw(st.one_of(st.integers(1, 64 * KiB), st.sampled_from([256, 4096, 16384]))),
                "addr": draw(st.one_of(st.integers(0, 1 << 24), st.integers(0, 64).map(lambda k: 256 * k))),
                "write": draw(st.booleans()), "async": draw(st.booleans()),
            })
        agents.append({"cube": cube, "pe": pe, "start": draw(st.sampled_from([0.0, 0.0, 3.0, 17.5])), "ops": ops,
                       "gap": draw(st.sampled_from([0.0, 0.0, 10.0, 100.0]))})
    return agents


def _flow_set_program(t: Tables, router: Router, agents: list[dict]) -> Program:
    b = ProgramBuilder(t, router, name="flow_set")
    for ag in agents:
        a = b.pe_agent(pe_block(t, 0, ag["cube"], ag["pe"]), start_ns=ag["start"])
        b.start(a)
        for k, op in enumerate(ag["ops"]):
            b.dma(a, hbm_ctrl(t, 0, op["cube"], op["pe"]), op["nbytes"], op["addr"], write=op["write"],
                  is_async=op["async"])
            if k == 0 and ag["gap"] > 0:
                b.compute(a, ag["gap"])
        b.wait(a)
    return b.build()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(flow_sets(), st.booleans())
def test_p2_random_flow_sets_bounds(tables: Tables, router: Router, t_sw: Tables, agents: list[dict],
                                    penalty: bool) -> None:
    assert_bounds(_flow_set_program(t_sw if penalty else tables, router, agents))


# P2 with hypothesis: mixed programs (PEs and hosts, reads and writes, cross-cube and cross-SIP) on random
# small topologies, with and without the HBM read/write turnaround penalty.
@st.composite
def mixed_programs(draw) -> Program:
    ov = draw(topologies())
    ov.update({"sips.count": draw(st.integers(1, 3)), "sip.cube_mesh.w": draw(st.integers(1, 3)),
               "sip.cube_mesh.h": draw(st.integers(1, 2)),
               "hbm.switch_penalty_ns": draw(st.sampled_from([0.0, 0.0, 4.0, 13.0]))})
    t, router = topo(ov)
    lay = t.layout
    b = ProgramBuilder(t, router, name="mixed")
    for _ in range(draw(st.integers(2, 6))):
        sip = draw(st.integers(0, lay.n_sips - 1))
        start = draw(st.sampled_from([0.0, 5.0]))
        if draw(st.integers(0, 4)) == 0:
            a = b.host_agent(sip, start_ns=start)
        else:
            a = b.pe_agent(pe_block(t, sip, draw(st.integers(0, lay.n_cubes_per_sip - 1)), draw(st.integers(0, 7))),
                           start_ns=start)
        for _ in range(draw(st.integers(1, 3))):
            dst = hbm_ctrl(t, draw(st.integers(0, lay.n_sips - 1)), draw(st.integers(0, lay.n_cubes_per_sip - 1)),
                           draw(st.integers(0, 7)))
            b.dma(a, dst, draw(st.integers(1, 40_000)), draw(st.integers(0, 1 << 20)), write=draw(st.booleans()),
                  is_async=draw(st.booleans()))
            if draw(st.booleans()):
                b.compute(a, draw(st.sampled_from([1.0, 30.0, 200.0])))
        b.wait(a)
    return b.build()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixed_programs())
def test_p2_random_mixed_programs_bounds(p: Program) -> None:
    assert_bounds(p)


# The point estimate should stay inside the fast path's own bounds.
# * node_only_sharing (regression test): two 1-byte PE reads that share only the serial worker of
#   sip0.cube1.r0c0 (no shared wire) and never meet in exact mode.  head_offsets() used to return 0 for a
#   flow without a shared *edge*, so the far flow joined the fluid at its start and both were throttled on
#   that worker from t = 0 (exact = lower bound = 128.05 / 26.01 ns, upper 130.05 / 28.01 ns, point
#   132.04 / 30.01 ns).  Fixed in 60f8217 (head offsets also stop at shared node workers).
# * hot_ctrl_reads (regression test): three PEs read 1-2 B from sip0.cube0.hbm_ctrl.pe0 while pe2 also
#   writes 1 B to its own slice; the fluid put pe2's write at 27.51 ns, above its upper bound 26.52 ns
#   (exact 26.51 ns).  run_fast now clamps the point estimate into its (valid) bounds.
def _node_only_sharing(t: Tables, router: Router) -> Program:
    b = ProgramBuilder(t, router, name="node_only_sharing")
    b.dma(b.pe_agent(pe_block(t, 0, 0, 0)), hbm_ctrl(t, 0, 1, 0), 1, 0, write=False)
    b.dma(b.pe_agent(pe_block(t, 0, 1, 0)), hbm_ctrl(t, 0, 1, 1), 1, 0, write=False)
    return b.build()


def _hot_ctrl_reads(t: Tables, router: Router) -> Program:
    b = ProgramBuilder(t, router, name="hot_ctrl_reads")
    b.dma(b.pe_agent(pe_block(t, 0, 0, 0)), hbm_ctrl(t, 0, 0, 0), 1, 0, write=False)
    a = b.pe_agent(pe_block(t, 0, 0, 2))
    b.dma(a, hbm_ctrl(t, 0, 0, 0), 2, 0, write=False, is_async=True)
    b.dma(a, hbm_ctrl(t, 0, 0, 2), 1, 0, write=True)
    b.dma(b.pe_agent(pe_block(t, 0, 0, 1)), hbm_ctrl(t, 0, 0, 0), 1, 0, write=False)
    return b.build()


@pytest.mark.parametrize("build", [
    pytest.param(_node_only_sharing, id="node_only_sharing"),
    pytest.param(_hot_ctrl_reads, id="hot_ctrl_reads"),
])
def test_point_estimate_within_bounds(tables: Tables, router: Router, build) -> None:
    fast, ex = assert_bounds(build(tables, router))
    assert le(fast.op_end_lo_ns, fast.op_end_ns).all(), (fast.op_end_lo_ns, fast.op_end_ns)
    assert le(fast.op_end_ns, fast.op_end_hi_ns).all(), (fast.op_end_ns, fast.op_end_hi_ns)
