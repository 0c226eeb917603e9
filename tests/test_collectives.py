"""IPCQ install (spec_ccl §1.4, §3), the symbolic schedule check of every collective (§5), and deadlocks (F3).

* neighbour tables and reverse directions of every built-in topology and of a custom ``neighbors()``;
* I3 / I3.1 violations raise ``IpcqInitError`` (F4) with a message that names the ranks and directions;
  an uninstalled direction raises ``IpcqInvalidDirection`` (F1);
* every algorithm of ``ALGORITHMS`` builds (and so passes the symbolic contributor check) on small
  topologies, including the single-cube fast path; broken kernels raise ``ScheduleError``;
* the tile load and store: every rank's first op after START reads its tile from its own HBM slice and its
  last op writes it back; what they add to the latency of a 2 x 2 lrab, derived by hand;
* a ring that fills up forever raises ``ReplayDeadlock`` with the pointer dump, in exact and fast mode.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.errors import ConfigError, KbfastError
from kbfast.exact import run_exact
from kbfast.sim.diagnostics import ReplayDeadlock
from kbfast.fast.evaluate import run_fast
from kbfast.ir import Op, Program, ProgramBuilder
from kbfast.topology.builder import Tables, build_tables
from kbfast.measure.metrics import phase_ends
from kbfast.topology.names import node_id, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import ALGORITHMS, allreduce, intercube_wiring
from kbfast.workloads.install import (
    IpcqInitError,
    IpcqInvalidDirection,
    install,
    neighbor_fn,
    reverse_direction,
)
from kbfast.workloads.kernels import ScheduleError, Tl, run_kernels
from conftest import topo

# A 1 x 1 cube mesh has a single cube; its only IO port must sit on that cube.
IO_ONE_CUBE = [{"id": "io0", "n_connections": 4,
                "cube_ports": [{"cube": [0, 0], "side": "N", "phy": "P0", "distance_mm": 2.0}]}]
SMALL = {
    "ring2_2x2": {"sips.count": 2, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2},
    "ring3_2x2": {"sips.count": 3, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2},
    "torus4_2x2": {"sips.count": 4, "sips.topology": "torus_2d", "sips.w": 2, "sips.h": 2,
                   "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2},
    "torus6_3x2": {"sips.count": 6, "sips.topology": "torus_2d", "sips.w": 3, "sips.h": 2,
                   "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 1},
    "mesh4_2x2": {"sips.count": 4, "sips.topology": "mesh_2d_no_wrap", "sips.w": 2, "sips.h": 2,
                  "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2},
    "single_cube_ring3": {"sips.count": 3, "sip.cube_mesh.w": 1, "sip.cube_mesh.h": 1,
                          "sip.io_chiplets": IO_ONE_CUBE},
    "single_cube_torus4": {"sips.count": 4, "sips.topology": "torus_2d", "sip.cube_mesh.w": 1,
                           "sip.cube_mesh.h": 1, "sip.io_chiplets": IO_ONE_CUBE},
}


@pytest.fixture(scope="module")
def small() -> dict[str, tuple[Tables, Router]]:
    out = {}
    for name, over in SMALL.items():
        t = build_tables(load_system(overrides=over))
        out[name] = (t, Router(t))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Neighbour tables
def test_ring_1d_tables() -> None:
    inst = install(4, neighbor_fn("ring_1d", 4))
    assert inst.tables == ({"E": 1, "W": 3}, {"E": 2, "W": 0}, {"E": 3, "W": 1}, {"E": 0, "W": 2})
    for r in range(4):
        assert inst.recv_dir[(r, "E")] == "W" and inst.recv_dir[(r, "W")] == "E"
        assert inst.inbound((r + 1) % 4, "W") == (r, "E")
        assert inst.inbound((r - 1) % 4, "E") == (r, "W")


def test_two_rank_ring_picks_the_opposite() -> None:
    # E and W of both ranks name the same peer (ADR-0025): the reverse of E must be W and vice versa, or
    # both directions would land in one rx range.
    tables = [{"E": 1, "W": 1}, {"E": 0, "W": 0}]
    assert reverse_direction(tables, 0, 1, "E") == "W"
    assert reverse_direction(tables, 0, 1, "W") == "E"
    inst = install(2, neighbor_fn("ring_1d", 2))
    assert inst.tables == ({"E": 1, "W": 1}, {"E": 0, "W": 0})
    assert inst.recv_dir == {(0, "E"): "W", (0, "W"): "E", (1, "E"): "W", (1, "W"): "E"}
    assert inst.inbound(1, "W") == (0, "E") and inst.inbound(1, "E") == (0, "W")


def test_ring_1d_unidir_tables() -> None:
    inst = install(4, neighbor_fn("ring_1d_unidir", 4))
    assert inst.tables == ({"E": 1}, {"E": 2}, {"E": 3}, {"E": 0})
    # the receiver has no W of its own: a receive-only W label
    assert all(inst.recv_dir[(r, "E")] == "W" for r in range(4))
    assert inst.inbound(0, "W") == (3, "E")
    with pytest.raises(IpcqInvalidDirection):
        inst.peer(0, "W")   # W is receive-only: nobody sends on it
    # 2 ranks: the peer's E points back, so the peer receives on E
    inst2 = install(2, neighbor_fn("ring_1d_unidir", 2))
    assert inst2.recv_dir == {(0, "E"): "E", (1, "E"): "E"}
    assert install(1, neighbor_fn("ring_1d", 1)).tables == ({},)


@pytest.mark.parametrize("kind", ["mesh_2d", "torus_2d"])
def test_torus_tables_wrap(kind: str) -> None:
    # 3 x 3 row-major (row = rank // w): rank 0 = (0, 0) wraps W to 2 and N to 6; rank 4 is the centre.
    inst = install(9, neighbor_fn(kind, 9, 3, 3))
    assert inst.tables[0] == {"E": 1, "W": 2, "S": 3, "N": 6}
    assert inst.tables[4] == {"E": 5, "W": 3, "S": 7, "N": 1}
    assert inst.tables[8] == {"E": 6, "W": 7, "S": 2, "N": 5}
    assert all(inst.recv_dir[(r, d)] == {"E": "W", "W": "E", "N": "S", "S": "N"}[d]
               for r in range(9) for d in inst.tables[r])
    # rectangular w x h: 3 wide, 2 high; the 2-high column makes N and S name the same peer
    rect = install(6, neighbor_fn(kind, 6, 3, 2))
    assert rect.tables[0] == {"E": 1, "W": 2, "S": 3, "N": 3}
    assert rect.recv_dir[(0, "S")] == "N" and rect.recv_dir[(0, "N")] == "S"
    # a 2 x 2 torus: every direction pair names one peer, each still takes its opposite
    sq = install(4, neighbor_fn(kind, 4, 2, 2))
    assert sq.tables[0] == {"E": 1, "W": 1, "S": 2, "N": 2}
    assert sq.recv_dir[(0, "E")] == "W" and sq.recv_dir[(0, "W")] == "E"


def test_mesh_no_wrap_tables() -> None:
    inst = install(6, neighbor_fn("mesh_2d_no_wrap", 6, 3, 2))
    assert inst.tables == ({"E": 1, "S": 3}, {"E": 2, "W": 0, "S": 4}, {"W": 1, "S": 5},
                           {"E": 4, "N": 0}, {"E": 5, "W": 3, "N": 1}, {"W": 4, "N": 2})
    assert inst.recv_dir[(0, "E")] == "W" and inst.recv_dir[(3, "N")] == "S"


def test_prefixed_global_tables() -> None:
    inst = install(3, neighbor_fn("ring_1d", 3, prefix="global_"))
    assert inst.tables[0] == {"global_E": 1, "global_W": 2}
    assert inst.recv_dir[(0, "global_E")] == "global_W"


def test_tree_binary_tables() -> None:
    inst = install(7, neighbor_fn("tree_binary", 7))
    assert inst.tables[0] == {"child_left": 1, "child_right": 2}
    assert inst.tables[1] == {"parent": 0, "child_left": 3, "child_right": 4}
    assert inst.tables[6] == {"parent": 2}
    # no opposite label: the peer's first direction pointing back (ADR-0025 fallback)
    assert inst.recv_dir[(1, "parent")] == "child_left" and inst.recv_dir[(2, "parent")] == "child_right"
    assert inst.recv_dir[(0, "child_left")] == "parent" and inst.recv_dir[(0, "child_right")] == "parent"
    assert inst.inbound(0, "child_right") == (2, "parent")


def test_custom_neighbors_function() -> None:
    # custom labels without an opposite table entry: the peer's direction pointing back is used
    def hops(rank: int, n: int) -> dict[str, int]:
        return {"up": (rank + 1) % n, "down": (rank - 1) % n}

    inst = install(5, hops)
    assert inst.tables[0] == {"up": 1, "down": 4}
    assert inst.recv_dir[(0, "up")] == "down" and inst.recv_dir[(0, "down")] == "up"
    # several functions merge into one table per rank (intra + inter, as the intercube install does)
    both = install(4, neighbor_fn("ring_1d", 4), lambda r, n: {"global_E": (r + 2) % n})
    assert both.tables[0] == {"E": 1, "W": 3, "global_E": 2}
    # the peer (rank 2) has no global_W, but its own global_E points back: it receives on global_E
    assert both.recv_dir[(0, "global_E")] == "global_E"


def test_intercube_install_wires_every_cube(small) -> None:
    t, _ = small["torus4_2x2"]
    inst = intercube_wiring(t).to_install()
    assert inst.n_ranks == 16            # 4 SIPs x 4 cubes, pe0 of each
    # sip 0 cube 0: mesh E/S inside the SIP (no wrap), global_* to cube 0 of the neighbouring SIPs (2 x 2 torus)
    assert inst.tables[0] == {"E": 1, "S": 2, "global_E": 4, "global_W": 4, "global_S": 8, "global_N": 8}
    assert inst.tables[4 + 3] == {"W": 4 + 2, "N": 4 + 1, "global_E": 3, "global_W": 3,
                                  "global_S": 12 + 3, "global_N": 12 + 3}


# ----------------------------------------------------------------------------------------------------------------
# F4 / F1
def test_i3_violation() -> None:
    # rank 0 sends 'X' to rank 1, but rank 1 only points at rank 2 and 'X' has no opposite label
    fn = lambda r, n: {0: {"X": 1}, 1: {"Y": 2}, 2: {"Y": 1}}[r]
    with pytest.raises(IpcqInitError, match=r"I3 violated: rank 0 sends 'X' to rank 1, which has no direction back"):
        install(3, fn)


def test_i3_1_violation() -> None:
    # ranks 0 and 1 both send E to rank 2, which receives both on its receive-only W
    fn = lambda r, n: {"E": 2} if r < 2 else {}
    with pytest.raises(IpcqInitError, match=r"I3\.1 violated: rank 2 would receive both from rank 0 \('E'\) "
                                            r"and from rank 1 \('E'\) on 'W'"):
        install(3, fn)
    # two directions of one rank to the same peer with a single way back
    with pytest.raises(IpcqInitError, match="I3.1"):
        install(2, lambda r, n: {"a": 1, "b": 1} if r == 0 else {"c": 0})


def test_install_errors() -> None:
    with pytest.raises(IpcqInitError, match=r"rank 0 direction 'E' points to rank 5, outside 0\.\.2"):
        install(3, lambda r, n: {"E": 5})
    with pytest.raises(IpcqInitError, match=r"torus_2d needs w\*h == 6 ranks \(got 2x2\)"):
        neighbor_fn("torus_2d", 6, 2, 2)
    with pytest.raises(IpcqInitError, match="unknown IPCQ topology 'hypercube'.*custom neighbors"):
        neighbor_fn("hypercube", 6)
    assert issubclass(IpcqInitError, KbfastError)


def test_uninstalled_direction() -> None:
    inst = install(4, neighbor_fn("ring_1d", 4))
    with pytest.raises(IpcqInvalidDirection, match=r"rank 0 has no IPCQ direction 'N' installed \(installed: E, W\)"):
        inst.peer(0, "N")
    with pytest.raises(IpcqInvalidDirection, match="rank 0 receives on no IPCQ direction 'N'"):
        inst.inbound(0, "N")


def test_uninstalled_direction_in_a_kernel(small) -> None:
    t, r = small["ring2_2x2"]

    def bad(tl: Tl):
        yield tl.send("N", tl.contribution())
        return tl.contribution()

    b = ProgramBuilder(t, r)
    agents = [b.pe_agent(pe_block(t, 0, 0, p)) for p in range(3)]
    with pytest.raises(IpcqInvalidDirection, match="no IPCQ direction 'N'"):
        run_kernels(b, agents, install(3, neighbor_fn("ring_1d", 3)), bad, 256)


def test_torus_without_grid_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"non-square sips.count requires explicit sips.w/h for torus_2d") as err:
        load_system(overrides={"sips.count": 6, "sips.topology": "torus_2d"})
    assert "w=2, h=3" in str(err.value)   # the hint proposes factorisations
    with pytest.raises(ConfigError, match=r"sips.w \* sips.h = 2\*2 = 4 != sips.count = 6"):
        load_system(overrides={"sips.count": 6, "sips.topology": "torus_2d", "sips.w": 2, "sips.h": 2})
    # a square count falls back to the square grid
    assert load_system(overrides={"sips.count": 9, "sips.topology": "torus_2d"}).sip_grid() == (3, 3)


# ----------------------------------------------------------------------------------------------------------------
# Symbolic check: every algorithm on small topologies.  allreduce() runs every rank's kernel symbolically and
# raises ScheduleError unless each rank ends with every contribution exactly once; here we also check I1
# (every send matched by exactly one recv of its channel).
def _ranks_for(alg: str) -> list[str | None]:
    """lrab (pe0 of every cube) and hier3 (every PE) have fixed ranks; the flat algorithms run on cube pe0s
    here (their all-PE variants are in ``test_all_pes_ring_on_a_small_system``)."""
    return [None] if alg.startswith("lrab") or alg == "hier3" else ["cube_pe0"]


def test_a_new_algorithm_is_a_module_and_one_table_line(small, monkeypatch) -> None:
    """allreduce reads an algorithm from the table alone: an entry added there (here a copy of ring's
    Algorithm under a new name) builds, and its Program is ring's, op for op."""
    from kbfast.workloads.collectives import ring, table

    assert ALGORITHMS == tuple(table.TABLE)
    monkeypatch.setitem(table.TABLE, "ring_copy", ring.RING)
    t, r = next(iter(small.values()))
    new, old = (allreduce(t, r, 2048, alg, ranks="cube_pe0").program for alg in ("ring_copy", "ring"))
    assert new.name == old.name.replace("ring", "ring_copy")
    for f in ("op_code", "op_agent", "op_target", "op_nbytes"):
        assert np.array_equal(getattr(new, f), getattr(old, f)), f


