"""Run the exact replay kernel on a Program and shape its outputs (design §5, §8)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.errors import KbfastError
from kbfast.exact import engine
from kbfast.ir import Program
from kbfast.sim import heap
from kbfast.sim.diagnostics import ReplayBudgetExceeded, ReplayDeadlock, blocked_report, check_consumed
from kbfast.sim.lowering import estimate_memory_bytes, heap_capacity, lower, vc_edges
from kbfast.sim.result import Result
from kbfast.topology.kinds import EdgeKind
from kbfast.topology.names import node_name

DEFAULT_MAX_EVENTS = 2_000_000_000
DEFAULT_MAX_MEMORY_BYTES = 8 << 30


@dataclass(frozen=True, kw_only=True)
class ReplayTimes(Result):
    """The times of one event replay (:class:`kbfast.sim.result.Result`; its bounds are its times) and
    how many events it took."""

    n_events: int


@dataclass(frozen=True, kw_only=True)
class ExactResult(ReplayTimes):
    """Per-op timestamps and per-resource statistics of one exact replay."""

    edges: pd.DataFrame      # one row per edge used: kind, src, dst, bytes, busy_ns, utilization, peak_queue_flits
    pcs: pd.DataFrame        # one row per (controller, pc): commits, busy_ns, max_backlog_ns


def run_exact(p: Program, max_events: int = DEFAULT_MAX_EVENTS,
              max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES) -> ExactResult:
    """Replay ``p`` at flit granularity; raise on deadlock, event budget or memory estimate.

    >>> from kbfast import Router, build_tables, load_system, pe2pe
    >>> t = build_tables(load_system())
    >>> r = run_exact(pe2pe(t, Router(t), "h1", 4096).program)
    >>> r.makespan_ns > 0 and r.n_events > 0
    True
    """
    need = estimate_memory_bytes(p)
    if need > max_memory_bytes:
        raise KbfastError(f"exact replay of {p.name!r} would need about {need / 2**30:.1f} GiB "
                          f"(limit {max_memory_bytes / 2**30:.1f} GiB); use the fast path, or fewer/smaller ops")
    t, spec = p.tables, p.tables.spec
    _check_limits(p)
    low = lower(p)
    c = low.compact
    flit = spec.fabric.flit_bytes
    vc_w = np.array([spec.pe.vc_weights.compute, spec.pe.vc_weights.comm], np.int64)
    t0 = time.perf_counter()
    status, n_events, S, e_bytes, e_busy, e_peak, pc_commits, pc_busy, pc_backlog = engine.replay(
        low.fabric, low.hbm, low.prog, low.routes, vc_edges(p, c.edges), vc_w, np.int64(max_events),
        np.int64(heap_capacity(p)))
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
    npcs = low.hbm.n_pcs
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
    """The kernel packs event fields into 64 bits (kbfast.sim.heap); refuse what does not fit."""
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


