"""Parity of the fast path with exact mode on collectives and PE-to-PE transfers (design §7, spec_ccl §2, §5).

* **P1** (contention-free): pe2pe h1..h5 over IPCQ (single transfer, and a stream of 8 messages on one
  channel so that ``n_slots`` matters) and as raw DMA agree to 1e-9 on every op end and the finish.
  Single-SIP lrab on 4x4 and 2x2 cube meshes: every tile load and reduce-phase op agrees to 1e-9, but
  the broadcast ops and the tile stores do NOT: see ``LRAB_BCAST_TOL`` for the measured error and its
  cause.  The makespan agrees to 1e-9 without tile I/O; with it, the fast path is early by the router
  overhead the forwarding ranks' stores add in exact mode (``ROUTER_HEADS``).
* **P2** (contended): multi-SIP lrab on ring_1d / torus_2d / mesh_2d_no_wrap at 2..16 SIPs:
  ``lo <= exact <= hi`` and the point estimate within 2 % of exact (design limit 5 %).  The library's ring, tree,
  hier3 and rs_ag on ring6, torus6, mesh6 and ahbm_2sip at 16 B, 4 KiB and 96 KiB, on both rank sets: the bounds
  op by op and the point within 5 %; the fluid's tree misses it (expected failures, ``LIB_MISSES``), the queueing
  network's (the hybrid's point where a replay does not fit) none.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import cache

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.evaluate import network_schedule, run_fast
from kbfast.ir import Program, ProgramBuilder
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import HOPS, allreduce, pe2pe
from conftest import le

KiB = 1024
REL = 1e-9
KINDS = ("tcm", "sram", "hbm")
N_SLOTS = (1, 2, 4, 8)
SIZES = (4 * KiB, 64 * KiB)


@cache
def system(**over) -> tuple[Tables, Router]:
    t = build_tables(load_system(overrides=dict(over)))
    return t, Router(t)


def _sys(over: dict) -> tuple[Tables, Router]:
    return system(**over)


def assert_p1(p: Program, launch: float, lo_exact: bool = True) -> None:
    """Every op end and every agent finish equal to 1e-9 relative (to the time since the launch).

    ``lo_exact``: the lower bound equals exact too (a lone transfer).  In a stream the trains queue behind
    each other on their common route, which the lower bound ignores (it stays below exact)."""
    ex, fa = run_exact(p), run_fast(p)
    scale = np.maximum(ex.op_end_ns - launch, 1.0)
    np.testing.assert_array_less(np.abs(fa.op_end_ns - ex.op_end_ns) / scale, REL)
    np.testing.assert_allclose(fa.agent_finish_ns, ex.agent_finish_ns, rtol=REL, atol=0)
    # bounds: the lower bound is the point estimate (lone transfer) or below it, the upper one holds
    if lo_exact:
        np.testing.assert_allclose(fa.agent_finish_lo_ns, ex.agent_finish_ns, rtol=REL, atol=0)
    assert np.all(fa.agent_finish_lo_ns <= ex.agent_finish_ns * (1 + REL))
    assert np.all(ex.agent_finish_ns <= fa.agent_finish_hi_ns * (1 + REL))
    assert not fa.shared


# ----------------------------------------------------------------------------------------------------------------
# P1: PE-to-PE
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hop", list(HOPS))
def test_p1_pe2pe_ipcq(hop: str, kind: str, n: int) -> None:
    t, r = _sys({"ipcq.buffer_kind": kind})
    for consume in (True, False):
        c = pe2pe(t, r, hop, n, consume=consume)
        assert_p1(c.program, c.launch_ns)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("hop", list(HOPS))
def test_p1_pe2pe_raw_dma(hop: str, n: int) -> None:
    t, r = _sys({})
    c = pe2pe(t, r, hop, n, raw_dma=True)
    assert_p1(c.program, c.launch_ns)


def _stream(t: Tables, r: Router, hop: str, n: int, n_slots: int, n_msgs: int = 8) -> Program:
    """``n_msgs`` back-to-back sends on one channel of the hop class, received back to back."""
    _, s, d = HOPS[hop]
    d = (d[0], t.layout.cube_w if d[1] < 0 else d[1], d[2])
    b = ProgramBuilder(t, r, name=f"stream-{hop}")
    a, z = b.pe_agent(pe_block(t, *s)), b.pe_agent(pe_block(t, *d))
    ch = b.channel(a, z, n_slots=n_slots)
    for _ in range(n_msgs):
        b.send(a, ch, n)
    for _ in range(n_msgs):
        b.recv(z, ch, n)
    return b.build()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("n_slots", N_SLOTS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hop", list(HOPS))
def test_p1_ipcq_stream(hop: str, kind: str, n_slots: int, n: int) -> None:
    # Trains of one channel follow each other on the same route: FIFO, never overtaking, so the fast
    # path's egress queue is exact; n_slots gates the sends on the credits.
    t, r = _sys({"ipcq.buffer_kind": kind})
    assert_p1(_stream(t, r, hop, n, n_slots), 0.0, lo_exact=False)


def test_stream_depth_matters() -> None:
    # sanity: the ring depth changes the stream's time (1 slot: one message in flight at a time)
    t, r = _sys({})
    ends = [run_exact(_stream(t, r, "h3", 4 * KiB, k)).agent_finish_ns.max() for k in (1, 2, 4)]
    assert ends[0] > ends[1] > ends[2]


# ----------------------------------------------------------------------------------------------------------------
# P1: single-SIP lrab (intra-SIP phases only: row/column reduce to the centre root, column/row broadcast),
# with the tile load and store (the default) and without.
#
# Without tile I/O (measured before the tile load and store were added): the makespan and every op of the
# reduce phases P1/P2 agree to 1e-9, in all 48 cases, and n_slots changes nothing (every lrab channel carries
# one message).  The broadcast ops do not: the root (and the column-rc cubes in P4) posts two sends back to
# back to two different neighbours.  Both trains leave through the same first wire (pe_dma -> router,
# 256 GB/s) and part ways before their bottleneck (the 128 GB/s UCIe connection of different sides).  In
# exact mode the second train follows the first one at the first wire's rate (+n/256 ns); the fast path's
# egress FIFO lets the second flow start only when the first has drained at its *bottleneck* rate
# (+n/128 ns), so the second neighbour's recv, and everything downstream of it, ends up to n/256 ns late, and
# the op is not flagged as contended.  (The makespan survives because the late branch is not the critical
# one.)  Max |fast - exact| / (exact end - launch) over the broadcast ops, in % (kernbench routing; with the
# balanced router the 4x4 figures were 4.13 / 10.72 / 3.05 / 5.76 / 3.15 / 6.48):
#                 tcm 4K  tcm 64K  sram 4K  sram 64K  hbm 4K  hbm 64K
#   4x4 cubes      3.78     7.75    2.55     4.01     2.65     4.54
#   2x2 cubes      3.78     7.75    2.55     4.01     2.65     4.54
LRAB_BCAST_TOL_NO_TILE_IO = {
    (4, "tcm", 4 * KiB): 0.04, (4, "tcm", 64 * KiB): 0.08, (4, "sram", 4 * KiB): 0.027,
    (4, "sram", 64 * KiB): 0.042, (4, "hbm", 4 * KiB): 0.028, (4, "hbm", 64 * KiB): 0.047,
    (2, "tcm", 4 * KiB): 0.04, (2, "tcm", 64 * KiB): 0.08, (2, "sram", 4 * KiB): 0.027,
    (2, "sram", 64 * KiB): 0.042, (2, "hbm", 4 * KiB): 0.028, (2, "hbm", 64 * KiB): 0.047,
}
# With tile I/O (measured at this commit, all 48 cases; n_slots still changes nothing).  Every tile load
# and every reduce-phase op agrees to 1e-9 (the loads run together on disjoint local paths).  The stores do
# not: a rank stores right after its last send, and the store (vc_compute) and the send's train (vc_comm)
# share the PE's first wire.  In exact mode the arbiter's first turn is vc_compute's and the router's serial
# worker charges the store's head flit its overhead (2 ns) first, so a message posted just before a store
# reaches its receiver 2 ns later (docs/exact_mode.md R2a, R3; tests/test_collectives.py derives it on the
# 2x2 mesh).  The fast path models neither: it is early by 2 ns per such message on the critical path
# (ROUTER_HEADS x overhead_ns.router: 6 ns on 4x4, 2 ns on 2x2; 15 and 5 ns with a 5 ns router), and it
# queues the store behind the sends in its egress FIFO (up to 3 ns late on a store).  The makespan error is
# therefore -6 ns (4x4) and -2 ns (2x2) in every case: -0.47 % (4x4, tcm 4K) at most.  The broadcast error
# of the table above shrinks on 4x4 (the same ops, later since the launch) and on 2x2 mostly vanishes: the
# root's store now delays its second train in exact mode as well (+n/256 ns by the WRR), the delay the fast
# FIFO already charged.  Max |fast - exact| / (exact end - launch) over the broadcast ops and the tile
# stores, in % (the largest 4x4 values are broadcast ops, the largest 2x2 values stores):
#                 tcm 4K  tcm 64K  sram 4K  sram 64K  hbm 4K  hbm 64K
#   4x4 cubes      3.52     6.93    2.43     3.78     2.52     4.24
#   2x2 cubes      0.60     0.078   0.42     0.043    0.44     0.048
LRAB_BCAST_TOL = {
    (4, "tcm", 4 * KiB): 0.036, (4, "tcm", 64 * KiB): 0.07, (4, "sram", 4 * KiB): 0.025,
    (4, "sram", 64 * KiB): 0.038, (4, "hbm", 4 * KiB): 0.026, (4, "hbm", 64 * KiB): 0.043,
    (2, "tcm", 4 * KiB): 0.0061, (2, "tcm", 64 * KiB): 0.0008, (2, "sram", 4 * KiB): 0.0043,
    (2, "sram", 64 * KiB): 0.00045, (2, "hbm", 4 * KiB): 0.0045, (2, "hbm", 64 * KiB): 0.0005,
}
# Messages on the critical path posted right before their sender's tile store (measured: the makespan gap
# in units of overhead_ns.router).  The fast path may be early on the makespan, and on any agent, by that.
ROUTER_HEADS = {4: 3, 2: 1}


@pytest.mark.parametrize("tile_io", [True, False], ids=["tile_io", "no_tile_io"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("n_slots", N_SLOTS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mesh", [4, 2])
def test_p1_single_sip_lrab(mesh: int, kind: str, n_slots: int, n: int, tile_io: bool) -> None:
    t, r = _sys({"sips.count": 1, "sip.cube_mesh.w": mesh, "sip.cube_mesh.h": mesh, "ipcq.buffer_kind": kind,
                 "ipcq.n_slots": n_slots})
    c = allreduce(t, r, n, "lrab", tile_io=tile_io)
    p = c.program
    ex, fa = run_exact(p), run_fast(p)
    launch = c.launch_ns
    # the makespan (max pe_exec_ns): exact without tile I/O; with it, early by at most the router heads
    early = ROUTER_HEADS[mesh] * t.spec.overhead_ns.router if tile_io else 0.0
    lat_ex, lat_fa = ex.agent_finish_ns.max() - launch, fa.agent_finish_ns.max() - launch
    assert -REL * lat_ex <= lat_ex - lat_fa <= early + REL * lat_ex
    rel = np.abs(fa.op_end_ns - ex.op_end_ns) / np.maximum(ex.op_end_ns - launch, 1.0)
    phase = np.array([p.phase_names[k] if k >= 0 else "" for k in p.op_phase])
    reduce_ops = np.isin(phase, ["tile load", "P1 row reduce", "P2 column reduce", ""])
    assert reduce_ops.sum() > 0 and rel[reduce_ops].max() < REL
    assert (phase == "tile load").sum() == (mesh * mesh if tile_io else 0)
    # broadcast ops and tile stores: within the measured error (tables above).  If the egress queue is
    # fixed, this drops towards 1e-9: tighten the tables then.
    bcast = ~reduce_ops
    tol = LRAB_BCAST_TOL if tile_io else LRAB_BCAST_TOL_NO_TILE_IO
    assert rel[bcast].max() <= tol[(mesh, kind, n)]
    # bounds still hold for every agent, and the fast path is never early on them by more than the router heads
    assert np.all(fa.agent_finish_lo_ns <= ex.agent_finish_ns * (1 + REL))
    assert np.all(ex.agent_finish_ns <= fa.agent_finish_hi_ns * (1 + REL))
    assert np.all(fa.agent_finish_ns >= ex.agent_finish_ns * (1 - REL) - early)


# ----------------------------------------------------------------------------------------------------------------
# P2: multi-SIP lrab, with the tile load and store (the default).  Point-estimate error (fast - exact) /
# exact in %, measured at this commit (16 SIPs: only the tested size; "." = not run):
#
#   SIPs  grid   ring_1d 16K  96K     torus_2d 16K  96K     mesh_2d_no_wrap 16K  96K
#    2    2x1      -0.343  -0.079       -0.343  -0.079        -0.172  -0.042
#    4    2x2      -0.904  -0.225       -0.784  -0.189        -0.297  -0.076
#    6    2x3      -1.703  -0.443       -1.424  -0.357        -0.378  -0.101
#    9    3x3      -3.041  -0.826       -2.461  -0.636        -0.492  -0.135
#   16    4x4      -6.109     .            .    -1.391        -0.717     .
#
# The point estimate equals the lower bound.  The switch links carry their fitted 313.962 GB/s
# (calibration/kernbench-2026-11.yaml), so the trains of one exchange round reach the PCIe switch together and
# flit by flit, and its one serial worker pays each train's 5 ns first-flit decode while every other train's
# flits wait in its inbox: with k trains in a round each is held about (k - 1) x 5 ns, and the switch link after
# it, as slow as the one before, cannot catch up (ring_1d, 9 SIPs: 39.18 ns per round = 8 x 5 ns less one flit
# time, over 8 rounds).  The fluid model spreads the decodes as a worker load of 5 ns per 16 KiB, which never
# binds, so it charges none of it; the error grows with the SIP count and shrinks with the size
# (docs/fast_path.md §6).  With tile I/O exact is later by 8 ns more (12 ns on mesh_2d_no_wrap): 4 (6) x
# overhead_ns.router, the head flits of tile stores that go through a router before the message their rank has
# just posted (see P1).  The upper bounds hold but are loose (3x .. 90x).  16-SIP exact runs take 2-4 s at
# 96 KiB: one size per topology there.
GRIDS = {2: (2, 1), 4: (2, 2), 6: (2, 3), 9: (3, 3), 16: (4, 4)}
P2_TOL = 0.02
# Above 2 %, the measured gap (table above) with a margin: the switch worker's decodes, not accepted targets.
P2_SWITCH_GAPS = {("ring_1d", 9, 16 * KiB): 0.035, ("ring_1d", 16, 16 * KiB): 0.065, ("torus_2d", 9, 16 * KiB): 0.03}
# 16 SIPs: one size per topology (ring and mesh at 16 KiB, torus at 96 KiB), to keep the exact runs short.
P2_CASES = [(topo, n, size) for topo in ("ring_1d", "torus_2d", "mesh_2d_no_wrap") for n in GRIDS
            for size in (16 * KiB, 96 * KiB)
            if n < 16 or (size == 96 * KiB) == (topo == "torus_2d")]


@pytest.mark.parametrize(("topo", "n_sips", "size"), P2_CASES)
def test_p2_multi_sip_lrab(topo: str, n_sips: int, size: int) -> None:
    over = {"sips.count": n_sips, "sips.topology": topo}
    if topo != "ring_1d":
        over.update({"sips.w": GRIDS[n_sips][0], "sips.h": GRIDS[n_sips][1]})
    t, r = _sys(over)
    c = allreduce(t, r, size, "lrab")
    ex, fa = run_exact(c.program), run_fast(c.program)
    L = c.launch_ns
    e = ex.agent_finish_ns.max() - L
    lo, pt, hi = (fa.agent_finish_lo_ns.max() - L, fa.agent_finish_ns.max() - L, fa.agent_finish_hi_ns.max() - L)
    assert lo <= e * (1 + REL) and e <= hi * (1 + REL)
    tol = P2_SWITCH_GAPS.get((topo, n_sips, size), P2_TOL)
    assert abs(pt - e) / e <= tol, f"{topo} {n_sips} SIPs {size} B: point {pt:.3f} vs exact {e:.3f}"
    # per agent as well
    assert np.all(fa.agent_finish_lo_ns <= ex.agent_finish_ns * (1 + REL))
    assert np.all(ex.agent_finish_ns <= fa.agent_finish_hi_ns * (1 + REL))


# ----------------------------------------------------------------------------------------------------------------
# The upper bound on the seed grid (docs/fast_path.md §4): runs of shared servers took it from 4-37x exact to at
# most 5.5x, the causal order and the least fixpoint of the windows to 1.2-4.5x, windows per server and the
# order of a channel's messages and the crossing rule to 1.05-2.02x; the figures measured when this was written,
# with a 5 % margin.
@pytest.mark.parametrize("preset, n, most", [("ring6", 16, 1.12), ("ring6", 4096, 1.79), ("ring6", 98304, 1.33),
                                             ("torus6", 16, 1.11), ("torus6", 4096, 1.33), ("torus6", 98304, 1.38),
                                             ("mesh6", 98304, 1.90)])
def test_upper_bound_on_the_seed_grid(preset: str, n: int, most: float) -> None:
    t = build_tables(load_system(preset))
    c = allreduce(t, Router(t), n)
    ex, fa = run_exact(c.program), run_fast(c.program)
    exact, upper = ex.latency_ns(c.launch_ns)[0], fa.latency_ns(c.launch_ns)[2]
    assert exact <= upper <= most * exact, upper / exact


# ----------------------------------------------------------------------------------------------------------------
# P2: the collective library's all-reduce algorithms ring, tree, hier3 and rs_ag, as lrab above: on ring6, torus6,
# mesh6 and ahbm_2sip, at 16 B, 4 KiB and 96 KiB, on the cube pe0s and on every PE (hier3 runs on every PE only),
# with the tile load and store: the bounds hold op by op (lo <= exact <= hi at every op end and agent finish), and
# the point estimate is within 5 % of exact (design §7).
#
# Point-estimate error (fast - exact) / exact in %, measured at this commit (the six-SIP presets give the same
# Programs, see test_the_six_sip_presets_give_the_library_the_same_programs; "-": not run, see LIB_EXCLUDED):
#
#                        6 SIPs (ring6 = torus6 = mesh6)        ahbm_2sip
#   algorithm  ranks      16 B     4 KiB    96 KiB         16 B     4 KiB    96 KiB
#   ring       cube_pe0   +0.03    -0.13    +0.44          +0.30    -0.11    +0.37
#   ring       all_pes    -0.00    -0.03      -            +0.02    -0.05    -4.40
#   tree       cube_pe0   +2.46    +0.33   +15.10          +4.47    +2.83    +3.94
#   tree       all_pes    +6.19   +16.91   +36.13          +5.12    +6.72    +4.64
#   hier3      all_pes    +1.27    +0.15    +0.02          +1.37    +0.32    +0.04
#   rs_ag      cube_pe0   +0.01    +0.01    -0.01          +0.16    +0.15    +0.05
#   rs_ag      all_pes    -0.00    -0.00    -0.00          +0.01    +0.01    +0.01
#
# The tree misses 5 % (docs/fast_path.md §6, "The tree all-reduce"): the fluid schedule shares a saturated link
# max-min fairly, so a tree level's trains, which all start together, all finish together at the end of the
# level; exact mode's first-in first-out servers finish them one after another (a train whose flits queue
# first is served first, and a store-and-forward pcie_ep re-sends whole trains in arrival order).  The last one
# ends at about the same time in both, but a parent forwards once both its children have arrived, so in exact
# mode the next level starts while this one drains.  The fluid schedule waits for the whole level: on torus6 at
# 96 KiB on every PE, the first level's messages from SIP 4 to its left children in SIP 2 arrived at 3.7 / 59.8 /
# 155.9 us (first / median / last) in exact mode and at 50.6 / 148.2 / 148.5 us in the fluid schedule (measured on
# the 14 mm floor plan with unserialised switch links; the mechanism is the same on today's defaults).  A fluid
# network of first-in first-out servers (kbfast.fast.network) is within 1.2 % of exact on every case of this
# grid (test_p2_library_allreduce_network), and the hybrid takes its point where a replay does not fit
# (kbfast.measure.hybrid).  The fluid stays the batched point estimate, which the network would slow 20 to 70
# times (docs/fast_path.md §6): these marks pin its miss.
LIB_PRESETS = ("ring6", "torus6", "mesh6", "ahbm_2sip")
SIX_SIPS = ("ring6", "torus6", "mesh6")
LIB_SIZES = (16, 4 * KiB, 96 * KiB)
LIB_RANKS = {"ring": ("cube_pe0", "all_pes"), "tree": ("cube_pe0", "all_pes"), "hier3": ("all_pes",),
             "rs_ag": ("cube_pe0", "all_pes")}
P2_LIB_TOL = 0.05
_TREE_GAP = ("the fluid schedule shares a saturated link fairly, so a tree level's trains finish together; "
             "exact mode's FIFO servers finish them one by one and the next level starts early")
# (family, algorithm, ranks, size) -> the measured error (%): the cases the point estimate misses 5 % on
LIB_MISSES = {("6 SIPs", "tree", "cube_pe0", 96 * KiB): 15.10, ("6 SIPs", "tree", "all_pes", 16): 6.19,
              ("6 SIPs", "tree", "all_pes", 4 * KiB): 16.91, ("6 SIPs", "tree", "all_pes", 96 * KiB): 36.13,
              ("ahbm_2sip", "tree", "all_pes", 16): 5.12, ("ahbm_2sip", "tree", "all_pes", 4 * KiB): 6.72}
# Not run: the exact replay of the flat ring of 768 ranks at 96 KiB (1.7 M ops, about 1.7 G events) needs about
# 17 GiB; and rs_ag on 768 ranks takes 16 s to build per Program (768 generators of 1,534 messages), so it runs
# on ring6 only (the six-SIP presets give the same Programs).
LIB_EXCLUDED = {("6 SIPs", "ring", "all_pes", 96 * KiB)} | {
    (preset, "rs_ag", "all_pes", n) for preset in ("torus6", "mesh6") for n in LIB_SIZES}
# The default run: every algorithm on every preset, both rank sets on ahbm_2sip, in about 25 s on one core; the
# rest (a fast path of 14-17 s at 16 B on six SIPs, exact replays of 5-12 s, rs_ag's builds) is marked slow:
# about 3 min on one core.  Measured wall times, build + fast + exact (six SIPs once per process: the three
# presets share one measurement).
LIB_SLOW = {("6 SIPs", "ring", "cube_pe0", 16), ("6 SIPs", "ring", "cube_pe0", 96 * KiB),   # 17 s, 8 s
            ("6 SIPs", "ring", "all_pes", 16), ("6 SIPs", "ring", "all_pes", 4 * KiB),      # 9 s, 13 s
            ("6 SIPs", "tree", "all_pes", 16),                                               # 14 s
            ("6 SIPs", "rs_ag", "cube_pe0", 16), ("6 SIPs", "rs_ag", "cube_pe0", 4 * KiB),  # 2.4 s, 2.8 s
            ("ahbm_2sip", "ring", "all_pes", 96 * KiB),                                      # 9 s
            ("ahbm_2sip", "rs_ag", "cube_pe0", 16), ("ahbm_2sip", "rs_ag", "cube_pe0", 4 * KiB),
            ("ahbm_2sip", "rs_ag", "all_pes", 16), ("ahbm_2sip", "rs_ag", "all_pes", 4 * KiB)} | {
    ("6 SIPs", "rs_ag", "all_pes", n) for n in LIB_SIZES}                                  # 22-33 s each


class PointOff(AssertionError):
    """The point estimate is more than ``P2_LIB_TOL`` off exact (what the xfail marks expect, and nothing else)."""


def _family(preset: str) -> str:
    return "6 SIPs" if preset in SIX_SIPS else preset


def _lib_params(network: bool = False):
    """The library's P2 cases; the fluid point's misses xfail (``LIB_MISSES``), the network's none."""
    for preset in LIB_PRESETS:
        fam = _family(preset)
        for alg, ranks_sets in LIB_RANKS.items():
            for ranks in ranks_sets:
                for n in LIB_SIZES:
                    key = (fam, alg, ranks, n)
                    if key in LIB_EXCLUDED or (preset, alg, ranks, n) in LIB_EXCLUDED:
                        continue
                    marks = [pytest.mark.slow] if key in LIB_SLOW else []
                    if key in LIB_MISSES and not network:
                        marks.append(pytest.mark.xfail(strict=True, raises=PointOff,
                                                       reason=f"{LIB_MISSES[key]:+.2f} % (measured): {_TREE_GAP}"))
                    yield pytest.param(preset, alg, ranks, n, marks=marks, id=f"{preset}-{alg}-{ranks}-{n}B")


