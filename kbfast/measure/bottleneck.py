"""What bounds a result: the busiest resources and the critical path (docs/bottlenecks.md).

Resources.  A link's busy time is the bytes it carries over its bandwidth, ``busy = bytes / bw``; bytes are
conserved, so it is the same in both modes and follows from the Program alone.  A flit-aware node's serial
worker spends its overhead on every transfer that enters it, ``busy = transfers x overhead`` (what binds
small messages).  An HBM pseudo-channel's busy time is its commits times the commit time.  Utilisation =
busy / the result's span (kbfast.sim.result.utilization): the latency from the launch for a run or a sweep
point, the makespan for a probe row; a result's fields, its printed tables, its per-link table
(:func:`link_table`: --links files, sweeps' links tables) and its heat map all use the same span.  ``flows`` counts
the transfers whose payload crosses the resource.  The links and nodes are ranked by busy time; the first
is the *bottleneck*.

Critical path.  Walk back from the last agent to finish.  On an agent, the op that ended last before the
current time is on the path; its time splits into

* ``compute``: COMPUTE, MATH, GEMM, FETCH and STORE;
* ``hbm``: a DMA's HBM side at zero load: the controller's overhead and the PC commit, and the payload's
  streaming when the last stretch of its route streams at an HBM link's rate (kbfast.measure.metrics.breakdown,
  ``streams_at_hbm_rate``);
* ``fabric_transfer``: an IPCQ message's zero-load transfer, from the SEND to its arrival, and the rest of
  a DMA's zero-load time: its route's overheads, first flit and propagation, and streaming through a
  fabric link slower than the HBM's;
* ``fabric_wait``: a DMA's wait for its channel and its time beyond zero load, and an IPCQ message's time
  beyond its zero-load transfer (contention, credits in flight, slot tier costs);
* ``ipcq_backpressure``: a SEND's wait for a free ring slot (issue to begin);
* ``ipcq_slot``: posting a message and reading it from its ring slot once it arrived (the slot tier);
* ``launch``: from the launch barrier to the agent's first op;
* ``other``: waits for asynchronous ops and gaps between ops.

A RECV that waited for its message moves the walk to the sender: the k-th SEND on a channel carries the
k-th RECV's message (channels are FIFO), and the time from that SEND to the arrival is the transfer.
The parts sum to the latency.

What bounds it (:func:`bound_fields`).  A resource bounds a result only when it is busy enough to matter, at
least ``BUSY_BOUND`` of the span (``bandwidth``); otherwise the largest part of the critical path does, or,
where no per-op times exist (a batched fast sweep), the time lost to sharing (``contention``) or the
contention-free chain of dependent steps (``zero_load_chain``), whichever is the larger share.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kbfast.sim.lowering import data_routes
from kbfast.ir import AgentKind, Op, Program
from kbfast.measure.metrics import breakdown, streams_at_hbm_rate
from kbfast.measure.rows import BUSY_BOUND
from kbfast.sim.lowering import hbm_constants
from kbfast.sim.result import Result, utilization
from kbfast.topology.kinds import EdgeKind, NodeKind
from kbfast.topology.names import node_name

CATEGORIES = ("compute", "hbm", "fabric_transfer", "fabric_wait", "ipcq_backpressure", "ipcq_slot", "launch",
              "other")
COMPUTE_OPS = (Op.COMPUTE, Op.MATH, Op.GEMM, Op.FETCH, Op.STORE)
TOP = 5
_EPS = 1e-9
_CRITICAL_KEYS = tuple((k, f"critical_path_{k}_ns") for k in CATEGORIES)


def link_load_arrays(p: Program) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(edge ids, bytes, flows) of every link that carries payload, by edge id."""
    route = data_routes(p)
    ops = np.flatnonzero((route >= 0) & (p.op_nbytes > 0))
    if len(ops) == 0:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    lo, hi = p.route_ptr[route[ops]], p.route_ptr[route[ops] + 1]
    edges = np.concatenate([p.route_edges[a:b] for a, b in zip(lo.tolist(), hi.tolist())]).astype(np.int64)
    used, inverse = np.unique(edges, return_inverse=True)
    load = np.bincount(inverse, weights=np.repeat(p.op_nbytes[ops], hi - lo).astype(np.float64),
                       minlength=len(used))
    return used, load, np.bincount(inverse, minlength=len(used))