def _check_matched(p: Program) -> None:
    n_ch = len(p.channels)
    sends = np.bincount(p.op_target[p.op_code == Op.SEND], minlength=n_ch)
    recvs = np.bincount(p.op_target[p.op_code == Op.RECV], minlength=n_ch)
    np.testing.assert_array_equal(sends, recvs)
    assert sends.min() > 0


@pytest.mark.parametrize("topo", list(SMALL))
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_every_algorithm_builds(small, topo: str, alg: str) -> None:
    t, r = small[topo]
    for ranks in _ranks_for(alg):
        c = allreduce(t, r, 2048, alg, ranks=ranks)
        _check_matched(c.program)
        assert c.program.n_agents == c.n_ranks
        assert c.launch_ns > 0 and np.all(c.program.agent_start_ns == c.launch_ns)


def test_all_pes_ring_on_a_small_system(small) -> None:
    # rank = PE (24 ranks on 3 single-cube SIPs): ring and rs_ag over every PE
    t, r = small["single_cube_ring3"]
    for alg in ("ring", "rs_ag", "tree"):
        c = allreduce(t, r, 4096, alg)
        assert c.n_ranks == 24
        _check_matched(c.program)


def test_rs_ag_symbolic_check_catches_a_chunk_in_the_wrong_slot(small) -> None:
    """The rs_ag payload carries its chunk index: forwarding the wrong chunk is a schedule error."""
    from kbfast.workloads.collectives import rs_ag_kernel

    def wrong_chunk(tl: Tl):
        gen = rs_ag_kernel(tl)
        req = next(gen)
        while True:
            if req.kind == "send" and tl.rank == 1:   # rank 1 tags its chunks with a wrong index
                req = type(req)("send", req.direction, req.payload ^ 1, req.nbytes)
            try:
                req = gen.send((yield req))
            except StopIteration as stop:
                return stop.value

    t, router = small["single_cube_ring3"]
    b = ProgramBuilder(t, router)
    agents = [b.pe_agent(pe_block(t, 0, 0, p)) for p in range(4)]
    with pytest.raises(ScheduleError, match="into the slot of chunk"):
        run_kernels(b, agents, install(4, neighbor_fn("ring_1d", 4)), wrong_chunk, 4096)


