"""Builder, floor plan and naming tests (spec_fabric §1.2, §1.4, §1.5, §3).

Expected counts are derived by hand from the floor plan:

* routers: 6 x 6 grid minus the 2 x 2 HBM hole (r2c2, r2c3, r3c2, r3c3) = 32;
* mesh links: each of the 6 rows has 5 horizontal links, rows 2 and 3 lose the
  3 that touch the hole -> 30 - 6 = 24; the same for columns -> 24 vertical;
  48 links = 96 directed ``router_mesh`` edges per cube;
* UCIe seams: one ``ucie_mesh`` link between adjacent cubes' endpoints (no
  wrap): (w-1)*h + w*(h-1) links; 4 x 4 -> 24 links = 48 directed edges per
  SIP (96 in the 2-SIP system).
"""

from __future__ import annotations

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.errors import UnknownNodeError
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.kinds import PE_BLOCK_KINDS, PE_BLOCKS, EdgeKind, NodeKind
from kbfast.topology.names import hbm_ctrl, io_node, locate, node_id, node_name, pe_block

HOLE = {(2, 2), (2, 3), (3, 2), (3, 3)}
PE_ROUTER = ["r0c0", "r0c1", "r1c4", "r1c5", "r4c0", "r4c1", "r5c4", "r5c5"]
CONN_ROUTERS = {
    "N": ["r0c0", "r0c1", "r0c4", "r0c5"],
    "E": ["r0c5", "r1c5", "r4c5", "r5c5"],
    "S": ["r5c0", "r5c1", "r5c4", "r5c5"],
    "W": ["r0c0", "r1c0", "r4c0", "r5c0"],
}


def expected_edges(n_sips: int, cw: int, ch: int, n_io_ports: int = 2, io_conns: int = 4) -> dict[str, int]:
    """Directed edge count per kind, from the floor plan and spec_fabric §3 (by hand)."""
    cubes = n_sips * cw * ch
    seams = (cw - 1) * ch + cw * (ch - 1)
    return {
        "pe_to_router": 8 * cubes,
        "router_to_pe": 8 * cubes,
        "command": (2 * 8 + 2) * cubes,             # router <-> pe_cpu per PE, router <-> m_cpu
        "router_mesh": 96 * cubes,
        "router_to_hbm": 8 * cubes,
        "hbm_to_router": 8 * cubes,
        "router_to_sram": cubes,
        "sram_to_router": cubes,
        "router_to_ucie_conn": 16 * cubes,          # 4 ports x 4 connections
        "ucie_conn_to_router": 16 * cubes,
        # conn <-> endpoint, both directions: 16 per cube x 2, plus the IO PHYs' connections
        "ucie_internal": 32 * cubes + n_sips * n_io_ports * io_conns * 2,
        "ucie_mesh": 2 * seams * n_sips,
        # pcie_ep <-> io_noc, io_noc <-> io_cpu, io_noc <-> every IO connection
        "io_internal": n_sips * (4 + 2 * n_io_ports * io_conns),
        "io_to_cube": n_io_ports * n_sips,
        "cube_to_io": n_io_ports * n_sips,
        "pcie": 2 * n_sips,
        "pe_internal": 18 * 8 * cubes,              # the 18-edge intra-PE chain (spec_pe §4.8)
    }


def edge_counts(t: Tables) -> dict[str, int]:
    counts = np.bincount(t.edge_kind, minlength=len(EdgeKind))
    return {k.name.lower(): int(counts[k]) for k in EdgeKind}


def cube_slice(t: Tables, sip: int, cube: int) -> slice:
    base = t.layout.cube_node_base(sip, cube)
    return slice(base, base + t.layout.nodes_per_cube)


def edge_between(t: Tables, a: str, b: str) -> np.ndarray:
    """Ids of the directed edges a -> b."""
    ia, ib = node_id(t, a), node_id(t, b)
    return np.flatnonzero((t.edge_src == ia) & (t.edge_dst == ib))


# ---------------------------------------------------------------- floor plan


