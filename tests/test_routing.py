"""Routing tests: canonical routes (spec_fabric §4.4), route rules (§4.2), and the
hierarchical composition against flat Dijkstra on the whole system graph."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.config import load_system
from kbfast.errors import RoutingError
from kbfast.topology.builder import Tables, build_tables, reverse_route_edges
from kbfast.topology.kinds import UCIE_IO_KINDS, EdgeKind, Graph, NodeKind
from kbfast.topology.names import locate, node_id, node_names
from kbfast.topology.routing import POLICIES, ROUTE_KINDS, Router, build_csr, flat_route, name_ranks

IO_SIDE_NODES = {NodeKind.SWITCH, NodeKind.PCIE_EP, NodeKind.IO_CPU, NodeKind.IO_NOC, NodeKind.IO_UCIE,
                 NodeKind.IO_CONN, NodeKind.UCIE, NodeKind.UCIE_CONN}
PAIRED = {
    EdgeKind.PE_TO_ROUTER: EdgeKind.ROUTER_TO_PE, EdgeKind.ROUTER_TO_HBM: EdgeKind.HBM_TO_ROUTER,
    EdgeKind.ROUTER_TO_SRAM: EdgeKind.SRAM_TO_ROUTER, EdgeKind.ROUTER_TO_UCIE_CONN: EdgeKind.UCIE_CONN_TO_ROUTER,
    EdgeKind.IO_TO_CUBE: EdgeKind.CUBE_TO_IO,
}
PAIRED.update({v: k for k, v in PAIRED.items()})


def kinds_of(t: Tables, edges: np.ndarray) -> set[EdgeKind]:
    return {EdgeKind(int(k)) for k in t.edge_kind[edges]}


def short(names: list[str]) -> list[str]:
    return [n.removeprefix("sip0.cube0.") for n in names]


def expected_graph(t: Tables, kind: str, src: int, dst: int) -> Graph:
    """The adjacency graph a route kind should use (spec_fabric §4.2 public calls), derived independently."""
    (s_sip, s_cube, _), (d_sip, d_cube, _) = locate(t, src), locate(t, dst)
    same_cube = s_sip == d_sip and s_cube == d_cube and s_cube >= 0
    return {
        "pe_dma": Graph.LOCAL_DATA if same_cube else Graph.DATA,
        "mcpu_dma": Graph.LOCAL if same_cube else Graph.ALL,
        "memory": Graph.MEMORY,
        "node": Graph.ALL,
    }[kind]


# ----------------------------------------------------------- canonical routes


def test_local_hbm_route(route_names):
    assert route_names("sip0.cube0.pe0.pe_dma", "sip0.cube0.hbm_ctrl.pe0") == [
        "sip0.cube0.pe0.pe_dma", "sip0.cube0.r0c0", "sip0.cube0.hbm_ctrl.pe0"]


PE_ROUTERS = ["r0c0", "r0c1", "r1c4", "r1c5", "r4c0", "r4c1", "r5c4", "r5c5"]


@pytest.mark.parametrize("pe,pe_router", list(enumerate(PE_ROUTERS)))
def test_local_hbm_route_every_pe(route_names, pe, pe_router):
    """'0 mesh hops': pe_dma -> own router -> own HBM controller (ADR-0017 D7, ADR-0004 D1)."""
    c = "sip1.cube6"
    assert route_names(f"{c}.pe{pe}.pe_dma", f"{c}.hbm_ctrl.pe{pe}") == [
        f"{c}.pe{pe}.pe_dma", f"{c}.{pe_router}", f"{c}.hbm_ctrl.pe{pe}"]


def test_adr0017_d7_x_first_path(route_names):
    names = route_names("sip0.cube0.pe0.pe_dma", "sip0.cube0.hbm_ctrl.pe2")
    assert short(names) == ["pe0.pe_dma", "r0c0", "r0c1", "r0c2", "r0c3", "r0c4", "r1c4", "hbm_ctrl.pe2"]


def test_same_cube_routes_reach_pe_dma_through_the_router(route_names):
    """A PE DMA route to another PE's pe_dma enters by router_to_pe, not by the command port."""
    names = route_names("sip0.cube0.pe0.pe_dma", "sip0.cube0.pe2.pe_dma")
    assert short(names) == ["pe0.pe_dma", "r0c0", "r0c1", "r0c2", "r0c3", "r0c4", "r1c4", "pe2.pe_dma"]
    names = route_names("sip0.cube0.pe5.pe_dma", "sip0.cube0.pe4.pe_dma")
    assert short(names) == ["pe5.pe_dma", "r4c1", "r4c0", "pe4.pe_dma"]


