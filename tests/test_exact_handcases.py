"""Exact-mode replay against cases derived by hand from the spec (spec_memory §4.3–§4.5, §10.2; spec_fabric §8).

Unless stated otherwise the system is the default topology with propagation zeroed
(``fabric.ns_per_mm = 0``), which is the setting of spec_memory §10.2.  The
parameters the derivations use (checked in ``test_assumptions``):

* links pe_dma -> router, router -> router, router -> hbm_ctrl: 256 GB/s, so a
  full 256 B flit occupies a wire for 1 ns and a ``b``-byte partial flit ``b/256`` ns;
* router overhead 2 ns (paid once per transaction, on its first flit; the worker
  is serial: ``s = max(arrival, free)``), pe_dma and hbm_ctrl overhead 0;
* HBM: 8 PCs, 256 B bursts, ``commit = 256 B / 32 GB/s = 8 ns`` per flit, flit
  ``i`` of a transfer at ``addr`` goes to PC ``((addr + 256 i) >> 8) & 7``;
* the zero-byte PE DMA response retraces the route: propagation (0) plus the
  overhead of every intermediate node (2 ns per router), plus pe_dma's own (0).

Every assertion is exact (``==``, or ``abs < 1e-9``): all the times below are
sums of binary fractions, so the float arithmetic is exact.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kbfast.config import load_system
from kbfast.exact import ExactResult, run_exact
from kbfast.ir import ProgramBuilder
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.kinds import NodeKind
from kbfast.topology.names import hbm_ctrl, io_node, node_id, node_name, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import build_catalogue

KiB = 1024
EPS = 1e-9
NO_PROP = {"fabric.ns_per_mm": 0.0}


@pytest.fixture(scope="module")
def t0() -> Tables:
    """Default topology, propagation zeroed."""
    return build_tables(load_system(overrides=NO_PROP))


@pytest.fixture(scope="module")
def r0(t0: Tables) -> Router:
    return Router(t0)


@pytest.fixture(scope="module")
def t_sw() -> Tables:
    """Propagation zeroed and a 4 ns read/write turnaround penalty; reads wait for their last commit
    (``hbm.read_response: committed``), so the turnaround shows in their latency."""
    return build_tables(load_system(overrides={**NO_PROP, "hbm.switch_penalty_ns": 4.0,
                                               "hbm.read_response": "committed"}))


def single_dma(t: Tables, pe: int, ctrl: int, nbytes: int, addr: int = 0, write: bool = True) -> ExactResult:
    """sip0.cube0.pe{pe} DMAs ``nbytes`` to sip0.cube0.hbm_ctrl.pe{ctrl} (blocking), nothing else."""
    b = ProgramBuilder(t, name=f"pe{pe}->ctrl{ctrl}@{nbytes}")
    a = b.pe_agent(pe_block(t, 0, 0, pe))
    b.dma(a, hbm_ctrl(t, 0, 0, ctrl), nbytes, addr, write=write)
    return run_exact(b.build())


def used_pcs(res: ExactResult) -> pd.DataFrame:
    return res.pcs[res.pcs["commits"] > 0].reset_index(drop=True)


# --------------------------------------------------------------------------------------------------------------
def test_assumptions(t0: Tables, r0: Router) -> None:
    """The parameters the hand derivations below rely on."""
    spec = t0.spec
    assert spec.fabric.flit_bytes == 256
    assert spec.fabric.ns_per_mm == 0.0
    assert spec.hbm.pcs_per_pe == 8 and spec.hbm.burst_bytes == 256
    assert spec.pc_bw_gbs == 32.0          # commit = 256 / 32 = 8 ns
    assert spec.hbm.switch_penalty_ns == 0.0
    for pe, ctrl, n_routers in ((0, 0, 1), (0, 1, 2)):
        src, dst = pe_block(t0, 0, 0, pe), hbm_ctrl(t0, 0, 0, ctrl)
        edges = r0.route(src, dst, "pe_dma")
        nodes = t0.edge_dst[edges]
        assert len(edges) == n_routers + 1
        assert np.all(t0.edge_bw_gbs[edges] == 256.0)
        assert np.all(t0.edge_prop_ns[edges] == 0.0)
        assert t0.node_overhead_ns[src] == 0.0
        assert np.all(t0.node_kind[nodes[:-1]] == NodeKind.ROUTER)
        assert np.all(t0.node_overhead_ns[nodes[:-1]] == 2.0)
        assert np.all(t0.node_flit_aware[nodes])
        assert t0.node_overhead_ns[dst] == 0.0
    assert node_name(t0, int(r0.route_nodes(pe_block(t0, 0, 0, 0), hbm_ctrl(t0, 0, 0, 1), "pe_dma")[1])) \
        == "sip0.cube0.r0c0"


# --------------------------------------------------------------------------------------------------------------
# spec_memory §10.2 (A)/(B): pe0 -> own slice through one router r0c0.
#   wire pe_dma->r0c0 delivers flit i at i+1; r0c0 pays 2 ns on flit 0 and forwards it at 3,
#   later flits as they come; wire r0c0->ctrl delivers flit i at 4+i.  Flit i -> PC i mod 8,
#   freed by flit i-8 at (4+i-8)+8 = 4+i: never waits, commit ends at 12+i.  Last flit n-1: 11+n.
#   Zero-byte response crosses r0c0: +2  =>  latency = n_flits + 13.
@pytest.mark.parametrize(("nbytes", "expected"), [(16 * KiB, 77.0), (4 * KiB, 29.0), (256, 14.0), (64 * KiB, 269.0)])
def test_local_pe_dma(t0: Tables, nbytes: int, expected: float) -> None:
    res = single_dma(t0, 0, 0, nbytes)
    assert expected == nbytes // 256 + 13
    assert res.op_latency_ns(0) == expected
    assert res.op_issue_ns[0] == 0.0 and res.op_begin_ns[0] == 0.0
    assert res.makespan_ns == expected
    # n flits spread over the 8 PCs in turn, never queued (spec_memory §4.4, sequential addresses).
    pcs = res.pcs
    n = nbytes // 256
    assert len(pcs) == 8 and pcs["controller"].eq("sip0.cube0.hbm_ctrl.pe0").all()
    assert pcs["commits"].tolist() == [n // 8 + (1 if p < n % 8 else 0) for p in range(8)]
    assert (pcs["busy_ns"] == 8.0 * pcs["commits"]).all()
    assert (pcs["max_backlog_ns"] == 0.0).all()


def test_local_pe_dma_read_skips_the_last_commit(t0: Tables) -> None:
    # spec_memory §4.1 note: a PE DMA read carries nbytes forward too.  Its response leaves when the controller
    # took the last flit (hbm.read_response: accepted): 64 + 2 (router) + 1 (flit time) = 67, +2 = 69, the
    # write's 77 less its last 8 ns commit; under ``committed`` it costs what the write costs.
    assert single_dma(t0, 0, 0, 16 * KiB, write=False).op_latency_ns(0) == 69.0
    committed = build_tables(load_system(overrides={**NO_PROP, "hbm.read_response": "committed"}))
    assert single_dma(committed, 0, 0, 16 * KiB, write=False).op_latency_ns(0) == 77.0


# --------------------------------------------------------------------------------------------------------------
# One extra mesh hop: pe0 -> hbm_ctrl.pe1, route pe0.pe_dma -> r0c0 -> r0c1 -> hbm_ctrl.pe1.
#   flit i reaches r0c0 at i+1; r0c0 forwards flit 0 at 1+2 = 3, flit i reaches r0c1 at 4+i (+1 flit time);
#   r0c1 pays 2 ns on flit 0: forwards at 6, flit i reaches the controller at 7+i (+1 flit time);
#   commit ends 15+i, last (n-1): 14+n; response crosses r0c1 and r0c0: +2 +2  =>  n + 18,
#   i.e. the local n + 13 plus 2 (router) + 1 (flit time) + 2 (response router) = +5.
@pytest.mark.parametrize("nbytes", [256, 4 * KiB, 16 * KiB, 64 * KiB])
def test_one_extra_mesh_hop(t0: Tables, nbytes: int) -> None:
    n = nbytes // 256
    local = single_dma(t0, 0, 0, nbytes).op_latency_ns(0)
    hop = single_dma(t0, 0, 1, nbytes).op_latency_ns(0)
    assert hop == n + 18
    assert hop - local == 2 + 1 + 2


def test_one_extra_mesh_hop_with_propagation() -> None:
    # Default topology with propagation on (2.5 ns/mm): the r0c0 <-> r0c1 wires add their propagation once on
    # the way there and once on the response; everything else as above.  16 KiB: 64 + 18 + 2 * prop.
    tables = build_tables(load_system(overrides={"fabric.ns_per_mm": 2.5}))
    router = Router(tables)
    e = router.route(node_id(tables, "sip0.cube0.r0c0"), node_id(tables, "sip0.cube0.r0c1"), "pe_dma")
    back = router.route(node_id(tables, "sip0.cube0.r0c1"), node_id(tables, "sip0.cube0.r0c0"), "pe_dma")
    assert len(e) == 1 and len(back) == 1
    prop_there, prop_back = float(tables.edge_prop_ns[e[0]]), float(tables.edge_prop_ns[back[0]])
    assert prop_there > 0
    local_edges = router.route(pe_block(tables, 0, 0, 0), hbm_ctrl(tables, 0, 0, 1), "pe_dma")
    assert float(tables.edge_prop_ns[local_edges].sum()) == prop_there  # only the mesh wire is long
    res = single_dma(tables, 0, 1, 16 * KiB)
    assert abs(res.op_latency_ns(0) - (64 + 18 + prop_there + prop_back)) < EPS
    assert single_dma(tables, 0, 0, 16 * KiB).op_latency_ns(0) == 77.0  # local path: no long wires


# --------------------------------------------------------------------------------------------------------------
# Partial flits, local path.  A b-byte flit occupies a 256 GB/s wire for b/256 ns; the PC commit is
# always 8 ns (spec_memory §4.3 uses one chunk_time per flit).
#   1 flit of b bytes: reaches r0c0 at b/256, forwarded at 2 + b/256, reaches the controller at
#     2 + 2b/256, commit ends 10 + 2b/256, response +2  =>  12 + 2b/256.
#       1 B   -> 12 + 2/256   = 12.0078125
#       255 B -> 12 + 510/256 = 13.9921875
#   n >= 2 flits, last one b bytes: full flits i < n-1 as in (A) (controller at 4+i); the last flit leaves
#     pe_dma at n-1 (train departures are back to back), reaches r0c0 at n-1 + b/256 and is forwarded at
#     max(n-1 + b/256, 3); the r0c0->ctrl wire is busy until 4 + (n-2) = n+2 with flit n-2, so it reaches
#     the controller at n+2 + b/256.  Its PC ((n-1) mod 8) was last used by flit n-9 (if n >= 9), which
#     ended its commit at 12 + (n-9) = n+3: the short flit arrives before its PC is free (the commit takes
#     8 ns whatever the flit size) and waits 1 - b/256 ns.
#     Commit ends max(n+2 + b/256, n+3) + 8, response +2:
#       257 B  (n=2,  b=1; PC 1 unused) -> 2 + 12 + 1/256 = 14.00390625
#       4097 B (n=17, b=1; PC 0 busy until 20) -> 20 + 8 + 2 = 30 (= n + 13, as if the flit were full),
#              PC 0 backlog 20 - (19 + 1/256) = 0.99609375
PARTIAL_BACKLOG = {1: 0.0, 255: 0.0, 257: 0.0, 4097: 1 - 1 / 256}


@pytest.mark.parametrize(("nbytes", "expected"), [
    (1, 12 + 2 / 256), (255, 12 + 510 / 256), (257, 14 + 1 / 256), (4097, 30.0),
])
def test_partial_flits(t0: Tables, nbytes: int, expected: float) -> None:
    res = single_dma(t0, 0, 0, nbytes)
    assert abs(res.op_latency_ns(0) - expected) < EPS
    n = -(-nbytes // 256)
    assert int(res.pcs["commits"].sum()) == n
    assert float(res.pcs["busy_ns"].sum()) == 8.0 * n
    assert float(res.pcs["max_backlog_ns"].max()) == PARTIAL_BACKLOG[nbytes]
    # the bytes on the wires are the payload, not whole flits
    fwd = res.edges[res.edges["bytes"] > 0]
    assert len(fwd) == 2 and (fwd["bytes"] == nbytes).all()


def test_zero_byte_dma_is_a_control_message(t0: Tables) -> None:
    # 0 bytes: no flits, no wire time, no PC commit (the request pays the intermediate router, 2 ns, and the
    # controller finishes at arrival + 0), response +2  =>  4 ns.
    res = single_dma(t0, 0, 0, 0)
    assert res.op_latency_ns(0) == 4.0
    assert int(res.pcs["commits"].sum()) == 0
    assert float(res.edges["bytes"].sum()) == 0.0


# --------------------------------------------------------------------------------------------------------------
# Same-address serialisation (spec_memory §4.5, §10.2 (F)): every PE of cube0 writes one 256 B flit to
# hbm_ctrl.pe0.  Routes (prop 0; routers on the path): pe0 1 (r0c0), pe1 2 (r0c1), pe4 5 (r4c0..r1c0),
# pe2 6 (r1c4..r1c0), pe5 6 (r4c1, r4c0..r1c0), pe3 7 (r1c5..r1c0), pe6 10 (r5c4..r5c0, r4c0..r1c0),
# pe7 11 (r5c5..r5c0, r4c0..r1c0), all ending r0c0 -> hbm_ctrl.pe0.
# A lone single-flit transfer crossing k routers reaches the controller at 1 + 3k (1 ns wire + 2 ns router
# per router).  The serial router workers (s = max(arrival, free) + 2) delay the merging flows:
#   r0c0: pe0 at 1 -> 3 (ctrl 4); pe1 at 4 (from r0c1) -> 6 (ctrl 7).
#   r1c0 inputs (nobody waits before r1c0: where two flows share a router, the second arrives 1 ns after
#   the first was served): 1 + 3 x routers before r1c0 = pe4 10, pe2 13, pe5 13, pe3 16, pe6 25, pe7 28.
#   r1c0 serves: pe4 12, the 13-13 tie 15 and 17 (either order), pe3 19, pe6 27, pe7 30;
#   r0c0 then forwards at 15, 18, 20, 22, 30, 33  =>  controller arrivals 16, 19, 21, 23, 31, 34.
# Sorted controller arrivals: 4, 7, 16, 19, 21, 23, 31, 34 (independent of the tie order).
ARRIVALS = [4.0, 7.0, 16.0, 19.0, 21.0, 23.0, 31.0, 34.0]


def eight_pes_one_ctrl(t: Tables, stride: int) -> tuple[ExactResult, np.ndarray]:
    """pe0..pe7 of cube0 each write 256 B at address ``pe * stride`` of hbm_ctrl.pe0; also returns each
    op's response latency (overhead of the intermediate nodes of its reverse route; prop is 0)."""
    b = ProgramBuilder(t, name=f"8pe_stride{stride}")
    for pe in range(8):
        b.dma(b.pe_agent(pe_block(t, 0, 0, pe)), hbm_ctrl(t, 0, 0, 0), 256, pe * stride)
    p = b.build()
    resp = np.array([float(t.node_overhead_ns[t.edge_dst[p.route(int(p.op_rroute[o]))[:-1]]].sum())
                     for o in range(p.n_ops)])
    return run_exact(p), resp


