"""Compile a system description into flat node and edge tables.

One cube's interior is built once as a template (spec_fabric §1.4, §3.1) and
placed by id offset; one SIP (IO chiplet + cube mesh + UCIe seams) is then
placed the same way, and the switch star joins the SIPs (spec_fabric §1.1, §3.3).
Memory and build time therefore scale with the number of cubes.

Id layout (every consumer relies on it, routing in particular):

* node 0 is ``fabric.switch0``; SIP ``s`` owns nodes ``1 + s*nodes_per_sip + local``;
  inside a SIP the IO chiplet comes first, then cube ``c`` at ``io + c*nodes_per_cube``;
* SIP ``s`` owns edges ``s*edges_per_sip + local``; the switch edges come last,
  ``pcie_ep -> switch`` at ``n_sips*edges_per_sip + 2s`` and the reverse at ``+1``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from kbfast.config import budget
from kbfast.config.schema import SystemSpec
from kbfast.topology.floorplan import PORTS, FloorPlan, build_floorplan
from kbfast.topology.kinds import FLIT_AWARE, OVERHEAD_KEY, PE_BLOCK_KINDS, PE_BLOCKS, EdgeKind, NodeKind

INF = np.inf


@dataclass
class _Template:
    """Nodes and edges of a block, with block-local ids."""

    names: list[str] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    ekind: list[int] = field(default_factory=list)
    bw: list[float] = field(default_factory=list)
    mm: list[float] = field(default_factory=list)

    def node(self, name: str, kind: NodeKind) -> int:
        self.names.append(name)
        self.kinds.append(int(kind))
        return len(self.names) - 1

    def edge(self, a: int, b: int, kind: EdgeKind, bw: float, mm: float) -> None:
        self.src.append(a)
        self.dst.append(b)
        self.ekind.append(int(kind))
        self.bw.append(bw)
        self.mm.append(mm)

    def link(self, a: int, b: int, fwd: EdgeKind, back: EdgeKind, bw: float, mm: float) -> None:
        self.edge(a, b, fwd, bw, mm)
        self.edge(b, a, back, bw, mm)


def _cube_template(spec: SystemSpec, plan: FloorPlan) -> _Template:
    t = _Template()
    lk = spec.link
    router = [t.node(f"r{r}c{c}", NodeKind.ROUTER) for r, c in plan.routers]
    ucie = {p: t.node(f"ucie-{p}", NodeKind.UCIE) for p in PORTS}
    conn = {p: [t.node(f"ucie-{p}.conn{i}", NodeKind.UCIE_CONN) for i in range(len(plan.conn_router[p]))]
            for p in PORTS}
    m_cpu = t.node("m_cpu", NodeKind.M_CPU)
    sram = t.node("sram", NodeKind.SRAM)
    n_pe = len(plan.pe_router)
    hbm = [t.node(f"hbm_ctrl.pe{x}", NodeKind.HBM_CTRL) for x in range(n_pe)]
    pe = [{b: t.node(f"pe{x}.{b}", k) for b, k in zip(PE_BLOCKS, PE_BLOCK_KINDS)} for x in range(n_pe)]

    # Mesh links, vertical before horizontal: equal-length routes then arrive
    # vertically last, i.e. X first (ADR-0017 D7; routing tie rule).
    pos = {rc: i for i, rc in enumerate(plan.routers)}
    for horizontal in (False, True):
        for (r, c), i in pos.items():
            nb = (r, c + 1) if horizontal else (r + 1, c)
            if nb in pos:
                gap = plan.col_x[c + 1] - plan.col_x[c] if horizontal else plan.row_y[r + 1] - plan.row_y[r]
                t.link(router[i], router[pos[nb]], EdgeKind.ROUTER_MESH, EdgeKind.ROUTER_MESH,
                       lk.router_mesh.bw_gbs, gap)
    hbm_bw = lk.router_hbm.bw_gbs * spec.hbm.efficiency
    for x in range(n_pe):
        r = plan.pe_router[x]
        rx, ry = plan.router_xy(r)
        px, py = plan.pe_xy[x]
        t.link(router[r], hbm[x], EdgeKind.ROUTER_TO_HBM, EdgeKind.HBM_TO_ROUTER, hbm_bw, 0.0)
        t.link(pe[x]["pe_dma"], router[r], EdgeKind.PE_TO_ROUTER, EdgeKind.ROUTER_TO_PE,
               lk.pe_to_router.bw_gbs, abs(rx - px) + abs(ry - py))
        t.link(router[r], pe[x]["pe_cpu"], EdgeKind.COMMAND, EdgeKind.COMMAND, INF, 0.0)
    t.link(router[plan.m_cpu_router], m_cpu, EdgeKind.COMMAND, EdgeKind.COMMAND, INF, 0.0)
    t.link(router[plan.sram_router], sram, EdgeKind.ROUTER_TO_SRAM, EdgeKind.SRAM_TO_ROUTER,
           lk.router_sram.bw_gbs, 0.0)
    for p in PORTS:
        for i, r in enumerate(plan.conn_router[p]):
            t.link(router[r], conn[p][i], EdgeKind.ROUTER_TO_UCIE_CONN, EdgeKind.UCIE_CONN_TO_ROUTER,
                   lk.ucie_conn.bw_gbs, 0.0)
            t.link(conn[p][i], ucie[p], EdgeKind.UCIE_INTERNAL, EdgeKind.UCIE_INTERNAL, lk.ucie_internal.bw_gbs, 0.0)
    # Intra-PE topology (spec_pe §4.8): 0 mm, no bandwidth model.
    chain = [("pe_cpu", "pe_scheduler"), ("pe_scheduler", "pe_dma"), ("pe_scheduler", "pe_fetch_store"),
             ("pe_scheduler", "pe_gemm"), ("pe_scheduler", "pe_math"), ("pe_dma", "pe_fetch_store"),
             ("pe_fetch_store", "pe_gemm"), ("pe_fetch_store", "pe_math"), ("pe_fetch_store", "pe_dma"),
             ("pe_gemm", "pe_fetch_store"), ("pe_gemm", "pe_math"), ("pe_math", "pe_fetch_store"),
             ("pe_fetch_store", "pe_tcm"), ("pe_tcm", "pe_fetch_store"), ("pe_dma", "pe_mmu"),
             ("pe_mmu", "pe_dma"), ("pe_ipcq", "pe_dma"), ("pe_dma", "pe_ipcq")]
    for x in range(n_pe):
        for a, b in chain:
            t.edge(pe[x][a], pe[x][b], EdgeKind.PE_INTERNAL, INF, 0.0)
    return t


def _io_template(spec: SystemSpec) -> _Template:
    t = _Template()
    chip = spec.sip.io_chiplets[0]
    lk = spec.link
    pcie_ep = t.node(f"{chip.id}.pcie_ep", NodeKind.PCIE_EP)
    io_cpu = t.node(f"{chip.id}.io_cpu", NodeKind.IO_CPU)
    io_noc = t.node(f"{chip.id}.io_noc", NodeKind.IO_NOC)
    t.link(pcie_ep, io_noc, EdgeKind.IO_INTERNAL, EdgeKind.IO_INTERNAL, lk.pcie_ep_noc.bw_gbs, 0.0)
    t.link(io_noc, io_cpu, EdgeKind.IO_INTERNAL, EdgeKind.IO_INTERNAL, lk.io_noc_cpu.bw_gbs, 0.0)
    for port in chip.cube_ports:
        phy = t.node(f"{chip.id}.io_ucie-{port.phy}", NodeKind.IO_UCIE)
        for i in range(chip.n_connections):
            c = t.node(f"{chip.id}.io_ucie-{port.phy}.conn{i}", NodeKind.IO_CONN)
            t.link(io_noc, c, EdgeKind.IO_INTERNAL, EdgeKind.IO_INTERNAL, lk.io_conn.bw_gbs, 0.0)
            t.link(c, phy, EdgeKind.UCIE_INTERNAL, EdgeKind.UCIE_INTERNAL, lk.ucie_internal.bw_gbs, 0.0)
    return t


@dataclass(frozen=True)
class Layout:
    """Block sizes of the id layout (see module docstring)."""

    n_sips: int
    cube_w: int
    cube_h: int
    nodes_per_cube: int
    io_nodes: int
    nodes_per_sip: int
    edges_per_cube: int
    io_edges: int
    edges_per_sip: int

    @property
    def n_cubes_per_sip(self) -> int:
        """Cubes per SIP."""
        return self.cube_w * self.cube_h

    def sip_node_base(self, sip: int) -> int:
        """Global id of SIP ``sip``'s first node (its IO chiplet's; node 0 is the switch)."""
        return 1 + sip * self.nodes_per_sip

    def cube_node_base(self, sip: int, cube: int) -> int:
        """Global id of the first node of cube ``cube`` of SIP ``sip``."""
        return 1 + sip * self.nodes_per_sip + self.io_nodes + cube * self.nodes_per_cube


@dataclass(frozen=True, eq=False)
class Tables:
    """The compiled system graph as struct-of-arrays numpy tables."""

    spec: SystemSpec
    plan: FloorPlan
    layout: Layout
    node_kind: np.ndarray        # int8 [N]
    node_overhead_ns: np.ndarray  # float64 [N]
    node_flit_aware: np.ndarray   # bool [N]
    edge_src: np.ndarray          # int32 [E]
    edge_dst: np.ndarray          # int32 [E]
    edge_kind: np.ndarray         # int8 [E]
    edge_bw_gbs: np.ndarray       # float64 [E]; inf = no serialization
    edge_mm: np.ndarray           # float64 [E]
    cube_names: tuple[str, ...]   # cube-local node names
    io_names: tuple[str, ...]     # IO-chiplet-local node names
    sip_edge_src: np.ndarray      # int32 [edges_per_sip], SIP-local ids (routing template)
    sip_edge_dst: np.ndarray
    sip_edge_kind: np.ndarray
    sip_edge_mm: np.ndarray
    sip_edge_rev: np.ndarray      # int32 [edges_per_sip]: SIP-local id of the reverse edge

    @property
    def n_nodes(self) -> int:
        """Number of nodes of the whole system."""
        return len(self.node_kind)

    @property
    def n_edges(self) -> int:
        """Number of (directed) edges of the whole system."""
        return len(self.edge_src)

    @functools.cached_property
    def system_key(self) -> str:
        """A key naming the system: its spec's repr, made once (it takes 0.1-0.5 ms; memo keys read it often)."""
        return repr(self.spec)

    @functools.cached_property
    def system_key_without_links(self) -> str:
        """:attr:`system_key` with the link bandwidths left out: for what only overheads and propagation set."""
        return repr(self.spec.model_copy(update={"link": None}))

    @functools.cached_property
    def edge_prop_ns(self) -> np.ndarray:
        """Propagation per edge: ``distance_mm * ns_per_mm`` (spec_fabric §5.2)."""
        return self.edge_mm * self.spec.fabric.ns_per_mm

    def nbytes(self) -> int:
        """Bytes held by the global node and edge arrays."""
        return sum(a.nbytes for a in (self.node_kind, self.node_overhead_ns, self.node_flit_aware, self.edge_src,
                                      self.edge_dst, self.edge_kind, self.edge_bw_gbs, self.edge_mm))