def test_shared_sram_and_mcpu_dma_routes(route_names):
    assert short(route_names("sip0.cube0.pe0.pe_dma", "sip0.cube0.sram")) == [
        "pe0.pe_dma", "r0c0", "r1c0", "r2c0", "r3c0", "sram"]
    names = short(route_names("sip0.cube0.m_cpu", "sip0.cube0.hbm_ctrl.pe6", "mcpu_dma"))
    assert names[:2] == ["m_cpu", "r2c0"] and names[-2:] == ["r5c4", "hbm_ctrl.pe6"]
    assert all(n.startswith("r") for n in names[1:-1])


def test_cross_cube_route_uses_ucie_and_a_seam(tables, router):
    s, d = node_id(tables, "sip0.cube0.pe0.pe_dma"), node_id(tables, "sip0.cube1.hbm_ctrl.pe0")
    edges = router.route(s, d)
    names = node_names(tables, router.route_nodes(s, d))
    kinds = [EdgeKind(int(k)) for k in tables.edge_kind[edges]]
    assert names[0] == "sip0.cube0.pe0.pe_dma" and names[-1] == "sip0.cube1.hbm_ctrl.pe0"
    assert kinds.count(EdgeKind.UCIE_MESH) == 1
    seam = kinds.index(EdgeKind.UCIE_MESH)
    # ... -> ucie-conn -> ucie-E == seam ==> ucie-W (cube1) -> conn -> router ...
    assert names[seam] == "sip0.cube0.ucie-E" and names[seam + 1] == "sip0.cube1.ucie-W"
    assert kinds[seam - 1] == EdgeKind.UCIE_INTERNAL and kinds[seam + 1] == EdgeKind.UCIE_INTERNAL
    assert EdgeKind.ROUTER_TO_UCIE_CONN in kinds and EdgeKind.UCIE_CONN_TO_ROUTER in kinds
    assert kinds[0] == EdgeKind.PE_TO_ROUTER and kinds[-1] == EdgeKind.ROUTER_TO_HBM
    # Vertical neighbour: cube0 -> cube4 crosses ucie-S => ucie-N.
    names = node_names(tables, router.route_nodes(s, node_id(tables, "sip0.cube4.hbm_ctrl.pe0")))
    i = names.index("sip0.cube0.ucie-S")
    assert names[i + 1] == "sip0.cube4.ucie-N"