def test_same_address_serialises_on_one_pc(t0: Tables) -> None:
    # Same address 0: all 8 flits commit on PC 0, which is busy from the first arrival (4) on: commits
    # end 12, 20, ..., 68, 8 ns apart (32 GB/s).  The last flit arrives at 34 and waits until 60: backlog 26.
    res, resp = eight_pes_one_ctrl(t0, 0)
    pcs = used_pcs(res)
    assert len(pcs) == 1 and int(pcs.loc[0, "pc"]) == 0
    assert int(pcs.loc[0, "commits"]) == 8
    assert float(pcs.loc[0, "busy_ns"]) == 64.0
    assert float(pcs.loc[0, "max_backlog_ns"]) == 60.0 - 34.0
    commit_end = np.sort(res.op_end_ns - resp)
    assert commit_end.tolist() == [12.0 + 8 * k for k in range(8)]
    assert np.all(np.diff(commit_end) == 8.0)
    # pe0 and pe1 are first and second in line: 12 + 2 and 20 + 4.
    assert res.op_end_ns[0] == 14.0 and res.op_end_ns[1] == 24.0
    assert res.makespan_ns == float(np.max(res.op_end_ns))


def test_same_pc_at_2kib_stride_serialises_too(t0: Tables) -> None:
    # Stride 2048 = 8 bursts: (2048 k >> 8) & 7 = 0, the same PC as the same address.
    res, resp = eight_pes_one_ctrl(t0, 2048)
    pcs = used_pcs(res)
    assert pcs["pc"].tolist() == [0] and pcs["commits"].tolist() == [8] and pcs["busy_ns"].tolist() == [64.0]
    assert np.sort(res.op_end_ns - resp).tolist() == [12.0 + 8 * k for k in range(8)]