def busy_ns(t, edges: np.ndarray, load: np.ndarray) -> np.ndarray:
    """bytes / bw per link (0 on an infinitely fast one)."""
    bw = t.edge_bw_gbs[edges]
    return np.where(np.isinf(bw), 0.0, load / bw)


def link_label(t, e: int) -> str:
    """``sip0.cube1 r0c0 -> ucie-W.conn0``: a link named by its ends, the common SIP, cube or IO chiplet said
    once."""
    src, dst = node_name(t, int(t.edge_src[e])), node_name(t, int(t.edge_dst[e]))
    a, b = src.split("."), dst.split(".")
    k = 0
    while k < min(len(a), len(b)) - 1 and a[k] == b[k] and a[k].startswith(("sip", "cube", "io")):
        k += 1
    return f"{'.'.join(a[:k])} {'.'.join(a[k:])} -> {'.'.join(b[k:])}" if k else f"{src} -> {dst}"


def _sip_set(sips: list[int]) -> str:
    """``sip3``, ``sip0-5`` or ``sip0,2,4``."""
    if len(sips) == 1:
        return f"sip{sips[0]}"
    if sips == list(range(sips[0], sips[-1] + 1)):
        return f"sip{sips[0]}-{sips[-1]}"
    return "sip" + ",".join(map(str, sips))


def node_load_arrays(p: Program) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node ids, busy ns, transfers) of every flit-aware node with an overhead that a payload enters: its
    serial worker spends its overhead on each transfer's first flit (docs/exact_mode.md)."""
    t = p.tables
    route = data_routes(p)
    ops = np.flatnonzero((route >= 0) & (p.op_nbytes > 0))
    if len(ops) == 0:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    lo, hi = p.route_ptr[route[ops]], p.route_ptr[route[ops] + 1]
    nodes = t.edge_dst[np.concatenate([p.route_edges[a:b] for a, b in zip(lo.tolist(), hi.tolist())])]
    nodes = nodes[t.node_flit_aware[nodes] & (t.node_overhead_ns[nodes] > 0)].astype(np.int64)
    used, n = np.unique(nodes, return_counts=True)
    return used, n * t.node_overhead_ns[used], n


