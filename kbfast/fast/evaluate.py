"""Evaluate a Program on the fast path: point estimate, lower and upper bound, occupancy (design §6, §8)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numba import njit

from kbfast import budget
from kbfast.errors import KbfastError
from kbfast.fast.bounds import BoundTables, RunCoefs, interference, run_charges, run_coefficients, window_offsets
from kbfast.fast.causal import Causal, causal_interference, fifo_order, knowledge, pair_count
from kbfast.fast.schedule import LOWER, POINT, UPPER, Sharing, head_offsets, schedule
from kbfast.ir import Op, Program
from kbfast.sim.diagnostics import ReplayDeadlock, blocked_report, check_consumed
from kbfast.sim.fabric import pc_of
from kbfast.sim.lowering import Compact, Lowered, agent_pes, hbm_constants, lower
from kbfast.sim.result import Result, utilization
from kbfast.topology.kinds import EdgeKind
from kbfast.topology.names import node_name

BOUND_PASSES = 4
RUN_PARTNERS = 64    # a class with more co-user classes keeps the per-server interference (cost: pairs of classes)
RUN_MAX_FLOWS = 50_000   # a larger Program keeps the per-server bound and SEND windows to the receiver's finish:
                         # the run bound costs 0.3 s a pass at 1024 SIPs, arrival windows 40 % more passes
CAUSAL_MAX_CELLS = 20_000_000   # vector clock cells (int32) of causal_order, else no causal order
CAUSAL_MAX_PAIRS = 50_000_000   # flow pairs on shared servers of causal_interference, else none
FIXPOINT_ROUNDS = 64  # most rounds of the windows' least fixpoint (_least_fixpoint)
BOUND_GAIN = 1e-3     # stop refining once no agent's upper bound moved by 0.1 % of its span


@dataclass(frozen=True, kw_only=True)
class FastResult(Result):
    """Per-op times (point estimate) with per-op bounds (:class:`kbfast.sim.result.Result`), plus
    per-resource occupancy."""

    op_contended: np.ndarray     # bool per op: shared an edge with another active flow
    compact: Compact
    edge_contended: np.ndarray   # bool per compact edge
    data_route: np.ndarray       # per op: the route carrying its payload, or -1

    @property
    def edges(self) -> pd.DataFrame:
        """Per edge: bytes, busy_ns, utilization, shared (two flows on it at once; built on demand)."""
        return _edge_table(self.program, self.compact, self.edge_contended, self.agent_finish_ns, self.data_route)

    @property
    def pcs(self) -> pd.DataFrame:
        """Per (controller, pc): commits, busy_ns (built on demand)."""
        return _pc_table(self.program, self.compact, self.data_route)

    @property
    def shared(self) -> bool:
        """Whether two flows were ever on one resource at once (the hybrid replays such a Program exactly;
        whether sharing cost time is :func:`kbfast.measure.rows.contention_ns`)."""
        return bool(self.op_contended.any())


def data_routes(p: Program) -> np.ndarray:
    """Per op, the route that carries its payload (the reverse route for a host read; the channel's
    route for an IPCQ SEND), or -1."""
    dma = (p.op_code == Op.DMA_WRITE) | (p.op_code == Op.DMA_READ)
    host_read = dma & (p.agent_kind[p.op_agent] == 1) & (p.op_code == Op.DMA_READ)
    out = np.where(host_read, p.op_rroute, np.where(dma, p.op_route, -1)).astype(np.int64)
    sends = p.op_code == Op.SEND
    out[sends] = p.channels.route[p.op_target[sends]]
    return out


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
    bounds: BoundTables       # flow classes of the interference bound

    @property
    def compact(self) -> Compact:
        return self.lowered.compact

    @property
    def kernel_inputs(self) -> tuple:
        """(fabric, hbm, P, routes, sharing): :func:`~kbfast.fast.schedule.schedule`'s inputs after the
        mode, extra, share, head and iso arrays."""
        low = self.lowered
        return low.fabric, low.hbm, low.prog, low.routes, self.sharing

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
    c, fab, hbm = low.compact, low.fabric, low.hbm
    data_route = data_routes(p)
    shared_edge, shared_node, edge_group, sh_span, sh_res, res_cap, res_ovh = _shared(p, c, data_route, fab.e_bw,
                                                                                      fab.e_dst, fab.n_flit, fab.n_ovh)
    max_route = int(np.diff(p.route_ptr).max()) if len(p.route_ptr) > 1 else 1
    ch_route = low.routes.ch_route
    ch_iso_route = ch_route[_same_shape_routes(ch_route, fab.r_ptr, fab.r_edges, fab.e_src, fab.e_dst, fab.e_c,
                                               fab.e_prop, fab.n_ovh, fab.n_flit)]
    sharing = Sharing(sh_span=sh_span, sh_res=sh_res, max_route=max_route, res_cap=res_cap, res_ovh=res_ovh,
                      ch_iso_route=ch_iso_route)
    bounds = _bound_tables(p, c, data_route, fab.e_bw, fab.n_flit, fab.n_ovh, fab.e_dst, hbm.commit_ns,
                           hbm.switch_penalty_ns)
    return Plan(program=p, lowered=low, sharing=sharing, data_route=data_route, edge_group=edge_group,
                share=sh_span[:, 1] > sh_span[:, 0], shared_edge=shared_edge, shared_node=shared_node, bounds=bounds)


def run_fast(p: Program, tight: bool = True) -> FastResult:
    """Evaluate ``p`` analytically: exact where flows never share a resource, bounded elsewhere.

    ``tight=False`` keeps the upper bound of a model piece's stand-in Program, whose GEMMs are timed ops
    without their tile DMAs (:func:`finish_bounds`).

    >>> from kbfast import Router, build_tables, load_system, pe2pe
    >>> t = build_tables(load_system())
    >>> r = run_fast(pe2pe(t, Router(t), "h1", 4096).program)
    >>> r.makespan_lo_ns <= r.makespan_ns <= r.makespan_hi_ns
    True
    """
    budget.check(f"the fast path on {p.name} ({p.n_ops:,} ops)", budget.fast_bytes(p.n_ops, len(p.route_edges)),
                 "use a smaller topology, size or workload")
    t0 = time.perf_counter()
    plan = plan_fast(p)
    data_route, args, share = plan.data_route, plan.kernel_inputs, plan.share
    head = plan.head_offsets(p.op_nbytes)
    iso = np.full((p.n_ops, 1 + plan.lowered.hbm.n_pcs), np.nan)
    lo = _lower(p, plan, head, iso)
    point = _checked(p, schedule(POINT, np.zeros(p.n_ops), share, head, iso, *args))
    hi = _upper(p, plan, head, iso, lo, tight=tight)
    wall = time.perf_counter() - t0
    S = point[0]
    # Both bounds are valid for exact mode, so a point estimate outside them is clamped in.
    op_end = np.clip(S.op_end, lo[0].op_end, hi[0].op_end)
    finish = np.clip(S.a_finish, lo[0].a_finish, hi[0].a_finish)
    return FastResult(program=p, wall_s=wall, op_issue_ns=S.op_issue, op_begin_ns=S.op_begin, op_end_ns=op_end,
                      op_end_lo_ns=lo[0].op_end, op_end_hi_ns=hi[0].op_end, agent_finish_ns=finish,
                      agent_finish_lo_ns=lo[0].a_finish, agent_finish_hi_ns=hi[0].a_finish, op_contended=point[1],
                      compact=plan.compact, edge_contended=_per_edge(plan.edge_group, point[2]),
                      data_route=data_route)


def finish_bounds(lower_p: Program, upper_p: Program, passes: int = BOUND_PASSES) -> tuple[np.ndarray, np.ndarray]:
    """The lower bound of every agent's finish on ``lower_p`` and the upper bound on ``upper_p``: the same
    Program with ops' own times (``op_arg``) that are no longer in ``lower_p`` than in ``upper_p``.  The
    upper bound's interference windows open at ``lower_p``'s lower-bound begins, which are no later than
    ``upper_p``'s, so the bound holds (a little looser) without a schedule of its own.  ``passes`` caps the
    upper bound's tightening passes (every pass is a valid bound; fewer are looser and quicker).

    These are a model piece's stand-in Programs, in which a GEMM command is one timed op: its tile DMAs are
    no flows, so no co-users of the flows beside it.  They keep the window-free start and the descending
    passes (``tight=False`` in :func:`_upper`), whose margins have covered that traffic in every test; the
    tight bound, which counts only the flows it sees, would not (docs/fast_path.md §4)."""
    plan = plan_fast(lower_p)
    head = plan.head_offsets(lower_p.op_nbytes)
    iso = np.full((lower_p.n_ops, 1 + plan.lowered.hbm.n_pcs), np.nan)
    lo = _lower(lower_p, plan, head, iso)
    up_plan = plan_fast(upper_p)
    iso = np.full((upper_p.n_ops, 1 + up_plan.lowered.hbm.n_pcs), np.nan)
    hi = _upper(upper_p, up_plan, up_plan.head_offsets(upper_p.op_nbytes), iso, lo, passes, tight=False)
    return lo[0].a_finish, hi[0].a_finish


def _lower(p: Program, plan: Plan, head: np.ndarray, iso: np.ndarray):
    """The lower-bound schedule: every op alone on the resources it owns."""
    return _checked(p, schedule(LOWER, np.zeros(p.n_ops), plan.share, head, iso, *_own_resources(plan.kernel_inputs)))


def _upper(p: Program, plan: Plan, head: np.ndarray, iso: np.ndarray, lo, passes: int = BOUND_PASSES,
           tight: bool = True):
    """The upper-bound schedule: interference added to every flow.  With ``tight``, a Program of at most
    ``RUN_MAX_FLOWS`` flows that has IPCQ messages leaves out the co-users that are causally apart
    (:func:`causal_order`) and takes the least fixpoint of its windows (:func:`_least_fixpoint`); otherwise,
    or when the fixpoint does not settle, the window-free bound tightens over up to ``passes`` passes."""
    args, share, flit = plan.kernel_inputs, plan.share, plan.lowered.hbm.flit_bytes
    own, posted, begin_lo = _own_penalty(p, plan), _posted(p), lo[0].op_begin
    small = len(plan.bounds.ops) <= RUN_MAX_FLOWS
    # The causal order comes from messages: a Program without IPCQ (DMA probes, a GEMM's tiles, which are
    # asynchronous) keeps the passes; on a 1024^3 GEMM the tight bound took 3.4x the time for 7 % less.
    tight = tight and small and bool(np.any(p.op_code == Op.SEND))
    runs = run_bound(plan.bounds)
    cz = causal_order(p, plan.bounds) if tight else None
    # windows narrowed to each server (tight only: the model pieces' bound stays as it was)
    B = plan.bounds
    pre, post, seq_pre, seq_post = (window_offsets(B, p.op_nbytes, flit, p.op_code == Op.SEND) if tight else
                                    (np.zeros(len(B.res)),) * 2 + (np.zeros(len(B.seq_res)),) * 2)
    order = fifo_order(B) if tight else np.full(len(B.res), -1, np.int64)

    def bound(end_hi: np.ndarray, windows: bool) -> np.ndarray:
        # co-users paid once per run of shared servers where a class has few enough partners; the
        # controller's commits, and the other classes' wires and workers, per server
        extra = (interference(B, p.op_nbytes, flit, begin_lo, end_hi, windows, own, posted, runs.done, pre, post)
                 + run_charges(B, runs, p.op_nbytes, flit, begin_lo, end_hi, windows, seq_pre, seq_post))
        if cz is not None:
            # or per server without the causally apart co-users, where that is less (both bound the delay)
            b, e = (begin_lo, end_hi) if windows else (np.full(p.n_ops, -np.inf), np.full(p.n_ops, np.inf))
            np.minimum(extra, causal_interference(B, p.op_nbytes, flit, b, e, own, posted, cz, pre, post, order), out=extra)
        return extra

    def run(extra: np.ndarray):
        return _checked(p, schedule(UPPER, extra, share, head, iso, *args))

    if tight:
        hi = _least_fixpoint(p, iso, bound, run)
        if hi is not None:
            return hi
    extra = bound(begin_lo, False)
    hi = run(extra)
    for _ in range(passes):
        tighter = bound(_flow_end(p, hi[0], iso, extra, small), True)
        if np.array_equal(tighter, extra):
            break
        extra = tighter
        before = hi[0].a_finish
        hi = run(extra)
        if _bound_gain(before, hi[0].a_finish, p.agent_start_ns) < BOUND_GAIN:
            break
    return hi


def _least_fixpoint(p: Program, iso: np.ndarray, bound, run):
    """The upper schedule whose windows are its own (docs/fast_path.md §4, "The least fixpoint of the
    windows"): from no interference, ``extra <- bound(flow ends of run(extra))`` rises until it stops.
    Returns that schedule, or None when it has not stopped after ``FIXPOINT_ROUNDS`` rounds (a schedule
    below the fixpoint bounds nothing)."""
    extra = np.zeros(p.n_ops)
    for _ in range(FIXPOINT_ROUNDS):
        hi = run(extra)
        rise = bound(_flow_end(p, hi[0], iso, extra, True), True)
        if np.array_equal(rise, extra):
            return hi
        extra = rise
    return None


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


def run_bound(B: BoundTables) -> RunCoefs:
    """The run bound's coefficients of a Program's flow classes (``kbfast.fast.bounds.run_coefficients``),
    or none (every class charged per server) for a Program of more than ``RUN_MAX_FLOWS`` flows."""
    if len(B.ops) <= RUN_MAX_FLOWS:
        return run_coefficients(B, RUN_PARTNERS)
    n_cls = len(B.cls_ptr) - 1
    return RunCoefs(p_ptr=np.zeros(n_cls + 1, np.int64), p_cls=np.empty(0, np.int64), p_coef=np.empty((0, 4)),
                    p_span=np.empty((0, 4), np.int64), done=np.zeros(n_cls, np.bool_))


def _posted(p: Program) -> np.ndarray:
    """Per op: a PE read that waits for no PC commit (``hbm.read_response: accepted``)."""
    if p.tables.spec.hbm.read_response != "accepted":
        return np.zeros(p.n_ops, np.bool_)
    return (p.op_code == Op.DMA_READ) & (p.agent_kind[p.op_agent] == 0)


def _own_resources(args: tuple) -> tuple:
    """The kernel inputs with a PE's resources private to each of its agents, for the lower bound: agents
    sharing a FIFO resource race for it (which one goes first depends on the times), so a lower bound that
    keeps the sharing is no bound (a faster op of one agent may take the compute slot just before another's);
    without the sharing every op starts no later than in exact mode."""
    fabric, hbm, P, routes, sharing = args
    if len(P.a_pe) == len(np.unique(P.a_pe[P.a_pe >= 0])) + int(np.sum(P.a_pe < 0)):
        return args                    # one agent per PE: nothing is shared
    own = np.where(P.a_pe >= 0, np.arange(len(P.a_pe)), -1)
    return fabric, hbm, P._replace(a_pe=own, a_alone=own >= 0), routes, sharing


def _bound_gain(before: np.ndarray, after: np.ndarray, start: np.ndarray) -> float:
    """The largest improvement of an agent's upper bound in one refinement pass, relative to its span."""
    if len(before) == 0:
        return 0.0
    return float(np.max((before - after) / np.maximum(before - start, 1.0)))


def _per_edge(edge_group: np.ndarray, group_flag: np.ndarray) -> np.ndarray:
    """A per-group flag per edge (False on an edge in no group)."""
    out = np.zeros(len(edge_group), np.bool_)
    member = edge_group >= 0
    out[member] = group_flag[edge_group[member]]
    return out


def _own_penalty(p: Program, plan: Plan) -> np.ndarray:
    """Every own commit may pay the read/write switch penalty."""
    hbm = plan.lowered.hbm
    if hbm.switch_penalty_ns <= 0:
        return np.zeros(p.n_ops)
    units = -(-p.op_nbytes // hbm.flit_bytes)
    return np.where(plan.data_route >= 0, units * hbm.switch_penalty_ns, 0.0)


def _checked(p: Program, result):
    """A schedule in which an agent never finished is a deadlock: report it like exact mode."""
    S = result[0]
    if np.any(S.a_finish < 0):
        raise ReplayDeadlock(blocked_report(p, S))
    check_consumed(p, S)
    return result


def _flow_end(p: Program, S, iso: np.ndarray, extra: np.ndarray, arrival: bool) -> np.ndarray:
    """When each flow stops using the fabric in the upper schedule ``S`` (run with ``extra``): its op's end.
    A SEND's data outlives its op: with ``arrival``, until it arrives at the receiver (its begin, isolated
    latency and interference, as that schedule timed it); otherwise, more loosely and cheaply (the windows
    then settle in fewer passes), until the receiver's program ends."""
    end = S.op_end.copy()
    sends = np.flatnonzero(p.op_code == Op.SEND)
    if arrival:
        end[sends] = S.op_begin[sends] + iso[sends, 0] + extra[sends]
    else:
        end[sends] = S.a_finish[p.channels.dst[p.op_target[sends]]]
    return end


def _edge_table(p: Program, c: Compact, shared: np.ndarray, finish: np.ndarray,
                data_route: np.ndarray) -> pd.DataFrame:
    """Bytes per edge are conserved, so they are exact; busy_ns = bytes / bw."""
    t = p.tables
    nbytes = np.zeros(len(c.edges))
    for o in np.flatnonzero(data_route >= 0):
        r = data_route[o]
        np.add.at(nbytes, c.route_edges[p.route_ptr[r]:p.route_ptr[r + 1]], p.op_nbytes[o])
    bw = t.edge_bw_gbs[c.edges]
    busy = np.where(np.isinf(bw), 0.0, nbytes / bw)
    span = float(finish.max() - p.agent_start_ns.min()) if len(finish) else 0.0
    return pd.DataFrame({
        "edge": c.edges, "kind": [EdgeKind(int(k)).name.lower() for k in t.edge_kind[c.edges]],
        "src": [node_name(t, int(s)) for s in t.edge_src[c.edges]],
        "dst": [node_name(t, int(d)) for d in t.edge_dst[c.edges]], "bw_gbs": bw, "bytes": nbytes,
        "busy_ns": busy, "utilization": utilization(busy, span), "shared": shared,
    })


def _pc_table(p: Program, c: Compact, data_route: np.ndarray) -> pd.DataFrame:
    """Commits per PC follow from the addresses alone: flit i of a transfer lands on PC (pc0 + i) mod n_pcs."""
    t, hbm = p.tables, hbm_constants(p.tables.spec)
    npcs, flit, shift = hbm.n_pcs, hbm.flit_bytes, hbm.pc_shift
    commits = np.zeros((len(c.hbm_ctrls), npcs), np.int64)
    for o in np.flatnonzero((data_route >= 0) & (p.op_code != Op.SEND)):
        ctrl = int(_dma_controller(p, c, o))
        n = -(-int(p.op_nbytes[o]) // flit)
        pc0 = pc_of.py_func(int(p.op_addr[o]), shift, npcs)
        full, part = divmod(n, npcs)
        commits[ctrl] += full
        commits[ctrl, (pc0 + np.arange(part)) % npcs] += 1
    return pd.DataFrame({
        "controller": np.repeat([node_name(t, int(h)) for h in c.hbm_ctrls], npcs),
        "pc": np.tile(np.arange(npcs), len(c.hbm_ctrls)),
        "commits": commits.ravel(), "busy_ns": commits.ravel() * hbm.commit_ns,
    })