def test_rs_ag_is_limited_in_ranks() -> None:
    t = build_tables(load_system("torus16"))
    with pytest.raises(KbfastError, match="limited to 1024 ranks"):
        allreduce(t, Router(t), 4096, "rs_ag")   # every PE of 16 SIPs: 2048 ranks


def test_lrab_single_cube_fast_path(small) -> None:
    # 1 x 1 cube mesh: no intra-SIP phases, straight to the inter-SIP exchange (spec_ccl §5.8)
    t, r = small["single_cube_ring3"]
    c = allreduce(t, r, 4096, "lrab")
    p = c.program
    assert c.n_ranks == 3 and p.phase_names == ("tile load", "P3 inter-SIP", "tile store")
    assert allreduce(t, r, 4096, "lrab", tile_io=False).program.phase_names == ("P3 inter-SIP",)
    # ring_1d over 3 SIPs: 2 rounds of send + recv + add per SIP
    assert int((p.op_code == Op.SEND).sum()) == 6 and int((p.op_code == Op.MATH).sum()) == 6
    res = run_fast(p)
    assert np.all(res.agent_finish_ns > c.launch_ns)
    t4, r4 = small["single_cube_torus4"]
    p4 = allreduce(t4, r4, 4096, "lrab").program
    # 2 x 2 torus: one row round and one column round per SIP
    assert int((p4.op_code == Op.SEND).sum()) == 8