def test_router_grid_is_6x6_minus_hbm_hole(tables):
    plan = tables.plan
    assert len(plan.col_x) == 6 and len(plan.row_y) == 6
    assert plan.n_routers == 32
    assert set(plan.routers) == {(r, c) for r in range(6) for c in range(6)} - HOLE
    assert list(plan.routers) == sorted(plan.routers)  # row-major
    # Columns, the 3 mm reading (16 mm wide): PE x positions 1.5, 4.5, 11.5, 14.5 and two relay columns in the
    # 7 mm gap, at 6.83 and 9.17 mm (the decisions table's floor plan).
    assert plan.col_x == pytest.approx((1.5, 4.5, 4.5 + 7 / 3, 4.5 + 14 / 3, 11.5, 14.5))
    # Rows: HBM rows at h/2 -+ 1.5 = 5.5 and 8.5.
    assert plan.row_y[2] == pytest.approx(5.5) and plan.row_y[3] == pytest.approx(8.5)
    assert plan.row_y[0] == pytest.approx(1.5) and plan.row_y[5] == pytest.approx(12.5)


def test_the_14mm_parameter_set_is_the_other_reading():
    """``kernbench-2026-11-14mm``: a 14 mm cube with a 2 mm pitch, columns 1.5, 3.5, 5.83, 8.17, 10.5, 12.5 mm; the
    same rows, router grid and attachments (docs/calibration.md, "Geometry")."""
    narrow = build_tables(load_system(overrides={"param_set": "kernbench-2026-11-14mm"})).plan
    wide = build_tables(load_system()).plan
    assert narrow.col_x == pytest.approx((1.5, 3.5, 3.5 + 7 / 3, 3.5 + 14 / 3, 10.5, 12.5))
    assert narrow.row_y == wide.row_y and narrow.routers == wide.routers
    assert narrow.pe_router == wide.pe_router and narrow.conn_router == wide.conn_router


def test_floorplan_attachments(tables):
    plan = tables.plan

    def rc(r: int) -> str:
        row, col = plan.routers[r]
        return f"r{row}c{col}"

    assert [rc(r) for r in plan.pe_router] == PE_ROUTER      # PE0 on r0c0, PE2 on r1c4
    assert rc(plan.m_cpu_router) == "r2c0"
    assert rc(plan.sram_router) == "r3c0"
    assert {p: [rc(r) for r in rs] for p, rs in plan.conn_router.items()} == CONN_ROUTERS


def test_floorplan_attachments_in_the_graph(tables):
    """The builder wires each attachment to the floor-plan router."""
    c = "sip1.cube7"
    for x, r in enumerate(PE_ROUTER):
        assert len(edge_between(tables, f"{c}.pe{x}.pe_dma", f"{c}.{r}")) == 1
        assert len(edge_between(tables, f"{c}.{r}", f"{c}.hbm_ctrl.pe{x}")) == 1
        assert len(edge_between(tables, f"{c}.{r}", f"{c}.pe{x}.pe_cpu")) == 1
        # Only PE x's own router connects to its HBM controller.
        hbm = node_id(tables, f"{c}.hbm_ctrl.pe{x}")
        assert np.count_nonzero(tables.edge_dst == hbm) == 1
    assert len(edge_between(tables, f"{c}.r2c0", f"{c}.m_cpu")) == 1
    assert len(edge_between(tables, f"{c}.r3c0", f"{c}.sram")) == 1
    for port, routers in CONN_ROUTERS.items():
        for i, r in enumerate(routers):
            assert len(edge_between(tables, f"{c}.{r}", f"{c}.ucie-{port}.conn{i}")) == 1
            assert len(edge_between(tables, f"{c}.ucie-{port}.conn{i}", f"{c}.ucie-{port}")) == 1
    # Nothing attaches inside the HBM hole.
    for r, col in HOLE:
        with pytest.raises(UnknownNodeError):
            node_id(tables, f"{c}.r{r}c{col}")


# ------------------------------------------------------------------- counts


