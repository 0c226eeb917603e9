"""Run the exact replay kernel on a Program and shape its outputs (design §5, §8)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from kbfast.config import budget
from kbfast.errors import KbfastError
from kbfast.exact import engine
from kbfast.ir import Program
from kbfast.sim import heap
from kbfast.sim.diagnostics import ReplayBudgetExceeded, ReplayDeadlock, blocked_report, check_consumed
from kbfast.sim.lowering import (estimate_memory_bytes, heap_capacity, lower, replay_events_estimate,
                                 replay_events_floor, vc_edges)
from kbfast.sim.result import Result, utilization
from kbfast.topology.kinds import EdgeKind
from kbfast.topology.names import node_name

DEFAULT_MAX_EVENTS = 2_000_000_000
ANNOUNCE_S = 5.0          # a replay estimated longer than this says so on a terminal's stderr


@dataclass(frozen=True, kw_only=True)
class ReplayTimes(Result):
    """The times of one event replay (:class:`kbfast.sim.result.Result`; its bounds are its times) and
    how many events it took."""

    n_events: int


@dataclass(frozen=True, kw_only=True)
class ExactResult(ReplayTimes):
    """Per-op timestamps and per-resource statistics of one exact replay; :attr:`edges` and :attr:`pcs` are
    built on first use."""

    compact: object           # the replay's Compact (kbfast.sim.lowering): its edges and controllers
    edge_stats: tuple         # per compact edge: bytes, busy ns, peak queue (bytes)
    pc_stats: tuple           # per (controller, pc): commits, busy ns, max backlog ns

    @cached_property
    def edges(self) -> pd.DataFrame:
        """One row per edge used: kind, src, dst, bw_gbs, bytes, busy_ns, utilization, peak_queue_flits."""
        t, c = self.program.tables, self.compact
        e_bytes, e_busy, e_peak = self.edge_stats
        makespan = self.makespan_ns
        return pd.DataFrame({
            "edge": c.edges,
            "kind": [EdgeKind(int(k)).name.lower() for k in t.edge_kind[c.edges]],
            "src": _names(t, t.edge_src[c.edges]),
            "dst": _names(t, t.edge_dst[c.edges]),
            "bw_gbs": t.edge_bw_gbs[c.edges],
            "bytes": e_bytes, "busy_ns": e_busy,
            "utilization": utilization(e_busy, makespan),
            "peak_queue_flits": e_peak / t.spec.fabric.flit_bytes,
        })

    @cached_property
    def pcs(self) -> pd.DataFrame:
        """One row per (controller, pc): commits, busy_ns, max_backlog_ns."""
        t, c = self.program.tables, self.compact
        commits, busy, backlog = self.pc_stats
        npcs = t.spec.hbm.pcs_per_pe
        n = len(c.hbm_ctrls) * npcs
        return pd.DataFrame({
            "controller": np.repeat([node_name(t, int(h)) for h in c.hbm_ctrls], npcs),
            "pc": np.tile(np.arange(npcs), len(c.hbm_ctrls)),
            "commits": commits[:n], "busy_ns": busy[:n], "max_backlog_ns": backlog[:n],
        })


def _names(t, nodes: np.ndarray) -> list[str]:
    """Node names of ``nodes``, each distinct node named once."""
    uniq, inverse = np.unique(nodes, return_inverse=True)
    names = [node_name(t, int(u)) for u in uniq.tolist()]
    return [names[i] for i in inverse.ravel().tolist()]


def run_exact(p: Program, max_events: int = DEFAULT_MAX_EVENTS,
              max_memory_bytes: int | None = None) -> ExactResult:
    """Replay ``p`` at flit granularity; raise on deadlock, event budget or memory estimate (against
    ``max_memory_bytes``, else the memory limit of kbfast.config.budget).  A budget that the caller set below
    the replay's event floor (kbfast.sim.lowering.replay_events_floor) is refused before the replay runs.  A
    replay estimated to take more than ``ANNOUNCE_S`` says so on stderr when stderr is a terminal
    (:func:`_announce`).

    >>> from kbfast import Router, build_tables, load_system, pe2pe
    >>> t = build_tables(load_system())
    >>> r = run_exact(pe2pe(t, Router(t), "h1", 4096).program)
    >>> r.makespan_ns > 0 and r.n_events > 0
    True
    """
    need = estimate_memory_bytes(p)
    if max_memory_bytes is None:
        budget.check(f"the exact replay of {p.name} ({p.n_ops:,} ops)", need,
                     "use the fast path (drop --exact), or a smaller size or topology")
    elif need > max_memory_bytes:
        raise KbfastError(f"exact replay of {p.name!r} would need about {need / 2**30:.1f} GiB "
                          f"(limit {max_memory_bytes / 2**30:.1f} GiB); use the fast path, or fewer/smaller ops")
    spec = p.tables.spec
    _check_limits(p)
    floor = replay_events_floor(p) if max_events < DEFAULT_MAX_EVENTS else 0   # a budget the caller set
    if floor > max_events:       # the replay would stop at the budget: say so without running it
        raise ReplayBudgetExceeded(f"exact replay of {p.name!r} needs at least {floor:,} events, over its budget of "
                                   f"{max_events:,} events; raise max_events if the workload really is this large")
    low = lower(p)
    c = low.compact
    vc_w = np.array([spec.pe.vc_weights.compute, spec.pe.vc_weights.comm], np.int64)
    note = _announce(p)
    t0 = time.perf_counter()
    status, n_events, S, e_bytes, e_busy, e_peak, pc_commits, pc_busy, pc_backlog = engine.replay(
        low.fabric, low.hbm, low.prog, low.routes, vc_edges(p, c.edges), vc_w, np.int64(max_events),
        np.int64(heap_capacity(p)))
    wall = time.perf_counter() - t0
    if note:
        _stderr(f"exact replay of {p.name}: {int(n_events):,} events in {budget.fmt_seconds(wall)}")
    if status == engine.BUDGET:
        raise ReplayBudgetExceeded(f"exact replay of {p.name!r} exceeded its budget of {max_events:,} events; "
                                   "raise max_events if the workload really is this large")
    if status == engine.DEADLOCK:
        raise ReplayDeadlock(blocked_report(p, S))
    check_consumed(p, S)
    return ExactResult(program=p, n_events=int(n_events), wall_s=wall, agent_finish_ns=S.a_finish,
                       op_issue_ns=S.op_issue, op_begin_ns=S.op_begin, op_end_ns=S.op_end, compact=c,
                       edge_stats=(e_bytes, e_busy, e_peak), pc_stats=(pc_commits, pc_busy, pc_backlog))


def _stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _announce(p: Program) -> bool:
    """Before a long replay (estimated from its events, kbfast.config.budget.exact_seconds), say on stderr how long it
    should take and when it should end: the Numba kernel runs in one call that holds the interpreter, so no
    live progress can be drawn while it runs.  Only when stderr is a terminal: piped output stays clean."""
    if not sys.stderr.isatty():
        return False
    events = replay_events_estimate(p)
    secs = budget.exact_seconds(events)
    if secs < ANNOUNCE_S:
        return False
    end = time.strftime("%H:%M:%S", time.localtime(time.time() + secs))
    _stderr(f"exact replay of {p.name}: about {events:,} events, about {budget.fmt_seconds(secs)} "
            f"(until about {end}; no progress is drawn while the kernel runs)")
    return True


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


