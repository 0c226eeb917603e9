"""Deterministic routing: three policies over the explicit graph, composed hierarchically.

Policies (``routing.policy``; docs/routing.md):

* ``kernbench`` (default): the original PathRouter (spec_fabric §4.2, README decisions "routing").
  Dijkstra on edge millimetres, held as exact integers (:attr:`FloorPlan.units_per_mm`), with a
  binary heap of ``(distance, node name)``; distance and predecessor change only on a strict
  improvement, so among equal-length routes the predecessor that settles first, by (distance,
  name), wins.  Cross-cube routes are not fenced: a UCIe endpoint, 0 mm from its connections, can
  join two connection routers.  PE blocks and HBM controllers are never transit nodes.
* ``balanced``: the same millimetres plus :data:`BALANCED_WEIGHT_MM` (endpoints fenced, fewest cube
  crossings); ties go to the fewest edges, then the smallest incoming edge id.  The builder orders
  vertical mesh links before horizontal ones, so equal-length mesh routes go X first (ADR-0017 D7).
* ``hops``: every edge weighs 1, ties as ``balanced``.

One of four adjacency graphs applies per route kind (:class:`~kbfast.topology.kinds.Graph`).

Hierarchical composition, exactly equal to flat Dijkstra on the whole system for every policy
(tested in ``tests/test_routing.py``):

* SIPs are identical and ids are laid out by offset, so shortest-path trees are computed once on
  the SIP template and reused for every SIP.  Inside a SIP every name starts with ``sip{S}.``, so
  the SIP-local name suffixes order the heap as the full names do;
* a SIP joins the rest of the system only through its ``pcie_ep`` (a cut vertex of the switch
  star), so a cross-SIP route is
  ``tree(src -> pcie_ep_a) + pcie_ep_a -> switch -> pcie_ep_b + tree(pcie_ep_b -> dst)``;
  distances beyond a cut vertex are shifted by a constant, which keeps every tie rule's choices;
* same-cube routes use the LOCAL graph (LOCAL_DATA for PE DMA), which has no UCIe/IO edges and so
  never leaves the cube.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import njit

from kbfast.config import budget
from kbfast.errors import RoutingError
from kbfast.topology.builder import Tables
from kbfast.topology.kinds import EXCLUDED_KINDS, PE_BLOCKS, EdgeKind, Graph
from kbfast.topology.names import node_name, node_names, sip_local_names

ROUTE_KINDS = ("pe_dma", "memory", "mcpu_dma", "node")


POLICIES = ("kernbench", "balanced", "hops")

# The ``balanced`` policy's own routing_weight_mm per edge kind (user overrides go on top): an
# endpoint crossing costs 2 x 8 mm, so a cross-cube route never uses a cube's UCIe endpoint as a
# bus between its connections and takes the fewest cube crossings; the IO chiplet's 2 x 20 mm
# keep traffic between cubes of a SIP off the IO chiplet (docs/routing.md).
BALANCED_WEIGHT_MM = {"ucie_internal": 8.0, "io_to_cube": 20.0, "cube_to_io": 20.0}


def edge_weights(mm: np.ndarray, kind: np.ndarray, policy: str, weight_mm: dict[str, float],
                 unit_per_mm: int = 1000) -> np.ndarray:
    """Routing weight per edge as an exact integer.

    ``kernbench`` and ``balanced``: millimetres in units of ``1/unit_per_mm`` mm (the floor
    plan's :attr:`~kbfast.topology.floorplan.FloorPlan.units_per_mm`, so that equal-length routes
    tie exactly), with ``weight_mm`` overriding whole edge kinds (the original's
    ``routing_weight_mm``; ``balanced`` adds :data:`BALANCED_WEIGHT_MM` under the overrides).
    ``hops``: 1 per edge.
    """
    if policy not in POLICIES:
        raise ValueError(f"routing policy must be one of {POLICIES}, got {policy!r}")
    if policy == "hops":
        return np.ones(len(mm), np.int64)
    mm = mm.copy()
    overrides = {**BALANCED_WEIGHT_MM, **weight_mm} if policy == "balanced" else weight_mm
    for name, value in overrides.items():
        mm[kind == EdgeKind[name.upper()]] = value
    return np.rint(mm * unit_per_mm).astype(np.int64)


PE_BLOCK_NAMES = frozenset(PE_BLOCKS)


def name_ranks(names: list[str] | tuple[str, ...]) -> np.ndarray:
    """Rank of each node name in string order (``sip10`` sorts before ``sip2``), for the kernbench tie rule."""
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), np.int64)
    rank[order] = np.arange(len(names))
    return rank


def build_csr(n_nodes: int, src: np.ndarray, kind: np.ndarray, graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Out-adjacency (ptr, edge ids in increasing id order) of one graph variant."""
    keep = ~np.isin(kind, np.array(sorted(EXCLUDED_KINDS[graph]), dtype=np.int8))
    edges = np.flatnonzero(keep).astype(np.int32)
    order = np.argsort(src[edges], kind="stable")
    edges = edges[order]
    ptr = np.zeros(n_nodes + 1, np.int64)
    np.cumsum(np.bincount(src[edges], minlength=n_nodes), out=ptr[1:])
    return ptr, edges