def test_per_cube_node_counts(tables):
    for sip, cube in ((0, 0), (1, 15), (0, 9)):
        kinds = np.bincount(tables.node_kind[cube_slice(tables, sip, cube)], minlength=len(NodeKind))
        assert kinds[NodeKind.ROUTER] == 32
        assert kinds[NodeKind.PE_DMA] == 8
        for k in PE_BLOCK_KINDS:
            assert kinds[k] == 8, k.name
        assert kinds[NodeKind.HBM_CTRL] == 8
        assert kinds[NodeKind.UCIE] == 4
        assert kinds[NodeKind.UCIE_CONN] == 16
        assert kinds[NodeKind.M_CPU] == 1 and kinds[NodeKind.SRAM] == 1
        io_kinds = (NodeKind.SWITCH, NodeKind.PCIE_EP, NodeKind.IO_CPU, NodeKind.IO_NOC, NodeKind.IO_UCIE,
                    NodeKind.IO_CONN)
        assert all(kinds[k] == 0 for k in io_kinds)
    assert tables.layout.nodes_per_cube == 32 + 4 + 16 + 1 + 1 + 8 + 8 * 9


def test_ucie_ports_and_connection_names(tables):
    names = set(tables.cube_names)
    for port in "NESW":
        assert f"ucie-{port}" in names
        assert [f"ucie-{port}.conn{i}" in names for i in range(5)] == [True] * 4 + [False]


def test_system_node_counts(tables, spec):
    lay = tables.layout
    assert lay.n_sips == 2 and lay.n_cubes_per_sip == 16
    kinds = np.bincount(tables.node_kind, minlength=len(NodeKind))
    assert kinds[NodeKind.SWITCH] == 1 and tables.node_kind[0] == NodeKind.SWITCH
    assert kinds[NodeKind.PCIE_EP] == 2 and kinds[NodeKind.IO_CPU] == 2 and kinds[NodeKind.IO_NOC] == 2
    assert kinds[NodeKind.IO_UCIE] == 2 * 2 and kinds[NodeKind.IO_CONN] == 2 * 2 * 4
    assert kinds[NodeKind.M_CPU] == 32
    assert kinds[NodeKind.ROUTER] == 32 * 32
    assert kinds[NodeKind.PE_DMA] == 256 and kinds[NodeKind.HBM_CTRL] == 256
    assert kinds[NodeKind.UCIE] == 32 * 4 and kinds[NodeKind.UCIE_CONN] == 32 * 16
    assert tables.n_nodes == 1 + 2 * (lay.io_nodes + 16 * lay.nodes_per_cube)
    assert spec.n_sips * spec.n_cubes_per_sip == 32


def test_edge_counts_by_kind_default(tables):
    got = edge_counts(tables)
    assert got == expected_edges(2, 4, 4)
    assert got["router_mesh"] == 96 * 32
    assert got["ucie_mesh"] == 96          # 48 directed seam edges per SIP
    # pe<->router 2*8, command 18, mesh 96, hbm 2*8, sram 2, ucie conn 2*16, ucie_internal 32, intra-PE 144
    assert tables.layout.edges_per_cube == 16 + 18 + 96 + 16 + 2 + 32 + 32 + 144 == 356
    assert tables.n_edges == sum(got.values())


def test_edge_counts_per_sip(tables):
    """One SIP's block of the edge table holds exactly one SIP's share."""
    lay = tables.layout
    sip_kinds = tables.edge_kind[lay.edges_per_sip:2 * lay.edges_per_sip]
    got = np.bincount(sip_kinds, minlength=len(EdgeKind))
    exp = expected_edges(1, 4, 4)
    exp["pcie"] = 0                        # switch edges live after the SIP blocks
    assert {k.name.lower(): int(got[k]) for k in EdgeKind} == exp
    assert exp["ucie_mesh"] == 48
    np.testing.assert_array_equal(tables.sip_edge_kind, tables.edge_kind[:lay.edges_per_sip])