def test_lrab_phases_on_a_cube_mesh(small) -> None:
    t, r = small["ring2_2x2"]
    p = allreduce(t, r, 4096, "lrab").program
    assert set(p.phase_names) == {"tile load", "P1 row reduce", "P2 column reduce", "P3 inter-SIP",
                                  "P4 column broadcast", "P5 row broadcast", "tile store"}


def test_unknown_algorithm(small) -> None:
    t, r = small["ring2_2x2"]
    with pytest.raises(KbfastError, match="unknown all-reduce algorithm 'lrap'.*did you mean 'lrab'"):
        allreduce(t, r, 4096, "lrap")
    with pytest.raises(KbfastError, match="size must be > 0"):
        allreduce(t, r, 0, "lrab")
    with pytest.raises(KbfastError, match=r"tile_io must be true or false \(got 'no'\)"):
        allreduce(t, r, 4096, "lrab", tile_io="no")


# ----------------------------------------------------------------------------------------------------------------
# Tile load and store (reference kernels: ``acc = load(pe_addr)`` ... ``store(pe_addr, acc)``).  By default every
# rank reads its tile from its own HBM slice right after its START and writes the result back after its
# kernel's last op: blocking PE DMAs of nbytes to ``sip{S}.cube{C}.hbm_ctrl.pe{X}`` of the rank's own PE, at
# address 0.
@pytest.mark.parametrize("topo", ["ring2_2x2", "torus6_3x2", "single_cube_ring3"])
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_every_rank_loads_first_and_stores_last(small, topo: str, alg: str) -> None:
    t, r = small[topo]
    for ranks in _ranks_for(alg) + (["all_pes"] if alg in ("ring", "tree", "rs_ag") else []):
        c = allreduce(t, r, 3000, alg, ranks=ranks)
        p = c.program
        assert c.tile_io is True
        for a in range(p.n_agents):
            name = p.agent_name(a)                                  # sip{S}.cube{C}.pe{X}
            sip, cube, pe = (int(x) for x in re.fullmatch(r"sip(\d+)\.cube(\d+)\.pe(\d+)", name).groups())
            own = node_id(t, f"sip{sip}.cube{cube}.hbm_ctrl.pe{pe}")
            ops = p.ops_of(a)
            assert p.op_code[ops[0]] == Op.START
            first, last = ops[1], ops[-1]
            for o, code, phase in ((first, Op.DMA_READ, "tile load"), (last, Op.DMA_WRITE, "tile store")):
                assert p.op_code[o] == code, (name, alg)
                assert p.op_target[o] == own and p.op_nbytes[o] == 3000 and p.op_addr[o] == 0
                assert not p.op_async[o] and p.phase_names[p.op_phase[o]] == phase
            # the ops between are the kernel's: no other DMA
            assert not np.isin(p.op_code[ops[2:-1]], (Op.DMA_READ, Op.DMA_WRITE)).any()
        off = allreduce(t, r, 3000, alg, ranks=ranks, tile_io=False).program
        assert off.n_ops == p.n_ops - 2 * p.n_agents
        assert not np.isin(off.op_code, (Op.DMA_READ, Op.DMA_WRITE)).any()
        assert "tile load" not in off.phase_names and "tile store" not in off.phase_names
        # the kernel's ops are the same, in the same order, per agent
        for a in range(p.n_agents):
            k_on, k_off = p.ops_of(a), off.ops_of(a)
            assert list(p.op_code[k_on[2:-1]]) == list(off.op_code[k_off[1:]])
            assert list(p.op_nbytes[k_on[2:-1]]) == list(off.op_nbytes[k_off[1:]])


