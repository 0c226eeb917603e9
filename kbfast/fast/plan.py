"""Plan a Program for the fast path: everything the fluid schedule and its bounds need that depends on the
Program's structure, not on its sizes (design §6).

:func:`plan_fast` lowers the Program (``kbfast.sim.lowering``), finds the resources more than one flow uses
and merges those the same flows use (:class:`~kbfast.fast.schedule.Sharing`), and builds the flow classes of
the interference bound (:class:`~kbfast.fast.bounds.BoundTables`).  :func:`run_bound` and
:func:`causal_order` derive the run bound's coefficients and the flows' vector clocks from those classes.
``kbfast.fast.evaluate`` runs the schedules over a :class:`Plan`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from kbfast.errors import KbfastError
from kbfast.fast.bounds import BoundTables
from kbfast.fast.causal import Causal, knowledge, pair_count
from kbfast.fast.runs import RunCoefs, no_runs, run_coefficients
from kbfast.fast.schedule import Sharing, head_offsets
from kbfast.ir import Op, Program
from kbfast.sim.lowering import Compact, Lowered, agent_pes, data_routes, lower


RUN_PARTNERS = 64          # partner classes a flow class may always have for the run bound (run_partners), and
RUN_MAX_PARTNERS = 1024    # at most, while the Program's classes x partners stay within RUN_MAX_PAIRS (72 B a
RUN_MAX_PAIRS = 2_000_000  # pair); a class with more keeps the per-server interference
RUN_MAX_FLOWS = 50_000   # a larger Program keeps the per-server bound and SEND windows to the receiver's finish:
                         # the run bound costs 0.3 s a pass at 1024 SIPs, arrival windows 40 % more passes
CAUSAL_MAX_CELLS = 20_000_000   # vector clock cells (int32) of causal_order, else no causal order
CAUSAL_MAX_PAIRS = 50_000_000   # flow pairs on shared servers of causal_interference, else none


@njit(cache=True)
def _same_shape_routes(routes, r_ptr, r_edges, e_src, e_dst, e_c, e_prop, n_ovh, n_flit):  # pragma: no cover
    """Per entry of ``routes``: the first entry whose route has the same closed-form inputs (the source's
    overhead, then per edge c, propagation and the next node's overhead and flit awareness), so that
    structurally identical routes (the same hop in another SIP or cube) share an isolated latency.

    Routes are grouped by a 64-bit hash of those values and every member is compared value by value
    with its group's first entry, so a hash collision only splits a group."""
    n = len(routes)
    c_bits, p_bits, o_bits = e_c.view(np.uint64), e_prop.view(np.uint64), n_ovh.view(np.uint64)
    prime = np.uint64(1099511628211)
    h = np.empty(n, np.uint64)
    for i in range(n):
        r = routes[i]
        x = (np.uint64(14695981039346656037) ^ o_bits[e_src[r_edges[r_ptr[r]]]]) * prime
        for k in range(r_ptr[r], r_ptr[r + 1]):
            e = r_edges[k]
            v = e_dst[e]
            x = (x ^ c_bits[e]) * prime
            x = (x ^ p_bits[e]) * prime
            x = (x ^ o_bits[v] ^ np.uint64(n_flit[v])) * prime
        h[i] = x
    order = np.argsort(h, kind="mergesort")
    rep = np.arange(n)
    start = 0
    for j in range(1, n + 1):
        if j < n and h[order[j]] == h[order[start]]:
            continue
        first = order[start]          # the group's smallest entry (mergesort is stable)
        for m in range(start + 1, j):
            i = order[m]
            a, b = routes[first], routes[i]
            same = (r_ptr[a + 1] - r_ptr[a] == r_ptr[b + 1] - r_ptr[b]
                    and n_ovh[e_src[r_edges[r_ptr[a]]]] == n_ovh[e_src[r_edges[r_ptr[b]]]])
            k = 0
            while same and k < r_ptr[a + 1] - r_ptr[a]:
                ea, eb = r_edges[r_ptr[a] + k], r_edges[r_ptr[b] + k]
                va, vb = e_dst[ea], e_dst[eb]
                same = (e_c[ea] == e_c[eb] and e_prop[ea] == e_prop[eb] and n_ovh[va] == n_ovh[vb]
                        and n_flit[va] == n_flit[vb])
                k += 1
            if same:
                rep[i] = first
        start = j
    return rep


def dma_iso_ops(p: Program, low: Lowered) -> np.ndarray:
    """Per op: for a PE's DMA, the first DMA (lowest op id) whose isolated latency and per-PC commits are its
    own, else -1.  :func:`kbfast.fast.closed_form.transfer_end` reads a PE's DMA through its kind (read or
    write), bytes, first pseudo-channel ``pc_of(addr)`` and the shapes of its forward and reverse routes
    (:func:`_same_shape_routes`), so DMAs that agree on those share it (the fast schedule's memo, like a
    SEND's ``ch_iso_route``).  A host's DMAs share nothing (a D2H also reads its route's bandwidths)."""
    out = np.full(p.n_ops, -1, np.int64)
    dma = np.nonzero(((p.op_code == Op.DMA_WRITE) | (p.op_code == Op.DMA_READ)) & ~low.prog.a_host[p.op_agent])[0]
    if len(dma) == 0:
        return out
    fab, hbm, routes = low.fabric, low.hbm, low.routes

    def shapes(r: np.ndarray) -> np.ndarray:
        return r[_same_shape_routes(r, fab.r_ptr, fab.r_edges, fab.e_src, fab.e_dst, fab.e_c, fab.e_prop, fab.n_ovh,
                                    fab.n_flit)]
    pc0 = (routes.op_addr[dma] >> hbm.pc_shift) & (hbm.n_pcs - 1)          # kbfast.sim.fabric.pc_of
    keys = np.stack([p.op_code[dma].astype(np.int64), pc0, p.op_nbytes[dma].astype(np.int64),
                     shapes(routes.op_route[dma]), shapes(routes.op_rroute[dma])], axis=1)
    order = np.lexsort(keys.T[::-1])          # stable: a group's first entry is its lowest op id
    ordered = keys[order]
    new = np.ones(len(dma), np.bool_)
    new[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    out[dma[order]] = dma[order[np.maximum.accumulate(np.where(new, np.arange(len(dma)), 0))]]
    return out


def _bound_tables(p: Program, c: Compact, data_route: np.ndarray, e_bw: np.ndarray, n_flit: np.ndarray,
                  n_ovh: np.ndarray, e_dst: np.ndarray, commit: float, sw: float) -> BoundTables:
    """The flow classes of the interference bound (``kbfast.fast.bounds``): ops with the same payload route,
    HBM controller (a DMA's: the end of its request route) and PE DMA channel (serial classes), ordered by
    (route, controller, channel).
    A class's entries: the route's finite wires (bytes / bw), then its flit-aware node workers (their
    overhead), both in route order, then the HBM controller (commit + switch penalty per flit)."""
    hbm = np.full(p.n_ops, -1, np.int64)
    dma = (data_route >= 0) & (p.op_code != Op.SEND)
    hbm[dma] = _dma_controller(p, c, np.flatnonzero(dma))
    flows = np.flatnonzero(data_route >= 0)
    n_keys = len(c.hbm_ctrls) + 1
    # a PE DMA's channel (PE, direction), which serializes its class; -1 for the host's DMAs and IPCQ data
    pe = agent_pes(p)[p.op_agent]
    chan = np.where(dma & (pe >= 0), 2 * pe + (p.op_code == Op.DMA_READ), -1)
    n_chan = 2 * (int(pe.max(initial=-1)) + 1) + 1
    route_key = data_route[flows] * n_keys + hbm[flows] + 1
    keys, op_cls = np.unique(route_key * n_chan + chan[flows] + 1, return_inverse=True)
    route_key = keys // n_chan
    seq = _server_sequences(route_key // n_keys, p.route_ptr, c.route_edges, e_bw, e_dst, n_flit,
                            n_ovh.astype(np.float64), len(c.edges))
    cls_ptr, res, kind, base = _resource_entries(route_key // n_keys, route_key % n_keys - 1, *seq[:4],
                                                 len(c.edges), len(c.nodes), commit + sw)
    users_ptr, users = _users(cls_ptr, res, len(c.edges) + len(c.nodes) + len(c.hbm_ctrls))
    order = np.argsort(op_cls, kind="stable")
    ops_ptr = np.concatenate([[0], np.cumsum(np.bincount(op_cls, minlength=len(keys)))])
    return BoundTables(cls_ptr=cls_ptr, res=res, kind=kind, base=base, ops_ptr=ops_ptr, ops=flows[order],
                       users_ptr=users_ptr, users=users, serial=keys % n_chan > 0, seq_ptr=seq[0], seq_res=seq[1],
                       seq_c=seq[2], seq_o=seq[3], seq_solo=seq[4])


def _dma_controller(p: Program, c: Compact, ops: np.ndarray) -> np.ndarray:
    """The HBM controller (local index) of each DMA in ``ops``: the end of its request route."""
    return c.node_hbm[c.e_dst[c.route_edges[p.route_ptr[p.op_route[ops] + 1] - 1]]]


@njit(cache=True)
def _resource_entries(cls_route, cls_hbm, seq_ptr, seq_res, seq_c, seq_o, n_e, n_n,
                      commit):  # pragma: no cover - jitted
    """Kernel of :func:`_bound_tables`: per class with a route (``cls_route`` >= 0; its servers ``seq_*`` from
    :func:`_server_sequences`, its controller ``cls_hbm`` or -1) its finite wires, then its flit-aware node
    workers, both in route order, then its controller; counted (``res_ptr``), then filled."""
    n_cls = len(cls_hbm)
    res_ptr = np.zeros(n_cls + 1, np.int64)
    for x in range(n_cls):
        c = 0
        for i in range(seq_ptr[x], seq_ptr[x + 1]):
            c += seq_res[i] >= 0
        res_ptr[x + 1] = res_ptr[x] + c + (cls_hbm[x] >= 0 and cls_route[x] >= 0)
    n = res_ptr[n_cls]
    res = np.empty(n, np.int64)
    kind = np.empty(n, np.int8)
    base = np.empty(n)
    i = 0
    for x in range(n_cls):
        for w in range(2):                   # wires (resource < n_e), then node workers
            for j in range(seq_ptr[x], seq_ptr[x + 1]):
                r = seq_res[j]
                if r >= 0 and (r < n_e) == (w == 0):
                    res[i], kind[i], base[i] = r, w, seq_c[j] if w == 0 else seq_o[j]
                    i += 1
        if cls_hbm[x] >= 0 and cls_route[x] >= 0:
            res[i], kind[i], base[i] = n_e + n_n + cls_hbm[x], 2, commit
            i += 1
    return res_ptr, res, kind, base


@njit(cache=True)
def _server_sequences(cls_route, route_ptr, route_edges, e_bw, e_dst, n_flit, n_ovh, n_e):  # pragma: no cover
    """Per class, its route's servers in route order (``BoundTables.seq_*``): each finite wire (resource
    ``e``, ``c = 1 / bw``; the route's first one solo), then the node it enters: a flit-aware worker (resource
    ``n_e + v``, its overhead) or, store-and-forward, a break (-1) that no run crosses."""
    n_cls = len(cls_route)
    seq_ptr = np.zeros(n_cls + 1, np.int64)
    for x in range(n_cls):
        r = cls_route[x]
        n = 0
        if r >= 0:
            for k in range(route_ptr[r], route_ptr[r + 1]):
                n += 1 + np.isfinite(e_bw[route_edges[k]])
        seq_ptr[x + 1] = seq_ptr[x] + n
    m = seq_ptr[n_cls]
    seq_res = np.empty(m, np.int64)
    seq_c = np.zeros(m)
    seq_o = np.zeros(m)
    seq_solo = np.zeros(m, np.bool_)
    i = 0
    for x in range(n_cls):
        r = cls_route[x]
        if r < 0:
            continue
        for k in range(route_ptr[r], route_ptr[r + 1]):
            e = route_edges[k]
            if np.isfinite(e_bw[e]):
                seq_res[i], seq_c[i], seq_solo[i] = e, 1.0 / e_bw[e], k == route_ptr[r]
                i += 1
            v = e_dst[e]
            if n_flit[v]:
                seq_res[i], seq_o[i] = n_e + v, n_ovh[v]
            else:
                seq_res[i] = -1
            i += 1
    return seq_ptr, seq_res, seq_c, seq_o, seq_solo


@njit(cache=True)
def _users(res_ptr, res, n_res):  # pragma: no cover - jitted
    """Per resource the (class, entry) pairs in entry order (``users_ptr``, ``pairs``): a stable
    counting sort of the entries (grouped by class via ``res_ptr``) by resource."""
    users_ptr = np.zeros(n_res + 1, np.int64)
    for i in range(len(res)):
        users_ptr[res[i] + 1] += 1
    for r in range(n_res):
        users_ptr[r + 1] += users_ptr[r]
    fill = users_ptr[:-1].copy()
    pairs = np.empty((len(res), 2), np.int64)
    for o in range(len(res_ptr) - 1):
        for i in range(res_ptr[o], res_ptr[o + 1]):
            j = fill[res[i]]
            fill[res[i]] = j + 1
            pairs[j, 0] = o
            pairs[j, 1] = i
    return users_ptr, pairs


@njit(cache=True)
def _shared_entries(data_route, route_ptr, route_edges, e_bw, e_dst, n_flit, n_ovh, n_e,
                    n_n):  # pragma: no cover - jitted
    """Kernel of :func:`_shared`.  Resources are numbered edges first, then nodes (``n_e + node``).
    Ops on the same route touch the same resources, so each route's distinct resources are found
    once and counted with the route's number of ops.  Returns ``shared_edge, shared_node``
    and per route its shared resources ``sh_res[sh_ptr[r]:sh_ptr[r + 1]]`` (stored per route, not per
    op: per op they would be ~6 M entries at 1024 SIPs)."""
    n_routes = len(route_ptr) - 1
    n_ops_of = np.zeros(n_routes, np.int64)
    for o in range(len(data_route)):
        if data_route[o] >= 0:
            n_ops_of[data_route[o]] += 1
    total = 0
    for r in range(n_routes):
        if n_ops_of[r] > 0:
            total += 2 * (route_ptr[r + 1] - route_ptr[r])
    # per used route: its distinct resources, CSR over routes
    ids = np.empty(total, np.int64)
    u_ptr = np.zeros(n_routes + 1, np.int64)
    seen = np.full(n_e + n_n, -1, np.int64)
    users = np.zeros(n_e + n_n, np.int64)
    m = 0
    for r in range(n_routes):
        u_ptr[r] = m
        if n_ops_of[r] == 0:
            continue
        m0 = m
        for k in range(route_ptr[r], route_ptr[r + 1]):
            e = np.int64(route_edges[k])
            for x in (e, n_e + np.int64(e_dst[e])):     # the edge, and the node it enters
                if seen[x] != r:
                    seen[x] = r
                    ids[m] = x
                    m += 1
        for k in range(m0, m):
            users[ids[k]] += n_ops_of[r]
    u_ptr[n_routes] = m
    shared = users > 1
    shared[:n_e] &= np.isfinite(e_bw)
    shared[n_e:] &= n_flit & (n_ovh > 0)
    # per route: its shared resources (global ids)
    sh_ptr = np.zeros(n_routes + 1, np.int64)
    for r in range(n_routes):
        sh_ptr[r + 1] = sh_ptr[r]
        for k in range(u_ptr[r], u_ptr[r + 1]):
            sh_ptr[r + 1] += shared[ids[k]]
    sh_res = np.empty(sh_ptr[-1], np.int64)
    i = 0
    for k in range(m):
        if shared[ids[k]]:
            sh_res[i] = ids[k]
            i += 1
    return shared[:n_e], shared[n_e:], sh_ptr, sh_res


@njit(cache=True)
def _merge_identical(sh_ptr, sh_res, n_e, e_bw, n_ovh):  # pragma: no cover - jitted
    """Merge shared resources that the same routes use into one (returns ``group`` per resource (-1 if not
    shared), per group ``cap`` and ``ovh``, and per route its groups, in route order, ``g_ptr, g_res``).

    Flows on a group's members are always the same, so of its wires only the slowest can bind
    (``Σ x ≤ min bw``), and of its node workers only the one with the largest overhead
    (``Σ ovh · x / bytes ≤ 1``): a group is a wire of capacity ``min bw`` (``ovh = 0``) or a worker of
    overhead ``max ovh`` (capacity 1).  Water-filling on the groups gives the rates of water-filling on
    the members, over a table ~3x smaller (1024 SIPs: 16 -> 5.5 per route, 200 k -> 53 k resources,
    which then fit in cache).  Groups come from partition refinement: start from {wires}, {workers};
    each route splits every class it touches into its members and the rest.
    """
    n_res = n_e + len(n_ovh)
    cls = np.full(n_res, -1, np.int64)
    for x in sh_res:
        cls[x] = 0 if x < n_e else 1
    n_cls = 2
    stamp = np.full(2 + len(sh_res), -1, np.int64)
    split_to = np.empty(2 + len(sh_res), np.int64)
    n_routes = len(sh_ptr) - 1
    for r in range(n_routes):
        for k in range(sh_ptr[r], sh_ptr[r + 1]):
            c = cls[sh_res[k]]
            if stamp[c] != r:
                stamp[c] = r
                split_to[c] = n_cls
                n_cls += 1
            cls[sh_res[k]] = split_to[c]
    # groups numbered by first appearance in route order (routes from nearby sources get nearby ids)
    gid = np.full(n_cls, -1, np.int64)
    group = np.full(n_res, -1, np.int64)
    cap = np.empty(len(sh_res))
    ovh = np.empty(len(sh_res))
    n_g = 0
    for x in sh_res:
        c = cls[x]
        if gid[c] < 0:
            gid[c] = n_g
            cap[n_g] = np.inf if x < n_e else 1.0
            ovh[n_g] = 0.0
            n_g += 1
        g = gid[c]
        group[x] = g
        if x < n_e:
            cap[g] = min(cap[g], e_bw[x])
        else:
            ovh[g] = max(ovh[g], n_ovh[x - n_e])
    g_ptr = np.zeros(n_routes + 1, np.int64)
    g_res = np.empty(len(sh_res), np.int64)
    seen = np.full(n_g, -1, np.int64)
    m = 0
    for r in range(n_routes):
        for k in range(sh_ptr[r], sh_ptr[r + 1]):
            g = group[sh_res[k]]
            if seen[g] != r:
                seen[g] = r
                g_res[m] = g
                m += 1
        g_ptr[r + 1] = m
    return group, cap[:n_g].copy(), ovh[:n_g].copy(), g_ptr, g_res[:m].copy()


def _shared(p: Program, c: Compact, data_route: np.ndarray, e_bw: np.ndarray, e_dst: np.ndarray,
            n_flit: np.ndarray, n_ovh: np.ndarray):
    """Resources more than one op's payload uses (finite-bandwidth edges, overhead-paying serial workers),
    merged into groups (:func:`_merge_identical`), and per op its groups, in route order.  Returns ``shared_edge,
    shared_node, edge_group, sh_span, sh_res, res_cap, res_ovh``: op ``o``'s groups are
    ``sh_res[sh_span[o, 0]:sh_span[o, 1]]`` (stored once per route)."""
    n_e = len(c.edges)
    shared_edge, shared_node, sh_ptr, sh_ids = _shared_entries(data_route, p.route_ptr, c.route_edges, e_bw, e_dst,
                                                               n_flit, n_ovh, n_e, len(c.nodes))
    group, res_cap, res_ovh, g_ptr, sh_res = _merge_identical(sh_ptr, sh_ids, n_e, e_bw, n_ovh)
    sh_span = np.zeros((p.n_ops, 2), np.int64)
    has = data_route >= 0
    sh_span[has, 0] = g_ptr[data_route[has]]
    sh_span[has, 1] = g_ptr[data_route[has] + 1]
    return shared_edge, shared_node, group[:n_e], sh_span, sh_res, res_cap, res_ovh


@dataclass(frozen=True)
class Plan:
    """Everything the fast schedule needs that depends on the program's structure, not its sizes."""

    program: Program
    lowered: Lowered          # the kernel inputs both evaluators share (kbfast.sim.lowering)
    sharing: Sharing          # each flow's shared resources (kbfast.fast.schedule)
    data_route: np.ndarray
    edge_group: np.ndarray    # per compact edge: its shared resource group, or -1
    share: np.ndarray         # per op: its payload route has a shared resource
    shared_edge: np.ndarray   # per compact edge: in a shared resource
    shared_node: np.ndarray   # per compact node: its worker is a shared resource
    planned: Program          # the Program plan_fast planned (with_times keeps it: the bounds' tables are its)
    # what the bounds derive from the structure alone, made once and shared by with_times' plans
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def remembered(self, key, make: Callable[[], Any]) -> Any:
        """``make()``, made once under ``key`` in the memo that the plans :meth:`with_times` makes share: for what
        reads the structure and sizes alone, no op's time."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    @property
    def bounds(self) -> BoundTables:
        """The flow classes of the interference bound (:func:`_bound_tables`), made on first use: a lower-bound
        schedule alone (``kbfast.fast.evaluate.lower_finish``) needs none."""
        fab, hbm = self.lowered.fabric, self.lowered.hbm
        return self.remembered("bounds", lambda: _bound_tables(self.planned, self.compact, self.data_route, fab.e_bw,
                                                               fab.n_flit, fab.n_ovh, fab.e_dst, hbm.commit_ns,
                                                               hbm.switch_penalty_ns))

    @property
    def runs(self) -> RunCoefs:
        """The run bound's coefficients of :attr:`bounds` (:func:`run_bound`), made on first use."""
        return self.remembered("runs", lambda: run_bound(self.bounds))

    @property
    def compact(self) -> Compact:
        """The compact nodes and edges of the lowering."""
        return self.lowered.compact

    @property
    def kernel_inputs(self) -> tuple:
        """(fabric, hbm, P, routes, sharing): :func:`~kbfast.fast.schedule.schedule`'s inputs after the
        mode, extra, share, head and iso arrays."""
        low = self.lowered
        return low.fabric, low.hbm, low.prog, low.routes, self.sharing

    def with_times(self, p: Program) -> Plan:
        """This plan for ``p``, a Program that differs from this plan's only in its ops' own times
        (``op_arg``) and its MATH ops' element counts, which set no flow: a stand-in with its commands at
        their lower or upper times, say, or at another KV length (kbfast.measure.shift)."""
        low = self.lowered
        prog = low.prog._replace(op_arg=p.op_arg, op_nbytes=p.op_nbytes)
        return dataclasses.replace(self, program=p, lowered=dataclasses.replace(low, prog=prog))

    def head_offsets(self, op_nbytes: np.ndarray) -> np.ndarray:
        """Per op: zero-load time until its head reaches its first shared resource, ns."""
        return head_offsets(self.data_route, op_nbytes, self.lowered.fabric, self.shared_edge, self.shared_node,
                            self.lowered.hbm.flit_bytes)


def plan_fast(p: Program) -> Plan:
    """Compact the program and find its shared resources (design §6)."""
    spec = p.tables.spec
    if spec.fabric.flit_bytes != spec.hbm.burst_bytes:
        raise KbfastError(f"the fast path needs fabric.flit_bytes == hbm.burst_bytes (got "
                          f"{spec.fabric.flit_bytes} and {spec.hbm.burst_bytes}); use exact mode for finer flits")
    low = lower(p)
    c, fab = low.compact, low.fabric
    data_route = data_routes(p)
    shared_edge, shared_node, edge_group, sh_span, sh_res, res_cap, res_ovh = _shared(p, c, data_route, fab.e_bw,
                                                                                      fab.e_dst, fab.n_flit, fab.n_ovh)
    max_route = int(np.diff(p.route_ptr).max()) if len(p.route_ptr) > 1 else 1
    ch_route = low.routes.ch_route
    ch_iso_route = ch_route[_same_shape_routes(ch_route, fab.r_ptr, fab.r_edges, fab.e_src, fab.e_dst, fab.e_c,
                                               fab.e_prop, fab.n_ovh, fab.n_flit)]
    sharing = Sharing(sh_span=sh_span, sh_res=sh_res, max_route=max_route, res_cap=res_cap, res_ovh=res_ovh,
                      ch_iso_route=ch_iso_route, dma_iso_op=dma_iso_ops(p, low))
    return Plan(program=p, lowered=low, sharing=sharing, data_route=data_route, edge_group=edge_group,
                share=sh_span[:, 1] > sh_span[:, 0], shared_edge=shared_edge, shared_node=shared_node, planned=p)


def causal_order(p: Program, B: BoundTables) -> Causal | None:
    """The flows' vector clocks (:func:`kbfast.fast.causal.knowledge`), or None when they would take more
    than ``CAUSAL_MAX_CELLS`` clock cells or the pairwise charge more than ``CAUSAL_MAX_PAIRS`` pairs."""
    width = p.n_agents + len(p.channels.src)
    n_msgs = int(np.isin(p.op_code, (Op.SEND, Op.RECV)).sum())
    if (len(B.ops) + n_msgs + p.n_agents) * width > CAUSAL_MAX_CELLS or pair_count(B) > CAUSAL_MAX_PAIRS:
        return None
    ch = p.channels
    return knowledge(p.op_ptr, p.agent_ops, p.op_code, p.op_target, p.op_async, ch.src, ch.dst, ch.n_slots,
                     B.ops)


def run_partners(n_cls: int) -> int:
    """The most partner classes a flow class of a Program of ``n_cls`` classes may have for the run bound:
    ``RUN_MAX_PAIRS / n_cls``, within ``RUN_PARTNERS`` .. ``RUN_MAX_PARTNERS``."""
    return max(RUN_PARTNERS, min(RUN_MAX_PARTNERS, RUN_MAX_PAIRS // max(n_cls, 1)))


def run_bound(B: BoundTables) -> RunCoefs:
    """The run bound's coefficients of a Program's flow classes (``kbfast.fast.runs.run_coefficients``, with
    :func:`run_partners` partners at most), or none (every class charged per server) for a Program of more
    than ``RUN_MAX_FLOWS`` flows."""
    n_cls = len(B.cls_ptr) - 1
    if len(B.ops) <= RUN_MAX_FLOWS:
        return run_coefficients(B, run_partners(n_cls))
    return no_runs(n_cls)
