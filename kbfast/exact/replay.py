"""Run the exact replay kernel on a Program and shape its outputs (design §5, §8)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.errors import KbfastError
from kbfast import runtime
from kbfast.exact import engine, heap
from kbfast.runtime import make_prog
from kbfast.ir import Op, Program
from kbfast.topology.kinds import EdgeKind, NodeKind
from kbfast.topology.names import node_name

DEFAULT_MAX_EVENTS = 2_000_000_000
DEFAULT_MAX_MEMORY_BYTES = 8 << 30


class ReplayDeadlock(KbfastError):
    """The event queue emptied while agents were still blocked (``IpcqDeadlock`` with IPCQ channels)."""


class ReplayBudgetExceeded(KbfastError):
    """The replay used more events than its budget (a runaway or far too large workload)."""


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


def heap_capacity(p: Program) -> int:
    """Bound on pending events: one per flit of every transaction, plus agent and control events."""
    flit = p.tables.spec.fabric.flit_bytes
    return int(np.sum((p.op_nbytes + flit - 1) // flit)) + 4 * (p.n_ops + p.n_agents) + 64


def estimate_memory_bytes(p: Program) -> int:
    """Upper estimate of the replay's memory: per-op state plus one pending event per flit in flight."""
    flits = int(np.sum((p.op_nbytes + p.tables.spec.fabric.flit_bytes - 1) // p.tables.spec.fabric.flit_bytes))
    # 80 B per queue slot (kbfast.exact.heap: 8 arrays of 8 B, two free lists)
    return 200 * p.n_ops + 64 * len(p.route_edges) + 80 * (flits + p.n_ops + p.n_agents)


@dataclass(frozen=True)
class ReplayTimes:
    """Per-op timestamps of one replay (issue, begin = resources acquired, end) and agent finish times."""

    program: Program
    n_events: int
    wall_s: float
    agent_finish_ns: np.ndarray
    op_issue_ns: np.ndarray
    op_begin_ns: np.ndarray
    op_end_ns: np.ndarray


@dataclass(frozen=True)
class ExactResult(ReplayTimes):
    """Per-op timestamps and per-resource statistics of one exact replay."""

    edges: pd.DataFrame      # one row per edge used: kind, src, dst, bytes, busy_ns, utilization, peak_queue_flits
    pcs: pd.DataFrame        # one row per (controller, pc): commits, busy_ns, max_backlog_ns

    @property
    def makespan_ns(self) -> float:
        """Time from the earliest agent start to the last agent finish."""
        return float(self.agent_finish_ns.max() - self.program.agent_start_ns.min())

    def op_latency_ns(self, op: int) -> float:
        """Issue to completion of one op."""
        return float(self.op_end_ns[op] - self.op_issue_ns[op])

    def ops(self) -> pd.DataFrame:
        p = self.program
        return pd.DataFrame({
            "agent": [p.agent_name(a) for a in p.op_agent],
            "op": [Op(int(c)).name for c in p.op_code],
            "nbytes": p.op_nbytes, "issue_ns": self.op_issue_ns, "begin_ns": self.op_begin_ns,
            "end_ns": self.op_end_ns,
        })


def run_exact(p: Program, max_events: int = DEFAULT_MAX_EVENTS,
              max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES) -> ExactResult:
    """Replay ``p`` at flit granularity; raise on deadlock, event budget or memory estimate."""
    need = estimate_memory_bytes(p)
    if need > max_memory_bytes:
        raise KbfastError(f"exact replay of {p.name!r} would need about {need / 2**30:.1f} GiB "
                          f"(limit {max_memory_bytes / 2**30:.1f} GiB); use the fast path, or fewer/smaller ops")
    t, spec = p.tables, p.tables.spec
    _check_limits(p)
    c = compact(p)
    hbm = spec.hbm
    flit = spec.fabric.flit_bytes
    pc_bw = spec.pc_bw_gbs
    args = (
        t.node_overhead_ns[c.nodes], t.node_flit_aware[c.nodes], c.node_hbm,
        c.e_src, c.e_dst, t.edge_bw_gbs[c.edges], t.edge_prop_ns[c.edges], p.route_ptr, c.route_edges,
        hbm.pcs_per_pe, int(hbm.burst_bytes).bit_length() - 1, hbm.burst_bytes, flit,
        flit / pc_bw, hbm.burst_bytes / pc_bw, hbm.switch_penalty_ns,
        make_prog(p), p.op_addr, p.op_route.astype(np.int64), p.op_rroute.astype(np.int64),
        p.channels.route, vc_edges(p, c.edges),
        np.array([spec.pe.vc_weights.compute, spec.pe.vc_weights.comm], np.int64),
        np.int64(max_events), np.int64(heap_capacity(p)),
    )
    t0 = time.perf_counter()
    status, n_events, S, e_bytes, e_busy, e_peak, pc_commits, pc_busy, pc_backlog = engine.replay(*args)
    wall = time.perf_counter() - t0
    if status == engine.BUDGET:
        raise ReplayBudgetExceeded(f"exact replay of {p.name!r} exceeded its budget of {max_events:,} events; "
                                   "raise max_events if the workload really is this large")
    if status == engine.DEADLOCK:
        raise ReplayDeadlock(blocked_report(p, S))
    check_consumed(p, S)
    a_finish = S.a_finish
    makespan = float(a_finish.max() - p.agent_start_ns.min()) if len(a_finish) else 0.0
    edges = pd.DataFrame({
        "edge": c.edges,
        "kind": [EdgeKind(int(k)).name.lower() for k in t.edge_kind[c.edges]],
        "src": [node_name(t, int(s)) for s in t.edge_src[c.edges]],
        "dst": [node_name(t, int(d)) for d in t.edge_dst[c.edges]],
        "bw_gbs": t.edge_bw_gbs[c.edges],
        "bytes": e_bytes, "busy_ns": e_busy,
        "utilization": e_busy / makespan if makespan > 0 else 0.0,
        "peak_queue_flits": e_peak / flit,
    })
    npcs = hbm.pcs_per_pe
    n_ctrl = len(c.hbm_ctrls)
    pcs = pd.DataFrame({
        "controller": np.repeat([node_name(t, int(h)) for h in c.hbm_ctrls], npcs),
        "pc": np.tile(np.arange(npcs), n_ctrl),
        "commits": pc_commits[:n_ctrl * npcs], "busy_ns": pc_busy[:n_ctrl * npcs],
        "max_backlog_ns": pc_backlog[:n_ctrl * npcs],
    })
    return ExactResult(program=p, n_events=int(n_events), wall_s=wall, agent_finish_ns=a_finish,
                       op_issue_ns=S.op_issue, op_begin_ns=S.op_begin, op_end_ns=S.op_end, edges=edges, pcs=pcs)


def _check_limits(p: Program) -> None:
    """The kernel packs event fields into 64 bits (kbfast.exact.heap); refuse what does not fit."""
    flit = p.tables.spec.fabric.flit_bytes
    max_flits = int(((p.op_nbytes + flit - 1) // flit).max()) if p.n_ops else 0
    longest = int(np.diff(p.route_ptr).max()) if len(p.route_ptr) > 1 else 0
    if max_flits > heap.MAX_B + 1:
        raise KbfastError(f"exact replay supports at most {heap.MAX_B + 1:,} flits per transfer "
                          f"({(heap.MAX_B + 1) * flit / 2**20:.0f} MiB); {p.name!r} has {max_flits:,}")
    if 2 * p.n_ops + 1 > heap.MAX_A or p.n_agents > heap.MAX_A:
        raise KbfastError(f"exact replay supports at most {heap.MAX_A // 2:,} ops; {p.name!r} has {p.n_ops:,}")
    if longest > heap.MAX_C:
        raise KbfastError(f"exact replay supports routes of at most {heap.MAX_C} edges; {p.name!r} has {longest}")


class IpcqUnconsumed(KbfastError):
    """I1 (spec_ccl §3): a message was sent and never received."""


def check_consumed(p: Program, S) -> None:
    """Every IPCQ message must be received exactly once (invariant I1)."""
    left = np.flatnonzero(S.q_head > S.q_tail)
    if len(left):
        raise IpcqUnconsumed(f"I1 violated in {p.name!r}: {int((S.q_head - S.q_tail)[left].sum())} IPCQ "
                             f"message(s) were sent and never received (every send needs one recv)\npointers:\n"
                             + runtime.pointer_dump(p, S))


def blocked_report(p: Program, S) -> str:
    """Name every blocked agent and what it waits for, then dump the IPCQ pointers (spec_ccl §3 F3)."""
    kind = "IPCQ deadlock" if len(p.channels) else "deadlock"
    lines = [f"{kind} in {p.name!r}: the event queue emptied while agents were blocked"]
    for a in np.flatnonzero(S.a_finish < 0):
        block, arg = int(S.a_block[a]), int(S.a_arg[a])
        if block == runtime.BLK_OP:
            what = f"op {arg} ({Op(int(p.op_code[arg])).name}), which never completed"
        elif block == runtime.BLK_ALL:
            what = "WAIT for all outstanding ops"
        elif block == runtime.BLK_SEND:
            what = f"SEND on ch{arg}, whose ring stays full (no credit comes back)"
        elif block == runtime.BLK_ANY:
            what = "RECV on any channel, where nothing arrives"
        else:
            what = "an op that never ran"
        lines.append(f"  {p.agent_name(int(a))}: blocked on {what}")
    if len(p.channels):
        lines.append("pointers:")
        lines.append(runtime.pointer_dump(p, S))
    return "\n".join(lines)