def _cube_grid_sample(tables, router, sip=1):
    src, dst, hops = [], [], []
    for a in range(16):
        for b in range(16):
            for x, y in ((0, 7), (3, 4), (6, 1)):
                src.append(node_id(tables, f"sip{sip}.cube{a}.pe{x}.pe_dma"))
                dst.append(node_id(tables, f"sip{sip}.cube{b}.hbm_ctrl.pe{y}"))
                hops.append(abs(a % 4 - b % 4) + abs(a // 4 - b // 4))
    return src, dst, hops, router.routes(src, dst, "pe_dma")


def _visits_io_chiplet(tables, nodes) -> bool:
    return bool(np.any(tables.node_kind[nodes] <= NodeKind.IO_CONN))


def test_cross_cube_seam_count_is_manhattan(tables, router):
    """Over the cube mesh, a route crosses as many UCIe seams as the cube-grid Manhattan distance
    (no wrap-around, no detours)."""
    src, dst, hops, rs = _cube_grid_sample(tables, router)
    checked = 0
    for i in range(len(rs)):
        if _visits_io_chiplet(tables, rs.nodes_of(i, tables.edge_dst)):
            continue   # see test_intra_sip_routes_stay_on_the_cube_mesh
        assert int(np.count_nonzero(tables.edge_kind[rs.edges_of(i)] == EdgeKind.UCIE_MESH)) == hops[i]
        checked += 1
    assert checked > 0.9 * len(rs)


def test_intra_sip_routes_stay_on_the_cube_mesh(tables, router):
    src, dst, hops, rs = _cube_grid_sample(tables, router, sip=0)
    via_io = [node_names(tables, np.array([src[i], dst[i]])) for i in range(len(rs))
              if _visits_io_chiplet(tables, rs.nodes_of(i, tables.edge_dst))]
    assert via_io == []


def test_host_memory_write_bypasses_io_cpu_and_m_cpu(tables, router):
    src = node_id(tables, "sip0.io0.pcie_ep")
    for dst_name in ("sip0.cube0.hbm_ctrl.pe0", "sip0.cube5.hbm_ctrl.pe2", "sip0.cube15.hbm_ctrl.pe7",
                     "sip0.cube12.sram"):
        dst = node_id(tables, dst_name)
        nodes = router.route_nodes(src, dst, "memory")
        kinds = [NodeKind(int(k)) for k in tables.node_kind[nodes]]
        assert NodeKind.IO_CPU not in kinds and NodeKind.M_CPU not in kinds
        # pcie_ep -> io_noc -> conn -> io_ucie -> cube UCIe ...
        assert kinds[:5] == [NodeKind.PCIE_EP, NodeKind.IO_NOC, NodeKind.IO_CONN, NodeKind.IO_UCIE, NodeKind.UCIE]
        assert kinds[-2] == NodeKind.ROUTER and node_names(tables, nodes[-1:]) == [dst_name]
        edges = router.route(src, dst, "memory")
        assert EdgeKind.IO_TO_CUBE in kinds_of(tables, edges)
        assert not kinds_of(tables, edges) & {EdgeKind.PE_INTERNAL, EdgeKind.PE_TO_ROUTER, EdgeKind.COMMAND}


def test_kernel_launch_legs(tables, router, route_names):
    # Host -> IO_CPU: pcie_ep -> io_noc -> io_cpu.
    assert route_names("sip0.io0.pcie_ep", "sip0.io0.io_cpu", "node") == [
        "sip0.io0.pcie_ep", "sip0.io0.io_noc", "sip0.io0.io_cpu"]
    # IO_CPU -> M_CPU of a cube: io_cpu -> io_noc -> conn -> io_ucie -> cube UCIe ... -> router -> m_cpu.
    s, d = node_id(tables, "sip0.io0.io_cpu"), node_id(tables, "sip0.cube5.m_cpu")
    names = node_names(tables, router.route_nodes(s, d, "node"))
    assert names[:4] == ["sip0.io0.io_cpu", "sip0.io0.io_noc", "sip0.io0.io_ucie-P1.conn0", "sip0.io0.io_ucie-P1"]
    assert names[-2:] == ["sip0.cube5.r2c0", "sip0.cube5.m_cpu"]
    assert tables.edge_kind[router.route(s, d, "node")[-1]] == EdgeKind.COMMAND
    # M_CPU -> PE_CPU: leaves M_CPU and enters PE_CPU by command edges.
    for pe, r in ((0, "r0c0"), (6, "r5c4")):
        s, d = node_id(tables, "sip1.cube9.m_cpu"), node_id(tables, f"sip1.cube9.pe{pe}.pe_cpu")
        edges = router.route(s, d, "node")
        names = node_names(tables, router.route_nodes(s, d, "node"))
        assert names[:2] == ["sip1.cube9.m_cpu", "sip1.cube9.r2c0"]
        assert names[-2:] == [f"sip1.cube9.{r}", f"sip1.cube9.pe{pe}.pe_cpu"]
        assert tables.edge_kind[edges[0]] == EdgeKind.COMMAND and tables.edge_kind[edges[-1]] == EdgeKind.COMMAND
        assert EdgeKind.PE_INTERNAL not in kinds_of(tables, edges)


def test_cross_sip_route_goes_through_the_switch(tables, router):
    s, d = node_id(tables, "sip0.cube5.pe0.pe_dma"), node_id(tables, "sip1.cube10.hbm_ctrl.pe3")
    names = node_names(tables, router.route_nodes(s, d))
    i = names.index("fabric.switch0")
    assert names[i - 2:i + 3] == ["sip0.io0.io_noc", "sip0.io0.pcie_ep", "fabric.switch0", "sip1.io0.pcie_ep",
                                  "sip1.io0.io_noc"]
    assert names.count("fabric.switch0") == 1
    assert all(n.startswith("sip0.") for n in names[:i]) and all(n.startswith("sip1.") for n in names[i + 1:])
    edges = router.route(s, d)
    assert int(np.count_nonzero(tables.edge_kind[edges] == EdgeKind.PCIE)) == 2
    assert EdgeKind.COMMAND not in kinds_of(tables, edges)
    # Host memory write into the other SIP also crosses the switch.
    names = node_names(tables, router.route_nodes(node_id(tables, "sip0.io0.pcie_ep"),
                                                  node_id(tables, "sip1.cube0.hbm_ctrl.pe0"), "memory"))
    assert names[:3] == ["sip0.io0.pcie_ep", "fabric.switch0", "sip1.io0.pcie_ep"]


# ---------------------------------------------------------------- route rules


@pytest.mark.parametrize("sip,cube", [(0, 0), (0, 5), (1, 15)])
def test_same_cube_pe_dma_routes_stay_inside_the_cube(tables, router, check_route, sip, cube):
    c = f"sip{sip}.cube{cube}"
    src, dst = [], []
    for x in range(8):
        for y in range(8):
            for target in (f"hbm_ctrl.pe{y}", f"pe{y}.pe_dma", "sram"):
                if target == f"pe{x}.pe_dma":
                    continue
                src.append(node_id(tables, f"{c}.pe{x}.pe_dma"))
                dst.append(node_id(tables, f"{c}.{target}"))
    rs = router.routes(src, dst, "pe_dma")
    assert len(rs) == len(src) == 8 * 8 * 3 - 8
    for i in range(len(rs)):
        edges = rs.edges_of(i)
        check_route(tables, src[i], dst[i], edges)
        assert not kinds_of(tables, edges) & (UCIE_IO_KINDS | {EdgeKind.COMMAND, EdgeKind.PE_INTERNAL})
        nodes = rs.nodes_of(i, tables.edge_dst)
        assert not {NodeKind(int(k)) for k in tables.node_kind[nodes]} & IO_SIDE_NODES
        assert {locate(tables, int(n))[:2] for n in nodes} == {(sip, cube)}
        # Between source and sink there are only routers.
        assert np.all(tables.node_kind[nodes[1:-1]] == NodeKind.ROUTER)


def test_pe_dma_routes_never_use_command_edges(tables, router):
    rng = np.random.default_rng(7)
    src = [node_id(tables, f"sip{rng.integers(2)}.cube{rng.integers(16)}.pe{rng.integers(8)}.pe_dma")
           for _ in range(200)]
    targets = ("hbm_ctrl.pe{}", "pe{}.pe_dma", "sram", "hbm_ctrl.pe{}")
    dst = [node_id(tables, f"sip{rng.integers(2)}.cube{rng.integers(16)}."
                           + targets[rng.integers(4)].format(rng.integers(8))) for _ in range(200)]
    rs = router.routes(src, dst, "pe_dma")
    for i in range(len(rs)):
        kinds = kinds_of(tables, rs.edges_of(i))
        assert EdgeKind.COMMAND not in kinds and EdgeKind.PE_INTERNAL not in kinds


def test_memory_routes_never_enter_pe_pipelines(tables, router):
    rng = np.random.default_rng(11)
    srcs = ["sip{}.io0.pcie_ep", "sip{}.cube{}.m_cpu"]
    src, dst = [], []
    for _ in range(150):
        s = srcs[rng.integers(2)].format(rng.integers(2), rng.integers(16))
        src.append(node_id(tables, s))
        dst.append(node_id(tables, f"sip{rng.integers(2)}.cube{rng.integers(16)}.hbm_ctrl.pe{rng.integers(8)}"))
    rs = router.routes(src, dst, "memory")
    for i in range(len(rs)):
        kinds = kinds_of(tables, rs.edges_of(i))
        assert EdgeKind.PE_INTERNAL not in kinds and EdgeKind.PE_TO_ROUTER not in kinds
        pe_blocks = tables.node_kind[rs.nodes_of(i, tables.edge_dst)] >= NodeKind.PE_DMA
        assert not pe_blocks.any()
    # A memory route cannot start inside a PE pipeline at all.
    with pytest.raises(RoutingError):
        router.route(node_id(tables, "sip0.cube0.pe0.pe_dma"), node_id(tables, "sip0.cube0.hbm_ctrl.pe1"), "memory")


def test_routes_are_deterministic(tables, router):
    rng = np.random.default_rng(3)
    n = tables.n_nodes
    pick = rng.integers(1, n, size=(300, 2))
    pick = pick[pick[:, 0] != pick[:, 1]]
    first = router.routes(pick[:, 0], pick[:, 1], "node")
    # A fresh build and a fresh router, routes asked one by one in reverse order.
    t2 = build_tables(load_system())
    r2 = Router(t2)
    for i in reversed(range(len(pick))):
        np.testing.assert_array_equal(r2.route(int(pick[i, 0]), int(pick[i, 1]), "node"), first.edges_of(i))
    again = router.routes(pick[:, 0], pick[:, 1], "node")
    np.testing.assert_array_equal(again.ptr, first.ptr)
    np.testing.assert_array_equal(again.edges, first.edges)


def test_a_repeated_query_is_kept_read_only_and_the_oldest_goes_first(tables):
    """Router.routes keeps its RECENT latest queries of at most RECENT_PAIRS pairs: the same query gives the
    same routes (read-only, so no caller changes them for the next), keyed by value, not by the arrays asked
    with; a larger query, and the least recently used past RECENT, are computed again, equal."""
    from kbfast.topology.routing import RECENT, RECENT_PAIRS

    router = Router(tables)
    pes = np.flatnonzero(tables.node_kind == NodeKind.PE_DMA)
    src, dst = pes[:8].copy(), pes[8:16].copy()
    first = router.routes(src, dst)
    src += 0                                              # the caller's arrays change after the call
    assert router.routes(pes[:8], pes[8:16]) is first
    assert not first.edges.flags.writeable and not first.ptr.flags.writeable
    with pytest.raises(ValueError):
        first.edges[0] = 0
    for k in range(RECENT):                               # RECENT other queries push the first one out
        router.routes(pes[k:k + 1], pes[k + 1:k + 2])
    later = router.routes(pes[:8], pes[8:16])
    assert later is not first and np.array_equal(later.edges, first.edges) and np.array_equal(later.ptr, first.ptr)
    many = np.resize(pes, RECENT_PAIRS + 1)
    big = router.routes(many, np.roll(many, 1))
    assert router.routes(many, np.roll(many, 1)) is not big and big.edges.flags.writeable


def test_responses_can_retrace_every_route(tables, router):
    """The engine reverses a route's edge list; every edge needs a reverse edge (same bw, same length)."""
    index = {(a, b): e for e, (a, b) in enumerate(zip(tables.edge_src.tolist(), tables.edge_dst.tolist()))}
    rng = np.random.default_rng(5)
    for kind in ROUTE_KINDS:
        if kind == "memory":
            src = [node_id(tables, f"sip{rng.integers(2)}.io0.pcie_ep") for _ in range(60)]
        elif kind == "mcpu_dma":
            src = [node_id(tables, f"sip{rng.integers(2)}.cube{rng.integers(16)}.m_cpu") for _ in range(60)]
        elif kind == "node":
            src = [node_id(tables, f"sip{rng.integers(2)}.io0.io_cpu") for _ in range(60)]
        else:
            src = [node_id(tables, f"sip{rng.integers(2)}.cube{rng.integers(16)}.pe{rng.integers(8)}.pe_dma")
                   for _ in range(60)]
        if kind == "node":
            dst = [node_id(tables, f"sip{rng.integers(2)}.cube{rng.integers(16)}."
                                   + ("m_cpu" if rng.integers(2) else f"pe{rng.integers(8)}.pe_cpu"))
                   for _ in range(60)]
        else:
            dst = [node_id(tables, f"sip{rng.integers(2)}.cube{rng.integers(16)}."
                                   + (f"hbm_ctrl.pe{rng.integers(8)}" if rng.integers(4) else "sram"))
                   for _ in range(60)]
        rs = router.routes(src, dst, kind)
        for i in range(len(rs)):
            edges = rs.edges_of(i)
            back = []
            for e in edges[::-1].tolist():
                r = index.get((int(tables.edge_dst[e]), int(tables.edge_src[e])))
                assert r is not None, f"{kind} route uses one-way edge {e}"
                assert EdgeKind(int(tables.edge_kind[r])) == PAIRED.get(EdgeKind(int(tables.edge_kind[e])),
                                                                         EdgeKind(int(tables.edge_kind[e])))
                assert tables.edge_bw_gbs[r] == tables.edge_bw_gbs[e]
                assert tables.edge_mm[r] == tables.edge_mm[e]
                back.append(r)
            back = np.array(back)
            # The reversed list is itself a valid walk dst -> src.
            assert int(tables.edge_src[back[0]]) == dst[i] and int(tables.edge_dst[back[-1]]) == src[i]
            np.testing.assert_array_equal(tables.edge_dst[back[:-1]], tables.edge_src[back[1:]])


def test_trivial_and_invalid_routes(tables, router):
    a = node_id(tables, "sip0.cube0.r0c0")
    assert len(router.route(a, a)) == 0
    np.testing.assert_array_equal(router.route_nodes(a, a), [a])
    with pytest.raises(RoutingError):
        router.route(0, a)                    # the switch is only a transit node
    with pytest.raises(ValueError):
        router.route(a, node_id(tables, "sip0.cube0.r0c1"), "teleport")
    with pytest.raises(ValueError):
        router.routes([a, a], [a])
    empty = router.routes([], [])
    assert len(empty) == 0 and len(empty.edges) == 0


# ---------------------------------------------- hierarchical == flat Dijkstra


def sample_pairs(t: Tables, seed: int, n_each: int) -> list[tuple[str, int, int]]:
    """(kind, src, dst) covering same-cube, cross-cube, cross-SIP, memory, mcpu_dma and node routes."""
    rng = np.random.default_rng(seed)
    lay = t.layout
    S, C = lay.n_sips, lay.n_cubes_per_sip

    def r(n: int) -> int:
        return int(rng.integers(n))

    def nid(name: str) -> int:
        return node_id(t, name)

    def other(n: int, x: int) -> int:
        return (x + 1 + r(n - 1)) % n if n > 1 else x

    local = ["hbm_ctrl.pe{}", "pe{}.pe_dma", "sram", "r0c5", "r5c1"]
    out: list[tuple[str, int, int]] = []
    for _ in range(n_each):
        s, c = r(S), r(C)
        src_pe = nid(f"sip{s}.cube{c}.pe{r(8)}.pe_dma")
        tgt = local[r(len(local))].format(r(8))
        out.append(("pe_dma", src_pe, nid(f"sip{s}.cube{c}.{tgt}")))                       # same cube
        out.append(("pe_dma", src_pe, nid(f"sip{s}.cube{other(C, c)}.hbm_ctrl.pe{r(8)}")))  # cross cube
        out.append(("pe_dma", src_pe, nid(f"sip{other(S, s)}.cube{r(C)}.pe{r(8)}.pe_dma")))  # cross SIP
        out.append(("memory", nid(f"sip{s}.io0.pcie_ep"), nid(f"sip{r(S)}.cube{r(C)}.hbm_ctrl.pe{r(8)}")))
        out.append(("memory", nid(f"sip{s}.cube{c}.m_cpu"), nid(f"sip{r(S)}.cube{r(C)}.sram")))
        out.append(("mcpu_dma", nid(f"sip{s}.cube{c}.m_cpu"), nid(f"sip{s}.cube{c}.hbm_ctrl.pe{r(8)}")))
        out.append(("mcpu_dma", nid(f"sip{s}.cube{c}.m_cpu"), nid(f"sip{s}.cube{other(C, c)}.hbm_ctrl.pe{r(8)}")))
        out.append(("node", nid(f"sip{s}.io0.io_cpu"), nid(f"sip{s}.cube{r(C)}.m_cpu")))
        out.append(("node", nid(f"sip{s}.cube{c}.m_cpu"), nid(f"sip{s}.cube{c}.pe{r(8)}.pe_cpu")))
        out.append(("node", nid(f"sip{s}.io0.io_cpu"), nid(f"sip{other(S, s)}.cube{r(C)}.m_cpu")))
    return out


def assert_matches_flat(t: Tables, router: Router, pairs: list[tuple[str, int, int]], policy: str | None = None):
    seen_graphs = set()
    for kind in ROUTE_KINDS:
        sel = [(s, d) for k, s, d in pairs if k == kind]
        if not sel:
            continue
        src, dst = zip(*sel)
        rs = router.routes(list(src), list(dst), kind)
        for i, (s, d) in enumerate(sel):
            g = expected_graph(t, kind, s, d)
            seen_graphs.add(g)
            flat = flat_route(t, s, d, g, policy)
            hier = rs.edges_of(i)
            assert np.array_equal(hier, flat), (
                f"{kind} {node_names(t, np.array([s, d]))} graph {g.name}: "
                f"hier {node_names(t, rs.nodes_of(i, t.edge_dst))} != flat "
                f"{node_names(t, np.concatenate([[s], t.edge_dst[flat]]))}")
    return seen_graphs


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fixture,seed,n_each", [("tables", 1, 6), ("torus6_tables", 2, 5), ("small_tables", 3, 6)])
def test_hierarchical_routes_equal_flat_dijkstra(request, fixture, seed, n_each, policy):
    t = request.getfixturevalue(fixture)
    router = Router(t, policy=policy)
    pairs = sample_pairs(t, seed, n_each)
    graphs = assert_matches_flat(t, router, pairs, policy)
    assert graphs == set(Graph)
    # The samples really cover cross-SIP routes.
    assert any(locate(t, s)[0] != locate(t, d)[0] for _, s, d in pairs)


def test_hops_policy_equals_flat_dijkstra(small_tables):
    router = Router(small_tables, policy="hops")
    assert router.policy == "hops"
    assert_matches_flat(small_tables, router, sample_pairs(small_tables, 4, 3), policy="hops")


def test_hops_policy_from_config():
    t = build_tables(load_system(overrides={"routing.policy": "hops"}))
    router = Router(t)
    assert router.policy == "hops"
    assert_matches_flat(t, router, sample_pairs(t, 5, 2), policy="hops")
    # Under hops, a route never has more edges than the mm route of the same pair.
    mm = Router(t, policy="balanced")
    for kind, s, d in sample_pairs(t, 6, 2):
        assert len(router.route(s, d, kind)) <= len(mm.route(s, d, kind))
    s, d = node_id(t, "sip0.cube0.pe0.pe_dma"), node_id(t, "sip0.cube0.hbm_ctrl.pe0")
    assert len(router.route(s, d)) == 2


def test_weight_mm_override_steers_routes_and_matches_flat():
    """routing.weight_mm re-weights whole edge kinds (routing only; propagation keeps physical mm)."""
    t = build_tables(load_system(overrides={"routing.weight_mm.ucie_internal": 50.0}))
    router = Router(t)
    assert_matches_flat(t, router, sample_pairs(t, 8, 2))
    s, d = node_id(t, "sip0.cube0.pe0.pe_dma"), node_id(t, "sip0.cube3.hbm_ctrl.pe7")
    edges = router.route(s, d)
    kinds = t.edge_kind[edges]
    # Expensive conn <-> endpoint edges: only the 2 per seam crossing remain, no detours through UCIe endpoints.
    assert np.count_nonzero(kinds == EdgeKind.UCIE_INTERNAL) == 2 * np.count_nonzero(kinds == EdgeKind.UCIE_MESH)
    np.testing.assert_array_equal(np.unique(t.edge_mm[t.edge_kind == EdgeKind.UCIE_INTERNAL]), [0.0])


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(ROUTE_KINDS), a=st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 7)),
       b=st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 7)), tgt=st.sampled_from(["hbm", "sram", "pe"]))