def test_stride_256_spreads_over_all_pcs(t0: Tables) -> None:
    # Addresses 0, 256, ..., 1792: PC k for pe k, each commit starts at its arrival: ends at arrival + 8.
    res, resp = eight_pes_one_ctrl(t0, 256)
    pcs = used_pcs(res)
    assert pcs["pc"].tolist() == list(range(8))
    assert (pcs["commits"] == 1).all() and (pcs["busy_ns"] == 8.0).all()
    assert (pcs["max_backlog_ns"] == 0.0).all()
    assert np.sort(res.op_end_ns - resp).tolist() == [a + 8.0 for a in ARRIVALS]
    assert res.op_end_ns[0] == 14.0 and res.op_end_ns[1] == 19.0


# --------------------------------------------------------------------------------------------------------------
# One PE streaming 4 KiB to its own slice.
#   addr 0, one DMA: 16 flits, PCs 0..7 twice; flit i+8 arrives at 12+i, exactly when flit i frees its PC
#   (4+i+8): no backlog; latency 16 + 13 = 29 (case (B)).
#   16 DMAs of 256 B at k * 2048 (all PC 0), issued asynchronously at t = 0, then WAIT_ALL: the write channel
#   has capacity 1 and is held through the round trip, so they run one after another, each a 14 ns round
#   trip: begin_k = end_{k-1} = 14k, end_k = 14(k+1), WAIT_ALL ends at 224.  PC 0 takes all 16 commits;
#   each arrives (14k + 4) after the previous commit ended (14(k-1) + 12): no backlog either.
def test_single_pe_4k_sequential_addresses(t0: Tables) -> None:
    res = single_dma(t0, 0, 0, 4 * KiB, addr=0)
    assert res.op_latency_ns(0) == 29.0
    assert res.pcs["commits"].tolist() == [2] * 8
    assert (res.pcs["busy_ns"] == 16.0).all()
    assert (res.pcs["max_backlog_ns"] == 0.0).all()


