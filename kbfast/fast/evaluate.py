"""Evaluate a Program on the fast path: point estimate, lower and upper bound, occupancy (design §6, §8)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.errors import KbfastError
from kbfast.exact.replay import Compact, ReplayDeadlock, blocked_report, compact
from kbfast.runtime import make_prog
from kbfast.fast.bounds import interference
from kbfast.fast.schedule import LOWER, POINT, UPPER, head_offsets, schedule
from kbfast.ir import Op, Program
from kbfast.topology.kinds import EdgeKind
from kbfast.topology.names import node_name

BOUND_PASSES = 4


@dataclass(frozen=True)
class FastResult:
    """Per-op times (point estimate) with per-op bounds, plus per-resource occupancy."""

    program: Program
    wall_s: float
    op_issue_ns: np.ndarray
    op_begin_ns: np.ndarray
    op_end_ns: np.ndarray
    op_end_lo_ns: np.ndarray
    op_end_hi_ns: np.ndarray
    agent_finish_ns: np.ndarray
    agent_finish_lo_ns: np.ndarray
    agent_finish_hi_ns: np.ndarray
    op_contended: np.ndarray     # bool per op: shared an edge with another active flow
    compact: Compact
    edge_contended: np.ndarray   # bool per compact edge
    data_route: np.ndarray       # per op: the route carrying its payload, or -1

    @property
    def edges(self) -> pd.DataFrame:
        """Per edge: bytes, busy_ns, utilization, contended (built on demand)."""
        return _edge_table(self.program, self.compact, self.edge_contended, self.agent_finish_ns, self.data_route)

    @property
    def pcs(self) -> pd.DataFrame:
        """Per (controller, pc): commits, busy_ns (built on demand)."""
        return _pc_table(self.program, self.compact, self.data_route)

    def _span(self, finish: np.ndarray) -> float:
        return float(finish.max() - self.program.agent_start_ns.min()) if len(finish) else 0.0

    @property
    def makespan_ns(self) -> float:
        return self._span(self.agent_finish_ns)

    @property
    def makespan_lo_ns(self) -> float:
        return self._span(self.agent_finish_lo_ns)

    @property
    def makespan_hi_ns(self) -> float:
        return self._span(self.agent_finish_hi_ns)

    @property
    def contention(self) -> bool:
        return bool(self.op_contended.any())

    def op_latency_ns(self, op: int) -> float:
        return float(self.op_end_ns[op] - self.op_issue_ns[op])


def _data_routes(p: Program) -> np.ndarray:
    """Per op, the route that carries its payload (the reverse route for a host read; the channel's
    route for an IPCQ SEND), or -1."""
    dma = (p.op_code == Op.DMA_WRITE) | (p.op_code == Op.DMA_READ)
    host_read = dma & (p.agent_kind[p.op_agent] == 1) & (p.op_code == Op.DMA_READ)
    out = np.where(host_read, p.op_rroute, np.where(dma, p.op_route, -1)).astype(np.int64)
    sends = p.op_code == Op.SEND
    out[sends] = p.channels.route[p.op_target[sends]]
    return out


def _resources(p: Program, c: Compact, data_route: np.ndarray, e_bw: np.ndarray, n_flit: np.ndarray,
               n_ovh: np.ndarray, e_dst: np.ndarray, commit: float, sw: float):
    """(op, resource id, work) entries: shared wires, flit-aware node workers, HBM controllers."""
    n_e, n_n = len(c.edges), len(c.nodes)
    ops, res, work = [], [], []
    flit = p.tables.spec.fabric.flit_bytes
    for o in np.flatnonzero(data_route >= 0):
        edges = c.route_edges[p.route_ptr[data_route[o]]:p.route_ptr[data_route[o] + 1]]
        nbytes = int(p.op_nbytes[o])
        units = -(-nbytes // flit)
        finite = np.isfinite(e_bw[edges])
        e_work = nbytes / e_bw[edges[finite]]
        nodes = e_dst[edges]
        workers = nodes[n_flit[nodes]]
        ops += [o] * (int(finite.sum()) + len(workers))
        res += list(edges[finite]) + list(n_e + workers)
        work += list(e_work) + list(n_ovh[workers])
        hbm = -1 if p.op_code[o] == Op.SEND else int(c.node_hbm[e_dst[c.route_edges[p.route_ptr[p.op_route[o] + 1] - 1]]])
        if hbm >= 0 and units > 0:
            ops.append(o)
            res.append(n_e + n_n + hbm)
            work.append(units * (commit + sw))
    return np.array(ops, np.int64), np.array(res, np.int64), np.array(work, np.float64)


def run_fast(p: Program) -> FastResult:
    """Evaluate ``p`` analytically: exact where flows never share a resource, bounded elsewhere."""
    t, spec = p.tables, p.tables.spec
    if spec.fabric.flit_bytes != spec.hbm.burst_bytes:
        raise KbfastError(f"the fast path needs fabric.flit_bytes == hbm.burst_bytes (got "
                          f"{spec.fabric.flit_bytes} and {spec.hbm.burst_bytes}); use exact mode for finer flits")
    t0 = time.perf_counter()
    c = compact(p)
    e_src = np.searchsorted(c.nodes, t.edge_src[c.edges]).astype(np.int32)
    e_dst = np.searchsorted(c.nodes, t.edge_dst[c.edges]).astype(np.int32)
    e_bw = t.edge_bw_gbs[c.edges]
    e_c = np.where(np.isinf(e_bw), 0.0, 1.0 / e_bw)
    n_ovh = t.node_overhead_ns[c.nodes]
    n_flit = t.node_flit_aware[c.nodes]
    hbm = spec.hbm
    commit = spec.fabric.flit_bytes / spec.pc_bw_gbs
    sw = hbm.switch_penalty_ns
    data_route = _data_routes(p)

    # Resources more than one op's payload uses: finite-bandwidth edges and overhead-paying
    # serial workers.  Only there can flows meet.
    n_e = len(c.edges)
    per_op = [np.unique(c.route_edges[p.route_ptr[r]:p.route_ptr[r + 1]]) if r >= 0 else np.zeros(0, np.int64)
              for r in data_route]
    users = np.zeros(n_e + len(c.nodes), np.int64)
    for edges in per_op:
        users[edges] += 1
        users[n_e + np.unique(e_dst[edges])] += 1
    shared_edge = (users[:n_e] > 1) & np.isfinite(e_bw)
    shared_node = (users[n_e:] > 1) & n_flit & (n_ovh > 0)
    sh_lists, w_lists = [], []
    for o, edges in enumerate(per_op):
        nodes = np.unique(e_dst[edges])
        nodes = nodes[shared_node[nodes]]
        sh_lists.append(np.concatenate([edges[shared_edge[edges]], n_e + nodes]))
        w_lists.append(np.concatenate([np.ones(int(shared_edge[edges].sum())),
                                       n_ovh[nodes] / max(int(p.op_nbytes[o]), 1)]))
    sh_ptr = np.concatenate([[0], np.cumsum([len(x) for x in sh_lists])]).astype(np.int64)
    sh_res = np.concatenate(sh_lists).astype(np.int64) if sh_lists else np.zeros(0, np.int64)
    sh_w = np.concatenate(w_lists) if w_lists else np.zeros(0)
    res_cap = np.concatenate([e_bw, np.ones(len(c.nodes))])
    share = np.diff(sh_ptr) > 0

    max_route = int(np.diff(p.route_ptr).max()) if len(p.route_ptr) > 1 else 1
    head = head_offsets(data_route, p.op_nbytes, p.route_ptr, c.route_edges, e_src, e_dst, e_bw,
                        t.edge_prop_ns[c.edges], n_ovh, n_flit, shared_edge, shared_node, spec.fabric.flit_bytes)
    args = (make_prog(p), p.op_addr, p.op_route.astype(np.int64), p.op_rroute.astype(np.int64), p.channels.route,
            p.route_ptr, c.route_edges, e_src, e_dst, e_c, e_bw, t.edge_prop_ns[c.edges], n_ovh, n_flit, c.node_hbm,
            spec.fabric.flit_bytes, hbm.burst_bytes, int(hbm.burst_bytes).bit_length() - 1, hbm.pcs_per_pe,
            commit, hbm.burst_bytes / spec.pc_bw_gbs, sw, sh_ptr, sh_res, max_route, sh_w, res_cap)
    zero = np.zeros(p.n_ops)
    lo = _checked(p, schedule(LOWER, zero, share, head, *args))
    point = _checked(p, schedule(POINT, zero, share, head, *args))

    ops, res, work = _resources(p, c, data_route, e_bw, n_flit, n_ovh, e_dst, commit, sw)
    order = np.lexsort((ops, res))
    n_res = len(c.edges) + len(c.nodes) + len(c.hbm_ctrls)
    users_ptr = np.concatenate([[0], np.cumsum(np.bincount(res, minlength=n_res))]).astype(np.int64)
    user_pairs = np.stack([ops[order], order]).T.astype(np.int64) if len(ops) else np.zeros((0, 2), np.int64)
    res_order = np.argsort(ops, kind="stable")
    res_ptr = np.concatenate([[0], np.cumsum(np.bincount(ops, minlength=p.n_ops))]).astype(np.int64)
    own = np.zeros(p.n_ops)
    if sw > 0:
        units = -(-p.op_nbytes // spec.fabric.flit_bytes)
        own = np.where(data_route >= 0, units * sw, 0.0)
    begin_lo = lo[0].op_begin
    extra = interference(res_ptr, res[res_order], work, users_ptr, user_pairs, begin_lo, begin_lo, False, own)
    hi = _checked(p, schedule(UPPER, extra, share, head, *args))
    for _ in range(BOUND_PASSES):
        tighter = interference(res_ptr, res[res_order], work, users_ptr, user_pairs, begin_lo, _flow_end(p, hi[0]),
                               True, own)
        if np.array_equal(tighter, extra):
            break
        extra = tighter
        hi = _checked(p, schedule(UPPER, extra, share, head, *args))
    wall = time.perf_counter() - t0
    S = point[0]
    # Both bounds are valid for exact mode, so a point estimate outside them is clamped in.
    op_end = np.clip(S.op_end, lo[0].op_end, hi[0].op_end)
    finish = np.clip(S.a_finish, lo[0].a_finish, hi[0].a_finish)
    return FastResult(program=p, wall_s=wall, op_issue_ns=S.op_issue, op_begin_ns=S.op_begin, op_end_ns=op_end,
                      op_end_lo_ns=lo[0].op_end, op_end_hi_ns=hi[0].op_end, agent_finish_ns=finish,
                      agent_finish_lo_ns=lo[0].a_finish, agent_finish_hi_ns=hi[0].a_finish, op_contended=point[1],
                      compact=c, edge_contended=point[2], data_route=data_route)


def _checked(p: Program, result):
    """A schedule in which an agent never finished is a deadlock: report it like exact mode."""
    S = result[0]
    if np.any(S.a_finish < 0):
        raise ReplayDeadlock(blocked_report(p, S))
    return result


def _flow_end(p: Program, S) -> np.ndarray:
    """When each flow stops using the fabric: its op's end (a SEND's data: when its receiver's recv could start)."""
    end = S.op_end.copy()
    sends = np.flatnonzero(p.op_code == Op.SEND)
    if len(sends):
        # A SEND returns at once; its data is in flight until it is visible, at the latest when
        # the matching RECV ends.  Bound it by the end of the receiver's program.
        end[sends] = S.a_finish[p.channels.dst[p.op_target[sends]]]
    return end