def _tile(local: np.ndarray, count: int, stride: int, base: int = 0) -> np.ndarray:
    """Repeat a block-local id array ``count`` times, offset by ``stride`` each time."""
    offsets = base + stride * np.arange(count, dtype=np.int64)
    return (local[None, :].astype(np.int64) + offsets[:, None]).ravel()


def _sip_edges(spec: SystemSpec, cube_local: dict[str, int], io_local: dict[str, int], nio: int,
               npc: int) -> _Template:
    """The SIP-level edges, in SIP-local ids (the IO chiplet's ``nio`` nodes, then the cubes' ``npc`` each): IO
    PHYs to the cubes' shoreline ports, then the UCIe seams between neighbouring cubes (vertical first)."""
    cw, ch = spec.sip.cube_mesh.w, spec.sip.cube_mesh.h
    cube_base = lambda c: nio + c * npc  # noqa: E731  (SIP-local)
    s = _Template()
    chip = spec.sip.io_chiplets[0]
    for port in chip.cube_ports:
        phy = io_local[f"{chip.id}.io_ucie-{port.phy}"]
        c = port.cube[1] * cw + port.cube[0]
        s.link(phy, cube_base(c) + cube_local[f"ucie-{port.side}"], EdgeKind.IO_TO_CUBE, EdgeKind.CUBE_TO_IO,
               spec.link.io_to_cube.bw_gbs, port.distance_mm)
    seam = spec.link.ucie_mesh
    for vertical in (True, False):
        for y in range(ch):
            for x in range(cw):
                nx, ny = (x, y + 1) if vertical else (x + 1, y)
                if nx < cw and ny < ch:
                    a, b = ("S", "N") if vertical else ("E", "W")
                    s.link(cube_base(y * cw + x) + cube_local[f"ucie-{a}"],
                           cube_base(ny * cw + nx) + cube_local[f"ucie-{b}"],
                           EdgeKind.UCIE_MESH, EdgeKind.UCIE_MESH, seam.bw_gbs, seam.distance_mm)
    return s