@cache
def preset_system(name: str) -> tuple[Tables, Router]:
    t = build_tables(load_system(name))
    return t, Router(t)


def _program_key(p: Program) -> str:
    """A digest of everything the evaluators read of ``p``: its arrays, its channels' and the system spec but
    for what only names the SIP arrangement (the six-SIP presets differ there only: only lrab reads it)."""
    h = hashlib.sha256()
    for obj in (p, p.channels):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, np.ndarray):
                h.update(f"{f.name}{v.dtype}{v.shape}".encode())
                h.update(np.ascontiguousarray(v).tobytes())
            elif f.name not in ("tables", "channels", "name"):
                h.update(f"{f.name}={v!r}".encode())
    spec = p.tables.spec.model_dump(mode="json")
    for k in ("name", "description"):
        spec.pop(k, None)
    for k in ("topology", "w", "h"):
        spec["sips"].pop(k, None)
    h.update(json.dumps(spec, sort_keys=True).encode())
    return h.hexdigest()


_LIB_MEASURED: dict[str, tuple[float, float, bool, bool, float]] = {}


def _library_parity(preset: str, alg: str, ranks: str, n: int) -> tuple[float, float, bool, bool, float]:
    """(point latency, exact latency, lower bound holds, upper bound holds, the queueing network's latency) of one
    all-reduce, the bounds op by op and per agent; measured once per Program (:func:`_program_key`)."""
    c = allreduce(*preset_system(preset), n, alg, ranks)
    key = _program_key(c.program)
    if key not in _LIB_MEASURED:
        ex, fa = run_exact(c.program), run_fast(c.program)
        lo_ok = bool(le(fa.op_end_lo_ns, ex.op_end_ns).all() and le(fa.agent_finish_lo_ns, ex.agent_finish_ns).all())
        hi_ok = bool(le(ex.op_end_ns, fa.op_end_hi_ns).all() and le(ex.agent_finish_ns, fa.agent_finish_hi_ns).all())
        net = float(network_schedule(c.program)[0].a_finish.max() - c.launch_ns)
        _LIB_MEASURED[key] = (fa.latency_ns(c.launch_ns)[0], ex.latency_ns(c.launch_ns)[0], lo_ok, hi_ok, net)
    return _LIB_MEASURED[key]