def _isolated_dma_ns(t: Tables, r: Router, nbytes: int, write: bool) -> float:
    """One blocking DMA of ``nbytes`` by pe0 of cube 0 to its own slice, alone on the system (exact)."""
    b = ProgramBuilder(t, r)
    a = b.pe_agent(pe_block(t, 0, 0, 0))
    b.start(a)
    op = b.dma(a, node_id(t, "sip0.cube0.hbm_ctrl.pe0"), nbytes, write=write)
    return run_exact(b.build()).op_latency_ns(op)


ONE_SIP_2X2 = {"sips.count": 1, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2}


@pytest.mark.parametrize("nbytes", [16, 4096, 96 * 1024])
def test_tile_io_adds_load_and_store_on_a_2x2_lrab(nbytes: int) -> None:
    """1 SIP, 2 x 2 cubes, lrab (centre root = cube 3): exact latency with tile I/O minus without.

    The loads of the 4 ranks run together on disjoint local paths (pe0 -> its router -> hbm_ctrl.pe0 of its
    own cube), so each ends exactly ``L`` (the load's isolated latency) after the launch and every op of the
    reduce phases ends exactly ``L`` later.  The last rank to finish (cube 0, the end of the broadcast
    chain 3 -> 1 -> 0) stores alone: ``S``, the store's isolated latency.  But the difference is
    ``L + S + 2 ns``, not ``L + S``: cube 1 forwards the root's tile to cube 0 (P5) and stores its own result
    at the same instant.  Its store (vc_compute) and the forwarded message (vc_comm) leave through the same
    pe_dma -> router link, where the arbiter's first turn is vc_compute's (docs/exact_mode.md R2a); the
    router's serial worker then charges the store's head flit its 2 ns overhead (``overhead_ns.router``,
    R3) before the message's head flit, so cube 0 receives 2 ns later.  The same holds at every size
    (the message's bottleneck, the 128 GB/s UCIe connection, is half the PE link, so the interleaved
    flits of the store cost it nothing more)."""
    t, r = topo(ONE_SIP_2X2)
    L, S = _isolated_dma_ns(t, r, nbytes, write=False), _isolated_dma_ns(t, r, nbytes, write=True)
    router_ns = t.spec.overhead_ns.router
    assert router_ns == 2.0
    runs = {}
    for tio in (False, True):
        c = allreduce(t, r, nbytes, "lrab", tile_io=tio)
        runs[tio] = (c, run_exact(c.program))
    (c0, x0), (c1, x1) = runs[False], runs[True]
    p0, p1 = c0.program, c1.program
    assert c0.launch_ns == c1.launch_ns
    launch = c1.launch_ns
    phase = np.array([p1.phase_names[k] if k >= 0 else "" for k in p1.op_phase])
    # every load ends at launch + L
    np.testing.assert_array_equal(x1.op_end_ns[phase == "tile load"], launch + L)
    # the reduce phases are the no-tile-I/O ones shifted by L exactly (op for op, per agent)
    for a in range(p1.n_agents):
        on, off = p1.ops_of(a)[2:-1], p0.ops_of(a)[1:]
        red = np.isin(phase[on], ["P1 row reduce", "P2 column reduce"])
        np.testing.assert_allclose(x1.op_end_ns[on[red]] - x0.op_end_ns[off[red]], L, rtol=0, atol=1e-9)
    # the last store runs alone
    last = int(np.argmax(x1.agent_finish_ns))
    assert p1.agent_name(last) == "sip0.cube0.pe0"
    store = p1.ops_of(last)[-1]
    assert x1.op_end_ns[store] - x1.op_issue_ns[store] == pytest.approx(S, abs=1e-9)
    # the per-phase ends show the load and the store
    ends = phase_ends(p1, x1.op_end_ns, launch)
    assert list(ends)[0] == "tile load" and ends["tile load"] == pytest.approx(L)
    assert list(ends)[-1] == "tile store"
    lat0, lat1 = x0.agent_finish_ns.max() - launch, x1.agent_finish_ns.max() - launch
    assert ends["tile store"] == pytest.approx(lat1)
    assert lat1 - lat0 == pytest.approx(L + S + router_ns, abs=1e-9), (lat0, lat1, L, S)