@njit(cache=True)
def shortest_path_tree(n_nodes, adj_ptr, adj_edge, edge_dst, weight, source):  # pragma: no cover - jitted
    """Dijkstra on (distance, hops); ``pred_edge[v]`` = smallest-id edge on a best route.

    Returns ``pred_edge`` (int32, -1 at the source and at unreachable nodes).
    """
    big = np.iinfo(np.int64).max
    dist = np.full(n_nodes, big, np.int64)
    hops = np.full(n_nodes, big, np.int64)
    pred = np.full(n_nodes, -1, np.int32)
    dist[source] = 0
    hops[source] = 0
    heap = [(np.int64(0), np.int64(0), np.int64(source))]
    while heap:
        d, h, u = heapq.heappop(heap)
        if d != dist[u] or h != hops[u]:
            continue
        for k in range(adj_ptr[u], adj_ptr[u + 1]):
            e = adj_edge[k]
            v = edge_dst[e]
            nd = d + weight[e]
            nh = h + 1
            if nd < dist[v] or (nd == dist[v] and nh < hops[v]):
                dist[v] = nd
                hops[v] = nh
                pred[v] = e
                heapq.heappush(heap, (nd, nh, np.int64(v)))
            elif nd == dist[v] and nh == hops[v] and e < pred[v]:
                pred[v] = e
    return pred


@njit(cache=True)
def kernbench_tree(n_nodes, adj_ptr, adj_edge, edge_dst, weight, rank, group, source):  # pragma: no cover
    """The original PathRouter's Dijkstra (spec_fabric §4.2): a binary heap of ``(distance, name)``.

    A node's distance and predecessor change only on a strict improvement, so nodes settle in
    (distance, name rank) order and, among equal-length routes, the predecessor that settles first
    wins.  Every heap key is distinct (a node is pushed once per distance value), so the pops, and
    so the tree, do not depend on the heap's layout.  PE blocks and HBM controllers are never
    transit nodes: an edge that leaves a PE or controller ``group`` (>= 0) for another group or
    the fabric is taken only from the source's own group.  Returns ``pred_edge``.
    """
    big = np.iinfo(np.int64).max
    dist = np.full(n_nodes, big, np.int64)
    pred = np.full(n_nodes, -1, np.int32)
    dist[source] = 0
    home = group[source]
    heap = [(np.int64(0), rank[source], np.int64(source))]
    while heap:
        d, _, u = heapq.heappop(heap)
        if d != dist[u]:
            continue
        gu = group[u]
        for k in range(adj_ptr[u], adj_ptr[u + 1]):
            e = adj_edge[k]
            v = edge_dst[e]
            if gu >= 0 and gu != home and group[v] != gu:
                continue
            nd = d + weight[e]
            if nd < dist[v]:
                dist[v] = nd
                pred[v] = e
                heapq.heappush(heap, (nd, rank[v], np.int64(v)))
    return pred


def policy_tree(policy: str, n_nodes: int, csr: tuple[np.ndarray, np.ndarray], edge_dst: np.ndarray,
                weight: np.ndarray, rank: np.ndarray, group: np.ndarray, source: int) -> np.ndarray:
    """Shortest-path tree (``pred_edge``) from ``source`` under a policy's tie rule."""
    ptr, adj = csr
    if policy == "kernbench":
        return kernbench_tree(n_nodes, ptr, adj, edge_dst, weight, rank, group, np.int64(source))
    return shortest_path_tree(n_nodes, ptr, adj, edge_dst, weight, np.int64(source))


