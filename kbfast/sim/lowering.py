"""Lowering: a Program's arrays packed and renumbered for the kernels of both evaluators.

The kernels of both evaluators take the same named inputs, built here once per Program by :func:`lower`
(docs/README.md, "Kernel contracts"):

* :class:`Fabric`: the compact nodes and edges the Program touches, and its routes over them;
* :class:`Hbm`: the HBM and flit constants, derived from the spec in :func:`hbm_constants` only;
* :class:`~kbfast.sim.agents.Prog`: agents, ops and IPCQ channels (:func:`make_prog`);
* :class:`OpRoutes`: per op its HBM address and forward / reverse route, per channel its route.

Routes are resolved here and nowhere below: :func:`transfer_routes` (and :func:`tile_routes` for a GEMM's
tile transfers) packs the routes of isolated transfers for ``kbfast.fast.isolated``, and
:func:`channel_hop_bws` the PE <-> slot bank bandwidths that ``kbfast.fast.rescale`` swaps per buffer kind.

:func:`compact` keeps the nodes and edges a Program touches, renumbered 0..n-1; :func:`heap_capacity` and
:func:`estimate_memory_bytes` size the event queue and the replay.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.config.schema import SystemSpec
from kbfast.ir import BUFFER_KINDS, AgentKind, Op, Program, ProgramBuilder
from kbfast.sim.agents import Prog
from kbfast.topology.builder import Tables, reverse_route_edges
from kbfast.topology.kinds import NodeKind
from kbfast.topology.routing import Router

Fabric = namedtuple("Fabric", [
    "n_ovh",     # float64 [N]  per compact node: overhead, ns (spec_fabric §2)
    "n_flit",    # bool [N]     per compact node: flit-aware (wormhole) or store-and-forward
    "n_hbm",     # int32 [N]    per compact node: HBM controller index, or -1
    "e_src",     # int32 [E]    per compact edge: source node
    "e_dst",     # int32 [E]    per compact edge: destination node
    "e_bw",      # float64 [E]  per compact edge: bandwidth, GB/s (= B/ns; inf for none)
    "e_c",       # float64 [E]  per compact edge: ns per byte, 1 / e_bw (0 for an infinite bandwidth)
    "e_prop",    # float64 [E]  per compact edge: wire propagation, ns
    "r_ptr",     # int64 [R+1]  routes, CSR: route r is r_edges[r_ptr[r]:r_ptr[r + 1]]
    "r_edges",   # int32 [*]    routes, CSR: compact edge ids in path order
])

Hbm = namedtuple("Hbm", [
    "n_pcs",              # pseudo-channels per controller (spec_memory §3)
    "pc_shift",           # log2(burst bytes): address >> pc_shift picks the burst, then % n_pcs the PC
    "burst_bytes",        # HBM burst, B
    "flit_bytes",         # fabric flit, B
    "commit_ns",          # one flit's commit on a PC: flit_bytes / PC bandwidth
    "burst_commit_ns",    # one burst's commit on a PC: burst_bytes / PC bandwidth
    "switch_penalty_ns",  # a PC's read <-> write turnaround
    "read_accept",        # a PE read's response leaves once the controller took its last flit (hbm.read_response)
])

OpRoutes = namedtuple("OpRoutes", [
    "op_addr",     # int64 [O]  per op: HBM address (DMA), else 0
    "op_route",    # int64 [O]  per op: forward route id, or -1
    "op_rroute",   # int64 [O]  per op: reverse (response) route id, or -1
    "ch_route",    # int64 [C]  per IPCQ channel: the data route
])


@dataclass(frozen=True)
class Compact:
    """The nodes and edges a Program touches, renumbered 0..n-1 for the kernel."""

    nodes: np.ndarray        # global node ids, ascending
    edges: np.ndarray        # global edge ids, ascending
    route_edges: np.ndarray  # local edge ids
    e_src: np.ndarray        # per local edge: local source node (int32)
    e_dst: np.ndarray        # per local edge: local destination node (int32)
    hbm_ctrls: np.ndarray    # global node ids of the HBM controllers, by local controller index
    node_hbm: np.ndarray     # local node -> controller index or -1


def renumber(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``ids`` (all in [0, n)) ascending, and the map global -> local (int32), by
    marking instead of sorting (np.unique's sort took 0.15 s at 1024 SIPs)."""
    used = np.zeros(n, np.bool_)
    used[ids] = True
    distinct = np.flatnonzero(used)
    local = np.full(n, -1, np.int32)
    local[distinct] = np.arange(len(distinct), dtype=np.int32)
    return distinct, local