def build_tables(spec: SystemSpec) -> Tables:
    """Compile ``spec`` into flat tables (spec_fabric §1.4–§3).

    >>> from kbfast import load_system
    >>> t = build_tables(load_system("ahbm_2sip"))
    >>> t.n_nodes > 0 and len(t.edge_src) == t.n_edges
    True
    """
    plan = build_floorplan(spec.cube)
    cube, io = _cube_template(spec, plan), _io_template(spec)
    cw, ch = spec.sip.cube_mesh.w, spec.sip.cube_mesh.h
    n_cubes = cw * ch
    npc, nio = len(cube.names), len(io.names)
    cube_local = {n: i for i, n in enumerate(cube.names)}
    io_local = {n: i for i, n in enumerate(io.names)}
    _check_budget(spec, npc, nio, len(cube.src), len(io.src))

    s = _sip_edges(spec, cube_local, io_local, nio, npc)
    chip = spec.sip.io_chiplets[0]

    def arr(t: _Template, attr: str, dtype) -> np.ndarray:
        return np.asarray(getattr(t, attr), dtype=dtype)

    # One SIP, SIP-local ids.
    sip_src = np.concatenate([arr(io, "src", np.int64), _tile(arr(cube, "src", np.int64), n_cubes, npc, nio),
                              arr(s, "src", np.int64)])
    sip_dst = np.concatenate([arr(io, "dst", np.int64), _tile(arr(cube, "dst", np.int64), n_cubes, npc, nio),
                              arr(s, "dst", np.int64)])
    sip_kind = np.concatenate([arr(io, "ekind", np.int8), np.tile(arr(cube, "ekind", np.int8), n_cubes),
                               arr(s, "ekind", np.int8)])
    sip_bw = np.concatenate([arr(io, "bw", np.float64), np.tile(arr(cube, "bw", np.float64), n_cubes),
                             arr(s, "bw", np.float64)])
    sip_mm = np.concatenate([arr(io, "mm", np.float64), np.tile(arr(cube, "mm", np.float64), n_cubes),
                             arr(s, "mm", np.float64)])
    sip_node_kind = np.concatenate([arr(io, "kinds", np.int8), np.tile(arr(cube, "kinds", np.int8), n_cubes)])
    nps, eps = len(sip_node_kind), len(sip_src)

    n_sips = spec.sips.count
    layout = Layout(n_sips=n_sips, cube_w=cw, cube_h=ch, nodes_per_cube=npc, io_nodes=nio, nodes_per_sip=nps,
                    edges_per_cube=len(cube.src), io_edges=len(io.src), edges_per_sip=eps)

    node_kind = np.concatenate([np.array([NodeKind.SWITCH], np.int8), np.tile(sip_node_kind, n_sips)])
    overhead_by_kind = np.zeros(len(NodeKind), np.float64)
    for kind, key in OVERHEAD_KEY.items():
        overhead_by_kind[kind] = getattr(spec.overhead_ns, key)
    flit_by_kind = np.zeros(len(NodeKind), bool)
    flit_by_kind[[int(k) for k in FLIT_AWARE]] = True

    pcie_ep_local = io_local[f"{chip.id}.pcie_ep"]
    sip_bases = 1 + nps * np.arange(n_sips, dtype=np.int64)
    sw_src = np.empty(2 * n_sips, np.int64)
    sw_dst = np.empty(2 * n_sips, np.int64)
    sw_src[0::2], sw_dst[0::2] = sip_bases + pcie_ep_local, 0
    sw_src[1::2], sw_dst[1::2] = 0, sip_bases + pcie_ep_local
    edge_src = np.concatenate([_tile(sip_src, n_sips, nps, 1), sw_src]).astype(np.int32)
    edge_dst = np.concatenate([_tile(sip_dst, n_sips, nps, 1), sw_dst]).astype(np.int32)
    edge_kind = np.concatenate([np.tile(sip_kind, n_sips), np.full(2 * n_sips, EdgeKind.PCIE, np.int8)])
    edge_bw = np.concatenate([np.tile(sip_bw, n_sips), np.full(2 * n_sips, spec.link.pcie.bw_gbs)])
    edge_mm = np.concatenate([np.tile(sip_mm, n_sips), np.full(2 * n_sips, spec.link.pcie.distance_mm)])

    return Tables(spec=spec, plan=plan, layout=layout, node_kind=node_kind,
                  node_overhead_ns=overhead_by_kind[node_kind], node_flit_aware=flit_by_kind[node_kind],
                  edge_src=edge_src, edge_dst=edge_dst, edge_kind=edge_kind, edge_bw_gbs=edge_bw, edge_mm=edge_mm,
                  cube_names=tuple(cube.names), io_names=tuple(io.names),
                  sip_edge_src=sip_src.astype(np.int32), sip_edge_dst=sip_dst.astype(np.int32),
                  sip_edge_kind=sip_kind, sip_edge_mm=sip_mm, sip_edge_rev=_reverse_ids(sip_src, sip_dst, nps))