@pytest.mark.parametrize("fixture,n_sips,cw,ch", [("torus6_tables", 6, 4, 4), ("small_tables", 3, 2, 3)])
def test_edge_counts_other_systems(request, fixture, n_sips, cw, ch):
    t = request.getfixturevalue(fixture)
    assert edge_counts(t) == expected_edges(n_sips, cw, ch)
    kinds = np.bincount(t.node_kind, minlength=len(NodeKind))
    assert kinds[NodeKind.PE_DMA] == 8 * n_sips * cw * ch
    assert kinds[NodeKind.ROUTER] == 32 * n_sips * cw * ch
    assert kinds[NodeKind.PCIE_EP] == n_sips


# ------------------------------------------------------------ edge attributes


def test_mesh_edges_carry_router_spacing(tables):
    plan = tables.plan
    c = "sip0.cube3"
    e = edge_between(tables, f"{c}.r0c0", f"{c}.r0c1")
    assert len(e) == 1 and tables.edge_mm[e[0]] == pytest.approx(plan.col_x[1] - plan.col_x[0])
    e = edge_between(tables, f"{c}.r0c4", f"{c}.r1c4")
    assert len(e) == 1 and tables.edge_mm[e[0]] == pytest.approx(2.5)
    assert tables.edge_kind[e[0]] == EdgeKind.ROUTER_MESH
    # No diagonal or hole-crossing links.
    assert len(edge_between(tables, f"{c}.r1c1", f"{c}.r2c0")) == 0
    assert len(edge_between(tables, f"{c}.r2c1", f"{c}.r2c4")) == 0
    # PE2 sits at (10.5, 1.5), its router r1c4 at (10.5, 4.0): 2.5 mm attach edge.
    e = edge_between(tables, f"{c}.pe2.pe_dma", f"{c}.r1c4")
    assert tables.edge_mm[e[0]] == pytest.approx(2.5)
    e = edge_between(tables, f"{c}.pe0.pe_dma", f"{c}.r0c0")
    assert tables.edge_mm[e[0]] == pytest.approx(0.0)


def test_edge_bandwidths_follow_spec(tables, spec):
    lk = spec.link
    by_kind = {
        EdgeKind.PE_TO_ROUTER: lk.pe_to_router.bw_gbs, EdgeKind.ROUTER_MESH: lk.router_mesh.bw_gbs,
        EdgeKind.ROUTER_TO_HBM: lk.router_hbm.bw_gbs * spec.hbm.efficiency,
        EdgeKind.ROUTER_TO_SRAM: lk.router_sram.bw_gbs, EdgeKind.ROUTER_TO_UCIE_CONN: lk.ucie_conn.bw_gbs,
        EdgeKind.UCIE_MESH: lk.ucie_mesh.bw_gbs, EdgeKind.IO_TO_CUBE: lk.io_to_cube.bw_gbs,
        EdgeKind.PCIE: lk.pcie.bw_gbs, EdgeKind.COMMAND: np.inf, EdgeKind.PE_INTERNAL: np.inf,
    }
    for kind, bw in by_kind.items():
        np.testing.assert_array_equal(np.unique(tables.edge_bw_gbs[tables.edge_kind == kind]), [bw])
    assert lk.router_sram.bw_gbs == 128 and lk.ucie_mesh.bw_gbs == 512
    seam = tables.edge_kind == EdgeKind.UCIE_MESH
    np.testing.assert_array_equal(np.unique(tables.edge_mm[seam]), [1.0])
    e = edge_between(tables, "sip0.io0.io_ucie-P0", "sip0.cube0.ucie-N")
    assert tables.edge_kind[e[0]] == EdgeKind.IO_TO_CUBE and tables.edge_mm[e[0]] == pytest.approx(2.0)
    np.testing.assert_allclose(tables.edge_prop_ns, tables.edge_mm * spec.fabric.ns_per_mm)


def test_hbm_efficiency_scales_router_hbm_edges():
    t = build_tables(load_system(overrides={"hbm.efficiency": 0.5}))
    for kind in (EdgeKind.ROUTER_TO_HBM, EdgeKind.HBM_TO_ROUTER):
        np.testing.assert_array_equal(np.unique(t.edge_bw_gbs[t.edge_kind == kind]), [128.0])
    assert t.spec.pc_bw_gbs == pytest.approx(16.0)