def test_single_pe_16_async_dmas_on_one_pc_are_sequential(t0: Tables) -> None:
    b = ProgramBuilder(t0, name="16x256B@2KiB")
    a = b.pe_agent(pe_block(t0, 0, 0, 0))
    ops = [b.dma(a, hbm_ctrl(t0, 0, 0, 0), 256, k * 2048, is_async=True) for k in range(16)]
    w = b.wait(a)
    res = run_exact(b.build())
    ops_ = np.array(ops)
    assert (res.op_issue_ns[ops_] == 0.0).all()                  # all issued at once (asynchronous)
    assert res.op_begin_ns[ops_].tolist() == [14.0 * k for k in range(16)]
    assert res.op_end_ns[ops_].tolist() == [14.0 * (k + 1) for k in range(16)]
    assert np.array_equal(res.op_begin_ns[ops_[1:]], res.op_end_ns[ops_[:-1]])  # channel held to the response
    assert res.op_end_ns[w] == 224.0
    assert res.agent_finish_ns[0] == 224.0
    pcs = used_pcs(res)
    assert pcs["pc"].tolist() == [0] and pcs["commits"].tolist() == [16]
    assert pcs["busy_ns"].tolist() == [128.0] and pcs["max_backlog_ns"].tolist() == [0.0]