def _check_budget(spec: SystemSpec, npc: int, nio: int, epc: int, eio: int) -> None:
    """Refuse tables that would not fit in memory (kbfast.config.budget), from the template sizes and the counts."""
    n_sips, n_cubes = spec.sips.count, spec.sip.cube_mesh.w * spec.sip.cube_mesh.h
    seams = 4 * n_cubes + 2 * len(spec.sip.io_chiplets[0].cube_ports)
    n_nodes, n_edges = 1 + n_sips * (nio + n_cubes * npc), n_sips * (eio + n_cubes * epc + seams + 2)
    budget.check(f"the topology tables of {n_sips:,} SIPs x {n_cubes:,} cubes ({n_nodes:,} nodes, {n_edges:,} edges)",
                 budget.topology_bytes(n_nodes, n_edges),
                 "use fewer SIPs (sips.count) or a smaller cube mesh (sip.cube_mesh.w, sip.cube_mesh.h)")


def _reverse_ids(src: np.ndarray, dst: np.ndarray, n_nodes: int) -> np.ndarray:
    """For every edge, the id of the edge dst -> src (all builder links are bidirectional)."""
    key = src * n_nodes + dst
    order = np.argsort(key, kind="stable")
    want = dst * n_nodes + src
    found = order[np.minimum(np.searchsorted(key[order], want), len(order) - 1)]
    rev = np.where(key[found] == want, found, -1)
    return rev.astype(np.int32)