def test_hierarchical_equals_flat_property(small_tables, small_router, kind, a, b, tgt):
    t = small_tables
    src_name = {"pe_dma": f"sip{a[0]}.cube{a[1]}.pe{a[2]}.pe_dma", "memory": f"sip{a[0]}.io0.pcie_ep",
                "mcpu_dma": f"sip{a[0]}.cube{a[1]}.m_cpu", "node": f"sip{a[0]}.io0.io_cpu"}[kind]
    if kind == "node":
        local = "m_cpu" if tgt != "pe" else f"pe{b[2]}.pe_cpu"
    elif tgt == "pe" and kind != "memory":
        local = f"pe{b[2]}.pe_dma"
    else:
        local = "sram" if tgt == "sram" else f"hbm_ctrl.pe{b[2]}"
    dst_name = f"sip{b[0]}.cube{b[1]}.{local}"
    s, d = node_id(t, src_name), node_id(t, dst_name)
    hier = small_router.route(s, d, kind)
    flat = flat_route(t, s, d, expected_graph(t, kind, s, d))
    np.testing.assert_array_equal(hier, flat)


@pytest.mark.parametrize("kind", ["pe_dma", "memory"])
def test_reverse_route_edges_retrace_each_route(kind: str) -> None:
    """Route i reversed: its edges in reverse order, each edge the one between the same two nodes the
    other way (switch links included, on random cross-SIP pairs)."""
    t = build_tables(load_system("torus6"))
    router = Router(t)
    rng = np.random.default_rng(5)
    pe = np.flatnonzero(t.node_kind == NodeKind.PE_DMA)
    hbm = np.flatnonzero(t.node_kind == NodeKind.HBM_CTRL)
    src = rng.choice(pe if kind == "pe_dma" else np.flatnonzero(t.node_kind == NodeKind.PCIE_EP), 300)
    rs = router.routes(src, rng.choice(hbm, 300), kind)
    rev = reverse_route_edges(t, rs.ptr, rs.edges)
    for i in range(len(rs)):
        fwd, back = rs.edges_of(i), rev[rs.ptr[i]:rs.ptr[i + 1]]
        assert np.array_equal(t.edge_src[back], t.edge_dst[fwd[::-1]])
        assert np.array_equal(t.edge_dst[back], t.edge_src[fwd[::-1]])
    assert (t.edge_kind[rs.edges] == EdgeKind.PCIE).any()      # some routes cross the switch