# --------------------------------------------------------------------------------------------------------------
# Read/write turnaround (spec_memory §3.2, §4.5): hbm.switch_penalty_ns = 4.  pe0 issues an async 256 B write
# and an async 256 B read to its own slice at t = 0 (separate channels, both start at once).
#   pe_dma -> r0c0 wire: write flit departs 0, arrives 1; read flit departs 1 (wire busy), arrives 2.
#   r0c0: write s = 1 + 2 = 3, reaches the controller at 4; read s = max(2, 3) + 2 = 5, wire free at 4,
#   reaches the controller at 6.
#   Same PC (both at address 0): write commits 4 -> 12 (PC 0 now 'W'); read starts at max(6, 12) + 4 = 16,
#   ends 24.  Responses +2: write done at 14, read at 26 (22 without the penalty).
#   Different PC (read at address 256 -> PC 1): no turnaround, read ends 6 + 8 = 14, done at 16.
def turnaround(t: Tables, read_addr: int) -> ExactResult:
    b = ProgramBuilder(t, name="w_then_r")
    a = b.pe_agent(pe_block(t, 0, 0, 0))
    ctrl = hbm_ctrl(t, 0, 0, 0)
    b.dma(a, ctrl, 256, 0, write=True, is_async=True)
    b.dma(a, ctrl, 256, read_addr, write=False, is_async=True)
    b.wait(a)
    return run_exact(b.build())