def reverse_route_edges(t: Tables, ptr: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """For each route (CSR ``ptr``/``edges``), the edges of the reversed path (responses retrace the route,
    spec_fabric §4.2): an edge inside a SIP reverses to its SIP-local reverse in the same SIP, a switch
    link to its partner ``e ^ 1``.  Raises if a route uses a one-way edge."""
    lay = t.layout
    out, one_way = _reverse_routes(np.asarray(ptr, np.int64), np.asarray(edges, np.int64), t.sip_edge_rev,
                                   lay.edges_per_sip, lay.n_sips)
    if one_way:
        raise ValueError("a route uses a one-way edge and cannot be retraced")
    return out


@njit(cache=True)
def _reverse_routes(ptr, edges, sip_edge_rev, eps, n_sips):  # pragma: no cover - jitted
    out = np.empty(len(edges), np.int32)
    one_way = False
    n_in_sips = n_sips * eps
    for i in range(len(ptr) - 1):
        lo, hi = ptr[i], ptr[i + 1]
        for k in range(lo, hi):
            e = edges[k]
            if e < n_in_sips:
                r = sip_edge_rev[e % eps]
                one_way |= r < 0
                out[lo + hi - 1 - k] = (e // eps) * eps + r
            else:
                out[lo + hi - 1 - k] = n_in_sips + ((e - n_in_sips) ^ 1)
    return out, one_way