def test_node_overheads_and_flit_awareness(tables, spec):
    def at(name: str) -> int:
        return node_id(tables, name)

    assert tables.node_overhead_ns[0] == spec.overhead_ns.switch == 5.0
    assert tables.node_overhead_ns[at("sip1.cube2.r0c0")] == 2.0
    assert tables.node_overhead_ns[at("sip1.cube2.ucie-E")] == 8.0
    assert tables.node_overhead_ns[at("sip0.io0.io_cpu")] == 10.0
    assert tables.node_overhead_ns[at("sip0.cube0.m_cpu")] == 5.0
    assert tables.node_flit_aware[at("sip0.cube0.r0c0")] and tables.node_flit_aware[0]
    assert tables.node_flit_aware[at("sip0.cube0.hbm_ctrl.pe3")]
    assert not tables.node_flit_aware[at("sip0.io0.pcie_ep")]   # store-and-forward boundary
    assert not tables.node_flit_aware[at("sip0.cube0.m_cpu")]


def test_cube_seams_and_io_ports(tables):
    """E<->W and S<->N seams between neighbours, no wrap; IO PHYs on cubes (0,0) and (1,0) north."""
    for s in (0, 1):
        p = f"sip{s}"
        for cube in range(16):
            x, y = cube % 4, cube // 4
            east = edge_between(tables, f"{p}.cube{cube}.ucie-E", f"{p}.cube{cube + 1}.ucie-W") if x < 3 else []
            south = edge_between(tables, f"{p}.cube{cube}.ucie-S", f"{p}.cube{cube + 4}.ucie-N") if y < 3 else []
            assert len(east) == (1 if x < 3 else 0)
            assert len(south) == (1 if y < 3 else 0)
        # No wrap-around: cube 3's east port and cube 12's south port have no seam.
        for name in (f"{p}.cube3.ucie-E", f"{p}.cube12.ucie-S", f"{p}.cube0.ucie-W"):
            nid = node_id(tables, name)
            out = tables.edge_kind[tables.edge_src == nid]
            assert EdgeKind.UCIE_MESH not in out
        assert len(edge_between(tables, f"{p}.io0.io_ucie-P0", f"{p}.cube0.ucie-N")) == 1
        assert len(edge_between(tables, f"{p}.io0.io_ucie-P1", f"{p}.cube1.ucie-N")) == 1
        assert len(edge_between(tables, f"{p}.cube1.ucie-N", f"{p}.io0.io_ucie-P1")) == 1
        assert len(edge_between(tables, f"{p}.io0.pcie_ep", "fabric.switch0")) == 1
        assert len(edge_between(tables, "fabric.switch0", f"{p}.io0.pcie_ep")) == 1


def test_switch_edges_follow_the_id_layout(tables):
    lay = tables.layout
    base = lay.n_sips * lay.edges_per_sip
    for s in range(lay.n_sips):
        ep = io_node(tables, s, "pcie_ep")
        assert (tables.edge_src[base + 2 * s], tables.edge_dst[base + 2 * s]) == (ep, 0)
        assert (tables.edge_src[base + 2 * s + 1], tables.edge_dst[base + 2 * s + 1]) == (0, ep)
    assert tables.n_edges == base + 2 * lay.n_sips


def test_every_edge_except_intra_pe_has_a_reverse(tables):
    pairs = set(zip(tables.edge_src.tolist(), tables.edge_dst.tolist()))
    assert len(pairs) == tables.n_edges                    # no parallel duplicates
    non_pe = tables.edge_kind != EdgeKind.PE_INTERNAL
    missing = [(a, b) for a, b in zip(tables.edge_src[non_pe].tolist(), tables.edge_dst[non_pe].tolist())
               if (b, a) not in pairs]
    assert missing == []


def test_tables_are_deterministic(tables, spec):
    again = build_tables(load_system())
    for attr in ("node_kind", "node_overhead_ns", "edge_src", "edge_dst", "edge_kind", "edge_bw_gbs", "edge_mm"):
        np.testing.assert_array_equal(getattr(again, attr), getattr(tables, attr))
    assert again.cube_names == tables.cube_names and again.io_names == tables.io_names
    assert again.spec == spec