def test_switch_penalty_same_pc(t_sw: Tables, t0: Tables) -> None:
    assert t_sw.spec.hbm.switch_penalty_ns == 4.0
    res = turnaround(t_sw, 0)
    assert res.op_begin_ns[:2].tolist() == [0.0, 0.0]
    assert res.op_end_ns[:2].tolist() == [14.0, 26.0]
    assert res.agent_finish_ns[0] == 26.0
    pcs = used_pcs(res)
    assert pcs["pc"].tolist() == [0] and pcs["commits"].tolist() == [2]
    assert float(pcs.loc[0, "max_backlog_ns"]) == 12.0 - 6.0
    # the same program without the penalty, reads committed
    no_penalty = build_tables(load_system(overrides={**NO_PROP, "hbm.read_response": "committed"}))
    assert turnaround(no_penalty, 0).op_end_ns[:2].tolist() == [14.0, 22.0]
    # by default the read's response leaves when the controller took its flit (6): done at 8
    assert turnaround(t0, 0).op_end_ns[:2].tolist() == [14.0, 8.0]


def test_switch_penalty_other_pc(t_sw: Tables) -> None:
    res = turnaround(t_sw, 256)
    assert res.op_end_ns[:2].tolist() == [14.0, 16.0]
    assert used_pcs(res)["pc"].tolist() == [0, 1]


def test_switch_penalty_not_paid_for_same_direction(t_sw: Tables) -> None:
    # Two writes to PC 0, back to back on the write channel: 14 and 28, no penalty (same direction).
    b = ProgramBuilder(t_sw, name="w_w")
    a = b.pe_agent(pe_block(t_sw, 0, 0, 0))
    b.dma(a, hbm_ctrl(t_sw, 0, 0, 0), 256, 0)
    b.dma(a, hbm_ctrl(t_sw, 0, 0, 0), 256, 2048)
    assert run_exact(b.build()).op_end_ns.tolist() == [14.0, 28.0]


# --------------------------------------------------------------------------------------------------------------
# Host transfers with propagation zeroed, 256 B (one flit) into sip0.cube0.hbm_ctrl.pe0.  Route (memory kind):
#   pcie_ep (source, ovh 5, store-and-forward) -256-> io_noc (0) -128-> io_ucie-P0.conn0 (0) -512->
#   io_ucie-P0 (8) -512-> cube0.ucie-N (8) -512-> ucie-N.conn0 (0) -128-> r0c0 (2) -256-> hbm_ctrl.pe0 (0).
# H2D write (the IO connection at its fitted 512 GB/s, calibration/kernbench-2026-11.yaml):
#   5 + 1 + 0.5 + 0.5 + 8 + 0.5 + 8 + 0.5 + 2 + 2 + 1 = 29 at the controller, commit +8 = 37, and a host write
#   completes there (no response leg).
# D2H read: a zero-byte command: 5 + intermediate overheads (8 + 8 + 2) = 23 at the controller; chunk loop
#   (spec_memory §3.7): one chunk, interval 256 / 128 (bottleneck) = 2 -> commit 25 -> 33; then 256 B stream
#   back on the reverse route: 1 + 2 (r0c0) + 2 + 0.5 + 8 + 0.5 + 8 + 0.5 + 0.5 + 1 = 24 -> 57 at pcie_ep,
#   which reassembles and pays its 5 ns  =>  62.
def test_host_route_assumptions(t0: Tables, r0: Router) -> None:
    edges = r0.route(io_node(t0, 0, "pcie_ep"), hbm_ctrl(t0, 0, 0, 0), "memory")
    names = [node_name(t0, int(v)).split(".", 1)[1] for v in t0.edge_dst[edges]]
    assert names == ["io0.io_noc", "io0.io_ucie-P0.conn0", "io0.io_ucie-P0", "cube0.ucie-N", "cube0.ucie-N.conn0",
                     "cube0.r0c0", "cube0.hbm_ctrl.pe0"]
    assert t0.edge_bw_gbs[edges].tolist() == [256.0, 512.0, 512.0, 512.0, 512.0, 128.0, 256.0]
    assert t0.node_overhead_ns[t0.edge_dst[edges]].tolist() == [0.0, 0.0, 8.0, 8.0, 0.0, 2.0, 0.0]
    assert t0.node_overhead_ns[io_node(t0, 0, "pcie_ep")] == 5.0
    assert not t0.node_flit_aware[io_node(t0, 0, "pcie_ep")]