def test_tile_io_extra_is_the_router_overhead() -> None:
    """The 2 ns above ``L + S`` on the 2 x 2 lrab is the router's head-flit overhead: 5 ns with a 5 ns router."""
    t, r = topo({**ONE_SIP_2X2, "overhead_ns.router": 5.0})
    n = 4096
    L, S = _isolated_dma_ns(t, r, n, write=False), _isolated_dma_ns(t, r, n, write=True)
    lat = [run_exact((c := allreduce(t, r, n, "lrab", tile_io=x)).program).agent_finish_ns.max() - c.launch_ns
           for x in (False, True)]
    assert lat[1] - lat[0] == pytest.approx(L + S + 5.0, abs=1e-9)


def _load_then_store_ns(t: Tables, r: Router, nbytes: int) -> float:
    """pe0 of cube 0 reads ``nbytes`` of its own slice, then writes them back, alone on the system (exact)."""
    b = ProgramBuilder(t, r)
    a = b.pe_agent(pe_block(t, 0, 0, 0))
    b.start(a)
    hbm = node_id(t, "sip0.cube0.hbm_ctrl.pe0")
    b.dma(a, hbm, nbytes, write=False)
    b.dma(a, hbm, nbytes, write=True)
    return float(run_exact(b.build()).agent_finish_ns.max())