def transit_groups(names: list[str]) -> np.ndarray:
    """Group id per node name: one per PE (its blocks ``...pe{X}.*``) and one per HBM controller, -1 elsewhere.

    Names are full or SIP-local (spec_fabric §1.5); what precedes ``pe{X}.`` or ``hbm_ctrl.pe{X}`` keeps
    the PEs of different cubes and SIPs apart.
    """
    ids: dict[str, int] = {}
    out = np.full(len(names), -1, np.int64)
    for i, name in enumerate(names):
        head, _, last = name.rpartition(".")
        if head.rsplit(".", 1)[-1].startswith("pe") and last in PE_BLOCK_NAMES:
            key = head
        elif head.endswith("hbm_ctrl"):
            key = name
        else:
            continue
        out[i] = ids.setdefault(key, len(ids))
    return out


@njit(cache=True)
def _walk(pred, edge_src, source, target, out_edges):  # pragma: no cover - jitted
    """Write the edges of the tree route source->target into out_edges (reversed); return count or -1."""
    n = 0
    v = target
    while v != source:
        e = pred[v]
        if e < 0:
            return -1
        out_edges[n] = e
        n += 1
        v = edge_src[e]
    return n


@njit(cache=True)
def _compose(preds, sip_edge_src, row_a, target_a, sip_a, row_b, target_b, sip_b, source_a, source_b,
             pcie_local, edges_per_sip, n_sips, max_len):  # pragma: no cover - jitted
    """Global edge sequences of many routes (CSR); see the module docstring for the composition."""
    n = len(row_a)
    ptr = np.zeros(n + 1, np.int64)
    buf = np.empty(max_len, np.int32)
    out = np.empty(n * 8 + 64, np.int32)
    status = np.zeros(n, np.int8)
    used = 0
    for i in range(n):
        cross = row_b[i] >= 0
        t_a = pcie_local if cross else target_a[i]
        cnt = _walk(preds[row_a[i]], sip_edge_src, source_a[i], t_a, buf)
        if cnt < 0:
            status[i] = 1
            ptr[i + 1] = used
            continue
        need = used + cnt + 2 + max_len
        if need > len(out):
            grown = np.empty(max(2 * len(out), need), np.int32)
            grown[:used] = out[:used]
            out = grown
        base_a = sip_a[i] * edges_per_sip
        for j in range(cnt):
            out[used + j] = base_a + buf[cnt - 1 - j]
        used += cnt
        if cross:
            sw = n_sips * edges_per_sip
            out[used] = sw + 2 * sip_a[i]
            out[used + 1] = sw + 2 * sip_b[i] + 1
            used += 2
            cnt = _walk(preds[row_b[i]], sip_edge_src, source_b[i], target_b[i], buf)
            if cnt < 0:
                status[i] = 1
                ptr[i + 1] = used
                continue
            base_b = sip_b[i] * edges_per_sip
            for j in range(cnt):
                out[used + j] = base_b + buf[cnt - 1 - j]
            used += cnt
        ptr[i + 1] = used
    return ptr, out[:used], status


@dataclass(frozen=True)
class RouteSet:
    """Routes in CSR form: route ``i`` has edges ``edges[ptr[i]:ptr[i+1]]`` and source ``src[i]``."""

    src: np.ndarray
    dst: np.ndarray
    ptr: np.ndarray
    edges: np.ndarray

    def __len__(self) -> int:
        return len(self.src)

    def edges_of(self, i: int) -> np.ndarray:
        """Edge ids of route ``i``, in order."""
        return self.edges[self.ptr[i]:self.ptr[i + 1]]

    def nodes_of(self, i: int, edge_dst: np.ndarray) -> np.ndarray:
        """Node ids of route ``i``, from its source (``edge_dst``: the tables' edge destinations)."""
        return np.concatenate([[self.src[i]], edge_dst[self.edges_of(i)]]).astype(np.int32)


RECENT, RECENT_PAIRS = 64, 4096   # queries Router.routes keeps, and the most pairs of one it keeps