# --------------------------------------------------------------------------------------------------------------
# The kernbench policy against a plain-Python PathRouter: heapq over (distance, full node name) tuples, strict
# improvement only, PE blocks and HBM controllers never transit (README decisions, "routing").

def _owner(name: str) -> str | None:
    """The PE or HBM controller a node belongs to (``sip0.cube1.pe3``, ``sip0.cube1.hbm_ctrl.pe3``), else None."""
    parts = name.split(".")
    if len(parts) >= 4 and parts[-2].startswith("pe") and parts[-2][2:].isdigit() and parts[-1].startswith("pe_"):
        return ".".join(parts[:-1])
    return name if "hbm_ctrl" in name else None


def heapq_path_router(t: Tables, graph: Graph, src: int, dst: int) -> list[str]:
    names = node_names(t, np.arange(t.n_nodes))
    mm_um = np.rint(t.edge_mm * t.plan.units_per_mm).astype(np.int64)
    ptr, adj = build_csr(t.n_nodes, t.edge_src, t.edge_kind, graph)
    home = _owner(names[src])
    dist, pred, heap = {names[src]: 0}, {}, [(0, names[src], src)]
    while heap:
        d, name, u = heapq.heappop(heap)
        if d > dist[name]:
            continue
        for e in adj[ptr[u]:ptr[u + 1]]:
            v = int(t.edge_dst[e])
            if _owner(name) not in (None, home) and _owner(names[v]) != _owner(name):
                continue   # a foreign PE or controller is never a transit node
            nd = d + int(mm_um[e])
            if nd < dist.get(names[v], 1 << 62):
                dist[names[v]], pred[names[v]] = nd, name
                heapq.heappush(heap, (nd, names[v], v))
    route, node = [names[dst]], names[dst]
    while node != names[src]:
        node = pred[node]
        route.append(node)
    return route[::-1]