def test_table_dtypes(tables):
    assert tables.node_kind.dtype == np.int8 and tables.edge_kind.dtype == np.int8
    assert tables.edge_src.dtype == np.int32 and tables.edge_dst.dtype == np.int32
    assert tables.edge_bw_gbs.dtype == np.float64 and tables.edge_mm.dtype == np.float64
    assert tables.nbytes() > 0
    assert int(tables.edge_src.max()) < tables.n_nodes and int(tables.edge_dst.min()) >= 0


# -------------------------------------------------------------------- names


def test_node_names_round_trip_all_nodes(tables):
    for n in range(tables.n_nodes):
        assert node_id(tables, node_name(tables, n)) == n


def test_node_name_patterns(tables):
    assert node_name(tables, 0) == "fabric.switch0"
    assert node_id(tables, "fabric.switch0") == 0
    pcie = node_id(tables, "sip1.io0.pcie_ep")
    assert tables.node_kind[pcie] == NodeKind.PCIE_EP and locate(tables, pcie) == (1, -1, 0)
    r = node_id(tables, "sip1.cube3.r1c4")
    assert tables.node_kind[r] == NodeKind.ROUTER
    assert locate(tables, r)[:2] == (1, 3)
    assert tables.node_kind[node_id(tables, "sip0.cube0.hbm_ctrl.pe7")] == NodeKind.HBM_CTRL
    assert tables.node_kind[node_id(tables, "sip0.io0.io_ucie-P1.conn3")] == NodeKind.IO_CONN
    for block, kind in zip(PE_BLOCKS, PE_BLOCK_KINDS):
        nid = pe_block(tables, 1, 15, 7, block)
        assert node_name(tables, nid) == f"sip1.cube15.pe7.{block}"
        assert tables.node_kind[nid] == kind
    assert node_name(tables, hbm_ctrl(tables, 0, 4, 2)) == "sip0.cube4.hbm_ctrl.pe2"
    assert node_name(tables, io_node(tables, 1, "io_cpu")) == "sip1.io0.io_cpu"
    # cube_id = row * w + col: cube 5 is (x=1, y=1).
    e = edge_between(tables, "sip0.cube4.ucie-E", "sip0.cube5.ucie-W")
    assert len(e) == 1


@pytest.mark.parametrize("name,fragment", [
    ("sip2.cube0.r0c0", "SIP 2 does not exist"),
    ("sip0.cube16.r0c0", "cube 16 does not exist"),
    ("sip0.cube0.r2c2", "did you mean"),
    ("sip0.cube0.hbm_ctrl.pe9", "hbm_ctrl.pe"),
    ("sip0.io0.pcie", "pcie_ep"),
    ("r0c0", "names look like"),                  # a short name starts at its cube: cube0.r0c0
])
def test_unknown_node_names(tables, name, fragment):
    with pytest.raises(UnknownNodeError) as err:
        node_id(tables, name)
    assert fragment in str(err.value)


def test_node_name_out_of_range(tables):
    with pytest.raises(UnknownNodeError):
        node_name(tables, tables.n_nodes)
    with pytest.raises(UnknownNodeError):
        node_name(tables, -1)


def test_a_short_name_is_on_sip0(tables) -> None:
    """node_id reads a name without its SIP (from its cube or IO chiplet on) as SIP 0's; names are always
    printed whole."""
    from kbfast.topology.names import full_name, node_id, node_name

    for short in ("cube3.r0c4", "cube1.pe0.pe_dma", "cube15.hbm_ctrl.pe7", "io0.pcie_ep", "io0.io_ucie-P0.conn2"):
        assert full_name(tables, short) == f"sip0.{short}"
        assert node_id(tables, short) == node_id(tables, f"sip0.{short}")
        assert node_name(tables, node_id(tables, short)) == f"sip0.{short}"
    for name in ("sip1.cube3.r0c4", "fabric.switch0", "pe0", "r0c0"):
        assert full_name(tables, name) == name