def test_tile_io_alone_adds_exactly_load_and_store() -> None:
    """With nothing else on the fabric (one SIP, one cube: lrab has a single rank and no message) the tile
    I/O adds exactly a lone load followed by its store, in exact mode and on the fast path.  At 16 B that is
    more than the two isolated latencies: the read's response leaves when the controller took its last flit
    (``hbm.read_response: accepted``), so the store's flit reaches a PC still busy with the read's burst."""
    t, r = topo({"sips.count": 1, "sip.cube_mesh.w": 1, "sip.cube_mesh.h": 1})
    for n in (16, 4096, 96 * 1024):
        L, S = _isolated_dma_ns(t, r, n, write=False), _isolated_dma_ns(t, r, n, write=True)
        both = _load_then_store_ns(t, r, n)
        assert both >= L + S
        for evaluate in (run_exact, run_fast):
            lat = [evaluate((c := allreduce(t, r, n, "lrab", tile_io=x)).program).agent_finish_ns.max() - c.launch_ns
                   for x in (False, True)]
            assert lat[0] == 0.0 and lat[1] == pytest.approx(both, abs=1e-9)


# ----------------------------------------------------------------------------------------------------------------
# Broken kernels: caught by the symbolic check before any timing
def _ring3(small):
    t, r = small["ring2_2x2"]
    b = ProgramBuilder(t, r)
    agents = [b.pe_agent(pe_block(t, 0, 0, p)) for p in range(3)]
    return b, agents, install(3, neighbor_fn("ring_1d", 3))


def test_double_add_is_caught(small) -> None:
    def double(tl: Tl):
        acc = tl.contribution()
        yield tl.send("E", acc)
        got = yield tl.recv("W")
        acc = tl.add(acc, got)
        acc = tl.add(acc, got)          # counts the neighbour twice
        return acc

    b, agents, inst = _ring3(small)
    # rank 0 blocks on its recv first (rank 2 has not sent yet); rank 1 is the first to add twice
    with pytest.raises(ScheduleError, match=r"rank 1 adds contributions of ranks \[0\] twice"):
        run_kernels(b, agents, inst, double, 256)


def test_resending_acc_double_counts(small) -> None:
    # the author-guide mistake: forwarding acc instead of the received value double counts
    def resend_acc(tl: Tl):
        acc = tl.contribution()
        for _ in range(tl.n_ranks - 1):
            yield tl.send("E", acc)
            acc = tl.add(acc, (yield tl.recv("W")))
        return acc

    b, agents, inst = _ring3(small)
    with pytest.raises(ScheduleError, match="twice"):
        run_kernels(b, agents, inst, resend_acc, 256)


def test_recv_before_send_deadlocks(small) -> None:
    def stuck(tl: Tl):
        got = yield tl.recv("W")       # everybody waits, nobody sends
        yield tl.send("E", tl.contribution())
        return tl.add(tl.contribution(), got)

    b, agents, inst = _ring3(small)
    with pytest.raises(ScheduleError, match=r"deadlocks .*rank 0 on recv 'W'"):
        run_kernels(b, agents, inst, stuck, 256)