@pytest.mark.parametrize(("preset", "alg", "ranks", "n"), list(_lib_params()))
def test_p2_library_allreduce(preset: str, alg: str, ranks: str, n: int) -> None:
    point, exact, lo_ok, hi_ok, _ = _library_parity(preset, alg, ranks, n)
    assert lo_ok, "the lower bound is above exact at some op end or agent finish"
    assert hi_ok, "exact is above the upper bound at some op end or agent finish"
    err = point / exact - 1
    if abs(err) > P2_LIB_TOL:
        raise PointOff(f"{preset} {alg} {ranks} {n} B: point {point:.1f} ns vs exact {exact:.1f} ns "
                       f"({100 * err:+.2f} %)")


@pytest.mark.parametrize(("preset", "alg", "ranks", "n"), list(_lib_params(network=True)))
def test_p2_library_allreduce_network(preset: str, alg: str, ranks: str, n: int) -> None:
    """The queueing network (the hybrid's point where the replay does not fit, kbfast.measure.hybrid) is within
    ``P2_LIB_TOL`` of exact on every case, the tree's included: its servers are first in, first out, as exact
    mode's are (docs/fast_path.md §6)."""
    _, exact, _, _, point = _library_parity(preset, alg, ranks, n)
    assert abs(point / exact - 1) <= P2_LIB_TOL, f"network {point:.1f} ns vs exact {exact:.1f} ns"


@pytest.mark.parametrize(("alg", "ranks"), [("ring", "cube_pe0"), ("ring", "all_pes"), ("tree", "cube_pe0"),
                                            ("tree", "all_pes"), ("hier3", "all_pes"), ("rs_ag", "cube_pe0")])
def test_the_six_sip_presets_give_the_library_the_same_programs(alg: str, ranks: str) -> None:
    """ring6, torus6 and mesh6 differ only in the SIPs' logical arrangement, which only lrab's inter-SIP
    exchange reads: the other algorithms' Programs are the same, so one measurement covers the three (and lrab's
    differ, so the digest tells them apart)."""
    keys = {_program_key(allreduce(*preset_system(s), 4 * KiB, alg, ranks).program) for s in SIX_SIPS}
    assert len(keys) == 1
    assert len({_program_key(allreduce(*preset_system(s), 4 * KiB).program) for s in SIX_SIPS}) == 3