def _resources(t, links, nodes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Links then nodes as (flows, busy ns, sort key): links are (edges, busy, flows), nodes (nodes, busy,
    transfers); the key puts a link before a node on a tie, then the lower id."""
    (e, e_busy, e_flows), (v, v_busy, v_n) = links, nodes
    key = np.concatenate([e, t.n_edges + v]).astype(np.int64)
    return np.concatenate([e_flows, v_n]), np.concatenate([e_busy, v_busy]), key


def _name(t, key: int) -> tuple[str, str]:
    """(label, kind) of the resource with sort key ``key`` (a link's edge id, or n_edges + a node id)."""
    if key < t.n_edges:
        return link_label(t, key), EdgeKind(int(t.edge_kind[key])).name.lower()
    v = key - t.n_edges
    return node_name(t, v), NodeKind(int(t.node_kind[v])).name.lower()


def top_resources(p: Program, span_ns: float, pcs: pd.DataFrame | None = None, n: int = TOP) -> pd.DataFrame:
    """The ``n`` busiest links, node workers and HBM pseudo-channels: resource, kind, flows (transfers
    through it), busy_ns, utilization (busy / ``span_ns``), busiest first (ties: links, nodes, PCs, then
    by id or name).  The same resource of several SIPs with the same load is one row
    (``sip0-5.cube10 r0c0 -> ucie-N.conn0``)."""
    t = p.tables
    edges, load, flows = link_load_arrays(p)
    flows, busy, key = _resources(t, (edges, busy_ns(t, edges, load), flows), node_load_arrays(p))
    groups: dict[tuple, list[int]] = {}
    for i in np.lexsort((key, -busy)).tolist():
        label, kind = _name(t, int(key[i]))
        sip, _, local = label.partition(".") if label.startswith("sip") else ("", "", label)
        k = (local, kind, int(flows[i]), float(busy[i]))
        if k not in groups and len(groups) == n:
            break
        groups.setdefault(k, []).append(int(sip[3:]) if sip else -1)
    rows = pd.DataFrame({
        "resource": [local if s == [-1] else f"{_sip_set(s)}.{local}" for (local, *_), s in groups.items()],
        "kind": [k for _, k, _, _ in groups], "flows": [float(f) for _, _, f, _ in groups],
        "busy_ns": [b for *_, b in groups]})
    if pcs is not None and len(pcs):
        used = pcs[pcs["commits"] > 0].sort_values(["busy_ns", "controller", "pc"], ascending=[False, True, True],
                                                   kind="mergesort").head(n)
        rows = pd.concat([rows, pd.DataFrame({
            "resource": used["controller"] + ".pc" + used["pc"].astype(str), "kind": "hbm_pc",
            "flows": np.nan, "busy_ns": used["busy_ns"].astype(float)})], ignore_index=True)
        rows = rows.iloc[np.argsort(-rows["busy_ns"].to_numpy(), kind="stable")]
    rows["utilization"] = utilization(rows["busy_ns"].to_numpy(), span_ns)
    return rows.head(n).reset_index(drop=True)


def link_table(edges: pd.DataFrame, span_ns: float) -> pd.DataFrame:
    """A result's per-link table (``Result.edges``) with its ``utilization`` over ``span_ns``, the span of the
    result's own fields: what --links writes, a sweep's links table holds and the heat map draws."""
    return edges.assign(utilization=utilization(edges["busy_ns"].to_numpy(), span_ns))


_NOTHING_MOVED = {"bottleneck_resource": None, "bottleneck_kind": None, "bottleneck_flows": np.nan,
                  "bottleneck_busy_ns": 0.0, "bottleneck_utilization": 0.0}


def _busiest(name: tuple[str, str], flows: float, busy: float, span_ns: float) -> dict:
    """The ``bottleneck_*`` fields of the resource ``name`` (label, kind)."""
    return {"bottleneck_resource": name[0], "bottleneck_kind": name[1], "bottleneck_flows": float(flows),
            "bottleneck_busy_ns": float(busy), "bottleneck_utilization": utilization(busy, span_ns)}


def bottleneck_fields(t, links: tuple, nodes: tuple, span_ns: float) -> dict:
    """The busiest link or node worker as result fields ``bottleneck_*``: resource, kind, flows (transfers
    through it), busy_ns, utilization (busy / ``span_ns``); a link before a node, then the lowest id, on a
    tie; empty when nothing moved.  ``links`` = (edges, busy, flows), ``nodes`` = (nodes, busy, transfers)."""
    flows, busy, key = _resources(t, links, nodes)
    if len(busy) == 0 or busy.max() <= 0:
        return dict(_NOTHING_MOVED)
    i = int(np.lexsort((key, -busy))[0])
    # only the busiest is named: a sweep asks this of every point
    return _busiest(_name(t, int(key[i])), flows[i], busy[i], span_ns)


def scaled_bottlenecks(t, links: tuple, nodes: tuple, scales: np.ndarray, spans: np.ndarray) -> list[dict]:
    """:func:`bottleneck_fields` for each (scale, span): the links' busy times times ``scales[i]`` (> 0), the
    nodes' as they are, bit for bit as ``bottleneck_fields(t, (edges, busy * scales[i], flows), nodes,
    spans[i])`` gives them.  A common positive scale reorders only links whose busy times agree to rounding,
    so per point only the links within 1e-9 of the busiest are compared (a batch of one system's sizes:
    no Python per point but its row)."""
    (e, busy, flows), (v, v_busy, v_n) = links, nodes
    n = len(scales)
    if len(e):
        top = busy.max()
        cand = np.flatnonzero(busy >= top * (1.0 - 1e-9)) if top > 0 else np.argsort(e)[:1]
        cand = cand[np.argsort(e[cand], kind="stable")]          # the lowest id first on a tie
        scaled = busy[cand][None, :] * np.asarray(scales, np.float64)[:, None]
        pick = np.argmax(scaled, axis=1)
        link_busy, link = scaled[np.arange(n), pick], cand[pick]
    else:
        link_busy, link = np.full(n, -np.inf), np.zeros(n, np.int64)
    node = int(np.lexsort((v, -v_busy))[0]) if len(v) else -1
    node_busy = float(v_busy[node]) if node >= 0 else -np.inf
    names: dict[int, tuple[str, str]] = {}
    out = []
    for i in range(n):
        lb = float(link_busy[i])
        if max(lb, node_busy) <= 0:
            out.append(dict(_NOTHING_MOVED))
            continue
        key, f, busiest = ((int(e[link[i]]), flows[link[i]], lb) if lb >= node_busy else
                           (t.n_edges + int(v[node]), v_n[node], node_busy))
        if key not in names:
            names[key] = _name(t, key)
        out.append(_busiest(names[key], f, busiest, float(spans[i])))
    return out


def bottleneck(p: Program, span_ns: float) -> dict:
    """:func:`bottleneck_fields` of ``p``."""
    edges, load, flows = link_load_arrays(p)
    return bottleneck_fields(p.tables, (edges, busy_ns(p.tables, edges, load), flows), node_load_arrays(p), span_ns)


def _zero_load(p: Program, o: int, hbm_c) -> tuple[float, float]:
    """(HBM, fabric transfer) of an op's transfer alone on an idle system (kbfast.measure.metrics.breakdown without
    its residual; ``hbm_c``: the Program's ``hbm_constants``).  HBM: the controller's overhead and the PC
    commit (a PE read whose response leaves when the controller took its last flit waits for none), and the
    payload's streaming when its last stretch streams at an HBM link's rate (``streams_at_hbm_rate``);
    fabric transfer: the rest (the route's overheads, first flit and propagation, and streaming through a
    slower fabric link).  An IPCQ message is all fabric transfer."""
    t = p.tables
    if p.op_code[o] == Op.SEND:
        fwd, rev, commit = p.route(int(p.channels.route[p.op_target[o]])), None, None
    else:
        data = int(data_routes(p)[o])
        other = int(p.op_rroute[o]) if data == int(p.op_route[o]) else int(p.op_route[o])
        pe_read = p.op_code[o] == Op.DMA_READ and p.agent_kind[p.op_agent[o]] == AgentKind.PE
        commit = None if pe_read and hbm_c.read_accept else hbm_c.commit_ns
        fwd, rev = p.route(data), (p.route(other) if other >= 0 else None)
    if len(fwd) == 0:
        return 0.0, 0.0
    parts = breakdown(t, fwd, rev, int(p.op_nbytes[o]), 0.0, 0.0, commit)
    hbm = parts["hbm_ctrl"] + (parts["wire_transfer"] if streams_at_hbm_rate(t, fwd) else 0.0)
    return hbm, -parts["contention"] - hbm


def _send_of(p: Program) -> dict[int, int]:
    """RECV op -> the SEND that carries its message: the k-th SEND and RECV on a channel pair up."""
    out: dict[int, int] = {}
    order = p.agent_ops
    code, target = p.op_code[order], p.op_target[order]
    for ch in np.unique(target[code == Op.RECV]).tolist():
        sends = order[(code == Op.SEND) & (target == ch)]
        recvs = order[(code == Op.RECV) & (target == ch)]
        out.update(zip(recvs.tolist(), sends.tolist()))
    return out


def critical_path_by_category(p: Program, res: Result, launch_ns: float) -> dict[str, float]:
    """The critical path from ``launch_ns`` to the last agent's finish, by category (CATEGORIES), ns."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    if p.n_ops == 0 or len(res.agent_finish_ns) == 0:
        return out
    hbm_c = hbm_constants(p.tables.spec)
    send_of = _send_of(p)
    agent_of = p.op_agent
    issue, begin, end = res.op_issue_ns, res.op_begin_ns, res.op_end_ns
    a = int(np.argmax(res.agent_finish_ns))
    t = float(res.agent_finish_ns[a])
    done = np.zeros(p.n_ops, bool)
    for _ in range(4 * p.n_ops + 4):
        ops = p.ops_of(a)
        cand = ops[(~done[ops]) & (end[ops] <= t + _EPS) & (p.op_code[ops] != Op.START)]
        if len(cand) == 0:
            break
        o = int(cand[np.argmax(end[cand])])          # the last op to end: the latest in program order on a tie
        o = int(cand[end[cand] >= end[o] - _EPS][-1])
        done[o] = True
        out["other"] += max(t - float(end[o]), 0.0)
        t = min(t, float(end[o]))
        code = int(p.op_code[o])
        if code == Op.WAIT:
            continue                                 # the awaited op ends at the same time: it is next
        if code == Op.RECV and o in send_of and begin[o] > issue[o] + _EPS:
            s = send_of[o]
            out["ipcq_slot"] += t - float(begin[o])  # the slot read after the arrival
            took = float(begin[o] - end[s])
            zero = min(sum(_zero_load(p, s, hbm_c)), max(took, 0.0))
            out["fabric_transfer"] += zero
            out["fabric_wait"] += max(took - zero, 0.0)
            done[s] = True
            out["ipcq_slot"] += float(end[s] - begin[s])  # posting the message
            out["ipcq_backpressure"] += float(begin[s] - issue[s])
            a, t = int(agent_of[s]), float(issue[s])
            continue
        span = t - float(issue[o])
        if code in COMPUTE_OPS:
            out["compute"] += span
        elif code in (Op.DMA_READ, Op.DMA_WRITE):
            work = max(t - float(begin[o]), 0.0)
            hbm, fabric = _zero_load(p, o, hbm_c)
            hbm = min(hbm, work)                     # the HBM side first; the route's time is the rest
            fabric = min(hbm + fabric, work) - hbm
            out["hbm"] += hbm
            out["fabric_transfer"] += fabric
            out["fabric_wait"] += span - hbm - fabric
        elif code == Op.SEND:
            out["ipcq_backpressure"] += float(begin[o] - issue[o])
            out["ipcq_slot"] += t - float(begin[o])
        elif code == Op.RECV:
            out["ipcq_slot"] += span
        else:
            out["other"] += span
        t = float(issue[o])
    out["launch"] += max(t - launch_ns, 0.0)
    return out


def critical_fields(parts: dict[str, float]) -> dict[str, float]:
    """``critical_path_<category>_ns`` result fields."""
    return {f"critical_path_{k}_ns": v for k, v in parts.items()}


def bound_fields(row: dict) -> dict:
    """What bounds a result, from its fields (``latency_ns``, ``bottleneck_utilization``, ``contention_ns``,
    ``critical_path_<part>_ns``): ``bound_by`` and ``bound_share`` (0..1).

    * ``bandwidth``: the bottleneck resource is busy at least ``BUSY_BOUND`` of the span; share = its
      utilisation (``bottleneck_resource`` names it);
    * else, with a critical path, its largest part (``ipcq_slot``, ``fabric_transfer``, ``fabric_wait``, ...);
      share = that part's share of the path;
    * else (no per-op times: a batched fast point) ``contention`` when sharing costs at least half the
      latency, or else ``zero_load_chain`` (hops, transfers, slot reads and compute, one after another);
      share = ``contention_ns`` or the rest, over the latency;
    * None when nothing says (no lower bound, no critical path)."""
    util = row.get("bottleneck_utilization")
    if util is not None and util >= BUSY_BOUND:      # NaN compares False
        return {"bound_by": "bandwidth", "bound_share": float(util)}
    parts = {k: v for k, key in _CRITICAL_KEYS if (v := row.get(key)) is not None and math.isfinite(v)}
    total = sum(parts.values())
    if total > 0:
        top = max(parts, key=parts.get)              # CATEGORIES order on a tie
        return {"bound_by": top, "bound_share": parts[top] / total}
    lat, lost = row.get("latency_ns"), row.get("contention_ns")
    if lat is None or lost is None or not (math.isfinite(lat) and math.isfinite(lost)) or lat <= 0:
        return {"bound_by": None, "bound_share": np.nan}
    share = min(max(lost / lat, 0.0), 1.0)
    return {"bound_by": "contention", "bound_share": share} if share >= 0.5 else \
        {"bound_by": "zero_load_chain", "bound_share": 1.0 - share}