def test_name_order_is_string_order():
    assert list(name_ranks(["sip2.io0.pcie_ep", "sip10.io0.pcie_ep", "fabric.switch0"])) == [2, 1, 0]


@pytest.mark.parametrize("n_sips", [2, 12])
def test_kernbench_router_equals_plain_heapq_path_router(n_sips):
    """Hierarchical kernbench routes == a plain heapq Dijkstra over full names on the whole system; with 12
    SIPs, ``sip10`` and ``sip11`` sort before ``sip2`` in the heap."""
    t = build_tables(load_system(overrides={"sips.count": n_sips, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2,
                                            "routing.policy": "kernbench"}))
    router = Router(t)
    pairs = sample_pairs(t, 11, 2) + [("pe_dma", node_id(t, "sip0.cube0.pe0.pe_dma"), node_id(t, "sip0.cube3.hbm_ctrl.pe7"))]
    if n_sips > 10:
        pairs.append(("pe_dma", node_id(t, "sip10.cube1.pe2.pe_dma"), node_id(t, "sip2.cube2.hbm_ctrl.pe5")))
    for kind, s, d in pairs:
        ours = node_names(t, router.route_nodes(s, d, kind))
        assert ours == heapq_path_router(t, expected_graph(t, kind, s, d), s, d), (kind, ours[0], ours[-1])


def test_kernbench_uses_an_endpoint_as_a_zero_length_bus(tables, router):
    """Cross-cube routes are not fenced: the far-cube route bounces through UCIe endpoints (conn -> ucie-P ->
    conn of the same port), which the balanced policy never does."""
    s, d = node_id(tables, "sip0.cube0.pe0.pe_dma"), node_id(tables, "sip0.cube15.hbm_ctrl.pe2")

    def bounces(r: Router) -> int:
        names = node_names(tables, r.route_nodes(s, d))
        return sum(a.startswith(b + ".conn") and c.startswith(b + ".conn") for a, b, c in zip(names, names[1:], names[2:]))

    assert router.policy == "kernbench" and bounces(router) > 0
    assert bounces(Router(tables, policy="balanced")) == 0