class Router:
    """Shared route tables for both evaluators; trees are cached per (graph, SIP-local source).

    >>> from kbfast import build_tables, load_system
    >>> from kbfast.topology.names import node_id
    >>> t = build_tables(load_system())
    >>> edges = Router(t).route(node_id(t, "sip0.cube0.pe0.pe_dma"), node_id(t, "sip0.cube0.hbm_ctrl.pe2"))
    >>> len(edges) > 0
    True
    """

    def __init__(self, tables: Tables, policy: str | None = None):
        self.t = tables
        self.policy = policy or tables.spec.routing.policy
        lay = tables.layout
        self._w = edge_weights(tables.sip_edge_mm, tables.sip_edge_kind, self.policy, tables.spec.routing.weight_mm,
                               tables.plan.units_per_mm)
        self._csr = {g: build_csr(lay.nodes_per_sip, tables.sip_edge_src, tables.sip_edge_kind, g) for g in Graph}
        # Inside one SIP every name starts with ``sip{S}.``, so the suffixes order them (spec_fabric §1.5).
        names = sip_local_names(tables)
        self._rank = name_ranks(names)
        self._group = transit_groups(names)
        self._rows: dict[tuple[int, int], int] = {}
        self._preds: list[np.ndarray] = []
        self._stacked = np.zeros((0, tables.layout.nodes_per_sip), np.int32)
        chip = tables.spec.sip.io_chiplets[0].id
        self._pcie_local = tables.io_names.index(f"{chip}.pcie_ep")
        self._recent: OrderedDict = OrderedDict()   # (kind, src, dst bytes) -> RouteSet, the latest queries

    def _row(self, graph: Graph, local_src: int) -> int:
        key = (int(graph), int(local_src))
        row = self._rows.get(key)
        if row is None:
            pred = policy_tree(self.policy, self.t.layout.nodes_per_sip, self._csr[graph], self.t.sip_edge_dst,
                               self._w, self._rank, self._group, local_src)
            row = self._rows[key] = len(self._preds)
            self._preds.append(pred)
        return row

    def _check_budget(self, keys: np.ndarray, kind: str) -> None:
        """Refuse the trees of many new sources before computing them (kbfast.config.budget): each holds a SIP's nodes."""
        nps = self.t.layout.nodes_per_sip
        if (len(keys) + 2) * nps < (1 << 22):          # at most 16 MiB of new trees: not worth a look
            return
        new = sum((k // nps, k % nps) not in self._rows for k in keys.tolist()) + 2   # + the PCIe rows
        if new * nps < (1 << 22):
            return
        budget.check(f"the {kind} routes from {new:,} sources ({new:,} shortest-path trees over "
                     f"{nps:,} nodes of a SIP)", budget.routing_bytes(new, len(self._preds), nps),
                     "use a smaller cube mesh (sip.cube_mesh.w, sip.cube_mesh.h) or fewer ranks (a workload on "
                     "pe0 of each cube, ranks=cube_pe0)", seconds=budget.routing_seconds(new, nps))

    def _graphs(self, kind: str, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The adjacency graph per pair for a route kind (spec_fabric §4.2 public calls)."""
        lay = self.t.layout
        same_cube = ((src - 1) // lay.nodes_per_sip == (dst - 1) // lay.nodes_per_sip)
        rs, rd = (src - 1) % lay.nodes_per_sip - lay.io_nodes, (dst - 1) % lay.nodes_per_sip - lay.io_nodes
        same_cube &= (rs >= 0) & (rd >= 0) & (rs // lay.nodes_per_cube == rd // lay.nodes_per_cube)
        same_cube &= (src > 0) & (dst > 0)
        if kind == "pe_dma":
            return np.where(same_cube, int(Graph.LOCAL_DATA), int(Graph.DATA))
        if kind == "mcpu_dma":
            return np.where(same_cube, int(Graph.LOCAL), int(Graph.ALL))
        if kind == "memory":
            return np.full(len(src), int(Graph.MEMORY))
        if kind == "node":
            return np.full(len(src), int(Graph.ALL))
        raise ValueError(f"route kind must be one of {ROUTE_KINDS}, got {kind!r}")

    def routes(self, src, dst, kind: str = "pe_dma") -> RouteSet:
        """Routes for many (source, destination) node pairs, without all-pairs tables.  The ``RECENT`` latest
        queries of at most ``RECENT_PAIRS`` pairs are kept: a sweep's points build the same Programs' routes
        again and again (its arrays are read-only)."""
        src = np.asarray(src, np.int64).ravel()
        dst = np.asarray(dst, np.int64).ravel()
        if src.shape != dst.shape:
            raise ValueError("src and dst must have the same length")
        if len(src) > RECENT_PAIRS:
            return self._routes(src, dst, kind)
        key = (kind, src.tobytes(), dst.tobytes())
        hit = self._recent.get(key)
        if hit is None:
            hit = self._recent[key] = self._routes(src, dst, kind)
            for a in (hit.src, hit.dst, hit.ptr, hit.edges):
                a.flags.writeable = False
            if len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(key)
        return hit

    def _routes(self, src: np.ndarray, dst: np.ndarray, kind: str) -> RouteSet:
        """:meth:`routes`, computed."""
        if np.any(src == 0) or np.any(dst == 0):
            raise RoutingError("routes start and end inside a SIP; the switch is only a transit node")
        lay = self.t.layout
        graphs = self._graphs(kind, src, dst)
        sip_a, loc_a = np.divmod(src - 1, lay.nodes_per_sip)
        sip_b, loc_b = np.divmod(dst - 1, lay.nodes_per_sip)
        cross = sip_a != sip_b
        keys, inverse = np.unique(graphs * lay.nodes_per_sip + loc_a, return_inverse=True)
        self._check_budget(keys, kind)
        row_a = np.array([self._row(Graph(k // lay.nodes_per_sip), k % lay.nodes_per_sip) for k in keys],
                         np.int64)[inverse]
        row_b = np.full(len(src), -1, np.int64)
        if cross.any():
            pr = {int(g): self._row(Graph(g), self._pcie_local) for g in np.unique(graphs[cross])}
            row_b[cross] = [pr[int(g)] for g in graphs[cross]]
        if len(self._stacked) != len(self._preds):
            self._stacked = np.stack(self._preds)
        preds = self._stacked
        ptr, edges, status = _compose(preds, self.t.sip_edge_src, row_a, loc_b, sip_a, row_b, loc_b, sip_b,
                                      loc_a, np.full(len(src), self._pcie_local, np.int64), self._pcie_local,
                                      lay.edges_per_sip, lay.n_sips, lay.nodes_per_sip + 1)
        if status.any():
            i = int(np.flatnonzero(status)[0])
            raise RoutingError(f"no {kind} route from {node_name(self.t, int(src[i]))} to "
                               f"{node_name(self.t, int(dst[i]))} (graph {Graph(int(graphs[i])).name})")
        return RouteSet(src=src.astype(np.int32), dst=dst.astype(np.int32), ptr=ptr, edges=edges)

    def route(self, src: int, dst: int, kind: str = "pe_dma") -> np.ndarray:
        """Edge ids of one route."""
        if src == dst:
            return np.zeros(0, np.int32)
        return self.routes([src], [dst], kind).edges_of(0)

    def route_nodes(self, src: int, dst: int, kind: str = "pe_dma") -> np.ndarray:
        """Node ids of the route from ``src`` to ``dst`` (see :meth:`route`), ``src`` first."""
        edges = self.route(src, dst, kind)
        return np.concatenate([[src], self.t.edge_dst[edges]]).astype(np.int32)


def flat_route(tables: Tables, src: int, dst: int, graph: Graph, policy: str | None = None) -> np.ndarray:
    """Reference: Dijkstra with the policy's tie rule on the whole flat system graph, full node names
    included (for tests of the hierarchical composition)."""
    policy = policy or tables.spec.routing.policy
    csr = build_csr(tables.n_nodes, tables.edge_src, tables.edge_kind, graph)
    w = edge_weights(tables.edge_mm, tables.edge_kind, policy, tables.spec.routing.weight_mm,
                     tables.plan.units_per_mm)
    names = node_names(tables, np.arange(tables.n_nodes))
    pred = policy_tree(policy, tables.n_nodes, csr, tables.edge_dst, w, name_ranks(names), transit_groups(names), src)
    buf = np.empty(tables.n_nodes, np.int32)
    n = _walk(pred, tables.edge_src, src, dst, buf)
    if n < 0:
        raise RoutingError(f"no route from {node_name(tables, src)} to {node_name(tables, dst)}")
    return buf[:n][::-1].copy()


__all__ = ["POLICIES", "ROUTE_KINDS", "RouteSet", "Router", "flat_route"]