def test_missing_recv_deadlocks(small) -> None:
    # rank 1 never sends: rank 2 waits forever on W
    def lazy(tl: Tl):
        if tl.rank != 1:
            yield tl.send("E", tl.contribution())
        got = yield tl.recv("W")
        return tl.add(tl.contribution(), got)

    b, agents, inst = _ring3(small)
    with pytest.raises(ScheduleError, match="rank 2 on recv 'W'"):
        run_kernels(b, agents, inst, lazy, 256)


def test_missing_contribution_is_caught(small) -> None:
    def one_round(tl: Tl):   # a 3-rank ring needs 2 rounds
        yield tl.send("E", tl.contribution())
        return tl.add(tl.contribution(), (yield tl.recv("W")))

    b, agents, inst = _ring3(small)
    with pytest.raises(ScheduleError, match=r"rank 0 ends without the contributions of ranks \[1\]"):
        run_kernels(b, agents, inst, one_round, 256)


def test_a_correct_kernel_passes(small) -> None:
    def ring(tl: Tl):
        acc = cur = tl.contribution()
        for _ in range(tl.n_ranks - 1):
            yield tl.send("E", cur)
            cur = yield tl.recv("W")
            acc = tl.add(acc, cur)
            yield tl.math()
        return acc

    b, agents, inst = _ring3(small)
    assert run_kernels(b, agents, inst, ring, 256) == [7, 7, 7]
    _check_matched(b.build())


# ----------------------------------------------------------------------------------------------------------------
# Deadlock at replay time (F3/F5): the sender fills a one-slot ring that nobody drains.
def _unmatched(t: Tables, r: Router, recv_without_send: bool = False) -> Program:
    b = ProgramBuilder(t, r, name="unmatched")
    a0, a1 = b.pe_agent(pe_block(t, 0, 0, 0)), b.pe_agent(pe_block(t, 0, 0, 1))
    b.start(a0)
    b.start(a1)
    ch = b.channel(a0, a1, n_slots=1)
    if recv_without_send:
        back = b.channel(a1, a0)
        b.send(a0, ch, 256)
        b.recv(a1, ch, 256)
        b.recv(a0, back, 256)       # a1 never sends on ``back``
    else:
        b.send(a0, ch, 256)
        b.send(a0, ch, 256)          # ring full: needs the credit of message 0, which never comes
    return b.build()


@pytest.mark.parametrize("evaluate", [run_exact, run_fast], ids=["exact", "fast"])
def test_send_without_recv_deadlocks(small, evaluate) -> None:
    t, r = small["ring2_2x2"]
    with pytest.raises(ReplayDeadlock) as err:
        evaluate(_unmatched(t, r))
    msg = str(err.value)
    assert "IPCQ deadlock in 'unmatched'" in msg
    assert "sip0.cube0.pe0: blocked on SEND on ch0, whose ring stays full" in msg
    assert "pointers:" in msg
    assert "ch0 sip0.cube0.pe0 -> sip0.cube0.pe1: my_head=1 peer_tail_cache=0 peer_head_cache=1 my_tail=0 " \
           "n_slots=1" in msg


@pytest.mark.parametrize("evaluate", [run_exact, run_fast], ids=["exact", "fast"])
def test_recv_without_send_deadlocks(small, evaluate) -> None:
    t, r = small["ring2_2x2"]
    with pytest.raises(ReplayDeadlock) as err:
        evaluate(_unmatched(t, r, recv_without_send=True))
    msg = str(err.value)
    assert "sip0.cube0.pe0: blocked on op" in msg and "(RECV), which never completed" in msg
    assert "ch1 sip0.cube0.pe1 -> sip0.cube0.pe0: my_head=0" in msg
    assert "my_head=" in msg and "peer_tail_cache=" in msg


@pytest.mark.parametrize("evaluate", [run_exact, run_fast], ids=["exact", "fast"])
def test_send_never_received_breaks_i1(small, evaluate) -> None:
    """A message that fits the ring but is never received finishes the replay, yet violates I1."""
    from kbfast.sim.diagnostics import IpcqUnconsumed

    t, r = small["ring2_2x2"]
    b = ProgramBuilder(t, r, name="lonely")
    a0, a1 = b.pe_agent(pe_block(t, 0, 0, 0)), b.pe_agent(pe_block(t, 0, 0, 1))
    b.send(a0, b.channel(a0, a1), 256)
    with pytest.raises(IpcqUnconsumed, match="1 IPCQ message"):
        evaluate(b.build())