def _edge_table(p: Program, c: Compact, contended: np.ndarray, finish: np.ndarray,
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
        "busy_ns": busy, "utilization": busy / span if span > 0 else 0.0, "contended": contended,
    })


def _pc_table(p: Program, c: Compact, data_route: np.ndarray) -> pd.DataFrame:
    """Commits per PC follow from the addresses alone: flit i of a transfer lands on PC (pc0 + i) mod n_pcs."""
    t, spec = p.tables, p.tables.spec
    npcs, flit = spec.hbm.pcs_per_pe, spec.fabric.flit_bytes
    commits = np.zeros((len(c.hbm_ctrls), npcs), np.int64)
    shift = int(spec.hbm.burst_bytes).bit_length() - 1
    for o in np.flatnonzero((data_route >= 0) & (p.op_code != Op.SEND)):
        ctrl = int(c.node_hbm[np.searchsorted(c.nodes, t.edge_dst[c.edges[
            c.route_edges[p.route_ptr[p.op_route[o] + 1] - 1]]])])
        n = -(-int(p.op_nbytes[o]) // flit)
        pc0 = (int(p.op_addr[o]) >> shift) % npcs
        full, part = divmod(n, npcs)
        commits[ctrl] += full
        commits[ctrl, (pc0 + np.arange(part)) % npcs] += 1
    return pd.DataFrame({
        "controller": np.repeat([node_name(t, int(h)) for h in c.hbm_ctrls], npcs),
        "pc": np.tile(np.arange(npcs), len(c.hbm_ctrls)),
        "commits": commits.ravel(), "busy_ns": commits.ravel() * (flit / spec.pc_bw_gbs),
    })