def test_host_write_and_read_256b(t0: Tables) -> None:
    b = ProgramBuilder(t0, name="host")
    h = b.host_agent(0)
    ctrl = hbm_ctrl(t0, 0, 0, 0)
    w = b.dma(h, ctrl, 256, 0, write=True)
    rd = b.dma(h, ctrl, 256, 1 << 20, write=False)
    res = run_exact(b.build())
    assert res.op_latency_ns(w) == 37.0
    assert res.op_issue_ns[rd] == 37.0
    assert res.op_latency_ns(rd) == 62.0
    assert res.op_latency_ns(rd) >= res.op_latency_ns(w)


# --------------------------------------------------------------------------------------------------------------
# Link occupancy: for one flow every forward edge carries exactly the payload (flit-aware forwarding and
# store-and-forward re-streams alike), busy for nbytes / bw; the PE DMA response carries no bytes.
@pytest.mark.parametrize("case", ["SAME_CUBE_PE_LOCAL", "REMOTE_CUBE_PE_REMOTE_WORST", "REMOTE_SIP", "H2D_CUBE4"])
@pytest.mark.parametrize("nbytes", [4097, 16 * KiB])
def test_link_occupancy_single_flow(tables: Tables, router: Router, case: str, nbytes: int) -> None:
    p = build_catalogue(tables, router)[case].program(tables, router, nbytes)
    res = run_exact(p)
    edges = res.edges.set_index("edge")
    fwd = p.route(int(p.op_route[0]))
    rev = p.route(int(p.op_rroute[0]))
    assert len(set(fwd.tolist())) == len(fwd)
    assert set(edges.index) == set(fwd.tolist()) | set(rev.tolist())
    assert (edges.loc[fwd, "bytes"] == nbytes).all()
    busy = edges.loc[fwd, "busy_ns"].to_numpy()
    want = nbytes / tables.edge_bw_gbs[fwd]
    assert np.all(np.abs(busy - want) < EPS * np.maximum(1.0, want))
    assert (edges.loc[edges.index.difference(fwd), "bytes"] == 0).all()
    assert (edges.loc[edges.index.difference(fwd), "busy_ns"] == 0).all()
    assert (edges["peak_queue_flits"] >= 0).all()


def test_link_occupancy_host_read(tables: Tables, router: Router) -> None:
    # D2H: the command carries no bytes; the data streams back on the reverse route, nbytes on each edge.
    nbytes = 16 * KiB
    p = build_catalogue(tables, router)["D2H_CUBE0"].program(tables, router, nbytes)
    res = run_exact(p)
    edges = res.edges.set_index("edge")
    fwd, rev = p.route(int(p.op_route[0])), p.route(int(p.op_rroute[0]))
    assert (edges.loc[fwd, "bytes"] == 0).all()
    assert (edges.loc[rev, "bytes"] == nbytes).all()
    want = nbytes / tables.edge_bw_gbs[rev]
    assert np.all(np.abs(edges.loc[rev, "busy_ns"].to_numpy() - want) < EPS * np.maximum(1.0, want))