def compact(p: Program) -> Compact:
    """The nodes and edges ``p`` touches (its routes' edges, their ends, its agents' nodes), renumbered
    0..n-1, with the HBM controllers among them numbered 0..h-1."""
    t = p.tables
    edges, edge_local = renumber(p.route_edges, len(t.edge_src))
    ends = (t.edge_src[edges], t.edge_dst[edges], p.agent_node)
    nodes, node_local = renumber(np.concatenate(ends), len(t.node_kind))
    nodes = nodes.astype(np.result_type(t.edge_src.dtype, p.agent_node.dtype))
    is_hbm = t.node_kind[nodes] == NodeKind.HBM_CTRL
    node_hbm = np.full(len(nodes), -1, np.int32)
    node_hbm[is_hbm] = np.arange(int(is_hbm.sum()), dtype=np.int32)
    return Compact(nodes=nodes, edges=edges, route_edges=edge_local[p.route_edges], e_src=node_local[ends[0]],
                   e_dst=node_local[ends[1]], hbm_ctrls=nodes[is_hbm], node_hbm=node_hbm)


def vc_edges(p: Program, edges: np.ndarray) -> np.ndarray:
    """Which of ``edges`` are PE egress links, where PE_DMA's two virtual channels meet (spec_ccl §2.8)."""
    t = p.tables
    return t.node_kind[t.edge_src[edges]] == NodeKind.PE_DMA


def fabric_flits(p: Program) -> int:
    """Flits of every transfer that crosses the fabric (DMA reads and writes, IPCQ sends): a GEMM's ``nbytes``
    counts MACs, a FETCH's or STORE's TCM bytes, and those never become flits."""
    moves = np.isin(p.op_code, (Op.DMA_READ, Op.DMA_WRITE, Op.SEND))
    flit = p.tables.spec.fabric.flit_bytes
    return int(np.sum((p.op_nbytes[moves] + flit - 1) // flit))


def heap_capacity(p: Program) -> int:
    """Bound on pending events: one per flit of every transfer (:func:`fabric_flits`), plus agent and control
    events."""
    return fabric_flits(p) + 4 * (p.n_ops + p.n_agents) + 64


def estimate_memory_bytes(p: Program) -> int:
    """Upper estimate of the replay's resident memory: per-op state plus one pending event per flit in flight
    (:func:`fabric_flits`)."""
    # 80 B per queue slot (kbfast.sim.heap: 8 arrays of 8 B, two free lists)
    return 200 * p.n_ops + 64 * len(p.route_edges) + 80 * (fabric_flits(p) + p.n_ops + p.n_agents)


def replay_events_estimate(p: Program) -> int:
    """Roughly the events an exact replay of ``p`` takes: one per flit per edge of every payload route.

    A DMA's flits cross its payload route (forward; the reverse one for a host read), its zero-byte
    completion the other route once; a SEND's flits cross its channel's route and its credit comes back
    over about as many edges; every op adds a few agent events.  Measured on the probe catalogue and the
    all-reduces, the replay takes 50-100 % of this; the estimate only decides whether to try.
    """
    flit = p.tables.spec.fabric.flit_bytes
    flits = np.maximum((p.op_nbytes + flit - 1) // flit, 1)
    length = np.diff(p.route_ptr)
    total = 4 * p.n_ops
    dma = np.flatnonzero(p.op_route >= 0)
    if len(dma):
        total += int((flits[dma] * (length[p.op_route[dma]] + 1)).sum())
        back = p.op_rroute[dma]
        total += int(length[back[back >= 0]].sum())
    sends = np.flatnonzero(p.op_code == Op.SEND)
    if len(sends):
        hops = length[p.channels.route[p.op_target[sends]]] + 1
        total += int(((flits[sends] + 1) * hops).sum())
    return total


def replay_events_floor(p: Program) -> int:
    """The events every exact replay of ``p`` takes at least: kbfast.exact.engine's one per flit at the end of
    each edge of the route that carries a payload (:func:`data_routes`).  A budget below it cannot be met."""
    flits = -(-p.op_nbytes // p.tables.spec.fabric.flit_bytes)
    route = data_routes(p)
    moving = (route >= 0) & (flits > 0)
    return int((flits[moving] * np.diff(p.route_ptr)[route[moving]]).sum())


def data_routes(p: Program) -> np.ndarray:
    """Per op, the route that carries its payload (the reverse route for a host read; the channel's
    route for an IPCQ SEND), or -1."""
    dma = (p.op_code == Op.DMA_WRITE) | (p.op_code == Op.DMA_READ)
    host_read = dma & (p.agent_kind[p.op_agent] == AgentKind.HOST) & (p.op_code == Op.DMA_READ)
    out = np.where(host_read, p.op_rroute, np.where(dma, p.op_route, -1)).astype(np.int64)
    sends = p.op_code == Op.SEND
    out[sends] = p.channels.route[p.op_target[sends]]
    return out


def make_prog(p) -> Prog:
    """Pack a Program's arrays for the kernels (channels included)."""
    ch = p.channels
    # Messages of a channel, in the sender's program order (= send order).
    pos_in_program = np.empty(p.n_ops, np.int64)
    pos_in_program[p.agent_ops] = np.arange(p.n_ops)
    sends = np.flatnonzero(p.op_code == Op.SEND)
    sends = sends[np.lexsort((pos_in_program[sends], p.op_target[sends]))]
    counts = np.bincount(p.op_target[sends], minlength=len(ch)) if len(ch) else np.zeros(0, np.int64)
    return Prog(
        a_start=p.agent_start_ns, a_host=p.agent_kind == 1, op_ptr=p.op_ptr, agent_ops=p.agent_ops,
        op_code=p.op_code, op_target=p.op_target.astype(np.int64), op_nbytes=p.op_nbytes, op_async=p.op_async,
        op_arg=p.op_arg, ch_src=ch.src, ch_dst=ch.dst, ch_nslots=ch.n_slots, ch_setup=ch.setup_ns,
        ch_tier_bw=ch.tier_bw, ch_hop_bw=ch.hop_bw, ch_credit=ch.credit_ns, ch_in_ptr=ch.in_ptr,
        ch_in_list=ch.in_list, ch_msg_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        ch_msg_op=sends.astype(np.int64), credit_blocking=bool(ch.credit_blocking), poll_ns=float(ch.poll_ns),
        a_pe=(pes := agent_pes(p)), a_alone=alone(pes),
        read_release_early=p.tables.spec.pe.dma_read_release == "accepted")


def alone(pes: np.ndarray) -> np.ndarray:
    """Per agent: the only agent on its PE (``pes`` from :func:`agent_pes`; the host is never alone)."""
    counts = np.bincount(pes[pes >= 0], minlength=1)
    return (pes >= 0) & (counts[np.maximum(pes, 0)] == 1)


def agent_pes(p) -> np.ndarray:
    """Per agent, the PE whose resources it shares (agents on one ``pe_dma`` share them), -1 for the host."""
    pe = p.agent_kind == 0
    out = np.full(p.n_agents, -1, np.int64)
    out[pe] = np.unique(p.agent_node[pe], return_inverse=True)[1].ravel()
    return out


def ns_per_byte(bw_gbs: np.ndarray) -> np.ndarray:
    """1 / bandwidth (GB/s = B/ns), and 0 for an infinite bandwidth: a wire's serialization time per byte."""
    return np.where(np.isinf(bw_gbs), 0.0, 1.0 / bw_gbs)


def hbm_constants(spec: SystemSpec) -> Hbm:
    """The HBM and flit constants of ``spec`` (spec_memory §3, ADR-0034), computed here only."""
    hbm, flit = spec.hbm, spec.fabric.flit_bytes
    return Hbm(n_pcs=hbm.pcs_per_pe, pc_shift=int(hbm.burst_bytes).bit_length() - 1, burst_bytes=hbm.burst_bytes,
               flit_bytes=flit, commit_ns=flit / spec.pc_bw_gbs, burst_commit_ns=hbm.burst_bytes / spec.pc_bw_gbs,
               switch_penalty_ns=hbm.switch_penalty_ns, read_accept=hbm.read_response == "accepted")


@dataclass(frozen=True)
class Lowered:
    """A Program as both evaluators' kernels take it (built by :func:`lower`)."""

    compact: Compact
    fabric: Fabric
    hbm: Hbm
    prog: Prog
    routes: OpRoutes


def lower(p: Program) -> Lowered:
    """Compact ``p`` and pack it into the named kernel inputs."""
    t = p.tables
    c = compact(p)
    e_bw = t.edge_bw_gbs[c.edges]
    fabric = Fabric(n_ovh=t.node_overhead_ns[c.nodes], n_flit=t.node_flit_aware[c.nodes], n_hbm=c.node_hbm,
                    e_src=c.e_src, e_dst=c.e_dst, e_bw=e_bw, e_c=ns_per_byte(e_bw),
                    e_prop=t.edge_prop_ns[c.edges], r_ptr=p.route_ptr, r_edges=c.route_edges)
    routes = OpRoutes(op_addr=p.op_addr, op_route=p.op_route.astype(np.int64),
                      op_rroute=p.op_rroute.astype(np.int64), ch_route=p.channels.route.astype(np.int64))
    return Lowered(compact=c, fabric=fabric, hbm=hbm_constants(t.spec), prog=make_prog(p), routes=routes)


# From this many pairs on, pairs are found by hashing (pandas): on 10^6 pairs a lookup takes 4 ms against
# searchsorted's 90 ms, and the distinct pairs 11 ms against np.unique's 41 ms; below it pandas' fixed cost
# per call (tens of µs) outweighs that, and a GEMM's few tile routes keep numpy.
HASHED = 4096


@dataclass(frozen=True)
class TransferRoutes:
    """The routes of isolated transfers between distinct (src, dst) node pairs, forward and reverse, over the
    compact edges and nodes they touch (built by :func:`transfer_routes`)."""

    tables: Tables
    keys: np.ndarray      # int64 [K]: the pairs' keys ``src * n_nodes + dst``, ascending
    edges: np.ndarray     # global edge ids of the compact edges, ascending
    nodes: np.ndarray     # global node ids of the compact nodes, ascending
    r_ptr: np.ndarray     # int64 [2K+1], CSR: route k < K is pair k's forward route, K + k its reverse
    r_edges: np.ndarray   # int32: compact edge ids in path order
    e_src: np.ndarray     # int32 per compact edge: its compact source node
    e_dst: np.ndarray     # int32 per compact edge: its compact destination node

    def pair_index(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Per (src, dst): the index of its pair (its forward route; ``K +`` that is its reverse one)."""
        key = np.asarray(src, np.int64) * self.tables.n_nodes + np.asarray(dst, np.int64)
        if key.size >= HASHED:
            idx = pd.Index(self.keys).get_indexer(key.ravel()).reshape(key.shape)
        else:
            idx = np.searchsorted(self.keys, key)
            idx[self.keys[np.minimum(idx, len(self.keys) - 1)] != key] = -1
        if np.any(idx < 0):
            raise ValueError("a (src, dst) pair has no route in these TransferRoutes")
        return idx.astype(np.int64)


def transfer_routes(t: Tables, router: Router, src: np.ndarray, dst: np.ndarray, host: bool = False
                    ) -> TransferRoutes:
    """The forward and reverse routes of every distinct (src, dst) pair: PE DMA routes, or with ``host`` the
    host's (``memory``) routes from a pcie_ep node; compacted (:func:`renumber`)."""
    key = np.asarray(src, np.int64).ravel() * t.n_nodes + np.asarray(dst, np.int64).ravel()
    keys = np.sort(pd.unique(key)) if len(key) >= HASHED else np.unique(key)
    pairs = np.divmod(keys, t.n_nodes)
    rs = router.routes(pairs[0], pairs[1], "memory" if host else "pe_dma")
    route_edges = np.concatenate([rs.edges, reverse_route_edges(t, rs.ptr, rs.edges)])
    edges, edge_local = renumber(route_edges, t.n_edges)
    nodes, node_local = renumber(np.concatenate([t.edge_src[edges], t.edge_dst[edges]]), t.n_nodes)
    r_ptr = np.concatenate([rs.ptr, len(rs.edges) + rs.ptr[1:]]).astype(np.int64)
    return TransferRoutes(tables=t, keys=keys, edges=edges, nodes=nodes, r_ptr=r_ptr,
                          r_edges=edge_local[route_edges], e_src=node_local[t.edge_src[edges]],
                          e_dst=node_local[t.edge_dst[edges]])


def tile_routes(t: Tables, router: Router, nodes: list[tuple[int, int, int]]) -> TransferRoutes:
    """The routes of GEMM tile transfers, per GEMM's (pe_dma, own controller, B's controller): the PE to
    each controller (``kbfast.fast.maxplus_gemm.dma_times``)."""
    pe, own, src_b = np.asarray(nodes, np.int64).reshape(-1, 3).T
    return transfer_routes(t, router, np.concatenate([pe, pe]), np.concatenate([own, src_b]))


def channel_hop_bws(p: Program, router: Router) -> np.ndarray:
    """Per IPCQ channel of ``p`` and buffer kind (``BUFFER_KINDS``): the bottleneck bandwidth of the receiving
    PE's path to its slot bank (:meth:`~kbfast.ir.ProgramBuilder.hop_bws`), float64 [C, K]."""
    b = ProgramBuilder(p.tables, router)
    dst = p.agent_node[p.channels.dst]
    return np.stack([b.hop_bws(dst, np.full(len(dst), k)) for k in range(len(BUFFER_KINDS))], axis=1)
