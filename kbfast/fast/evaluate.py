"""Evaluate a Program on the fast path: point estimate, lower and upper bound, occupancy (design §6, §8).

The Program's structure is planned once (``kbfast.fast.plan``); :func:`run_fast` then runs the fluid
schedule (``kbfast.fast.schedule``) in its three modes and tightens the upper bound's interference windows.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.config import budget
from kbfast.errors import KbfastError
from kbfast.fast.bounds import interference, window_offsets
from kbfast.fast.causal import causal_interference, fifo_order
from kbfast.fast.plan import RUN_MAX_FLOWS, Plan, _dma_controller, causal_order, plan_fast
from kbfast.fast.runs import run_charges
from kbfast.fast.schedule import LOWER, POINT, UPPER, schedule, scratch
from kbfast.ir import Op, Program
from kbfast.sim.agents import new_state
from kbfast.sim.diagnostics import ReplayDeadlock, blocked_report, check_consumed
from kbfast.sim.fabric import pc_of
from kbfast.sim.lowering import Compact, hbm_constants
from kbfast.sim.result import Result, utilization
from kbfast.topology.kinds import EdgeKind
from kbfast.topology.names import node_name

BOUND_PASSES = 4
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
    _check_budget(p)
    t0 = time.perf_counter()
    plan = plan_fast(p)
    data_route, args, share = plan.data_route, plan.kernel_inputs, plan.share
    head = plan.head_offsets(p.op_nbytes)
    iso = _no_iso(p, plan)
    lo = _lower(p, plan, head, iso)
    point = _checked(p, _schedule(POINT, np.zeros(p.n_ops), share, head, iso, *args))
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


def point_schedule(p: Program, plan: Plan | None = None):
    """The fluid point schedule's state alone (per op ``op_issue``, ``op_end``; per agent ``a_finish``), not
    clamped into bounds: for a caller that bounds it with bounds of its own (a model piece's stand-in,
    kbfast.measure.model, whose :func:`finish_bounds` cover it).  ``plan``: ``p``'s, when the caller has it."""
    _check_budget(p)
    plan = plan or plan_fast(p)
    return _checked(p, _schedule(POINT, np.zeros(p.n_ops), plan.share, plan.head_offsets(p.op_nbytes),
                                _no_iso(p, plan), *plan.kernel_inputs))[0]


class NetworkBudgetExceeded(KbfastError):
    """The queueing network pushed more events than its budget (:func:`network_schedule`)."""


NETWORK_MAX_EVENTS = 50_000_000   # the queueing network's default budget: about 10 s at 5 M network events/s


def network_schedule(p: Program, plan: Plan | None = None, max_events: int = NETWORK_MAX_EVENTS):
    """The point schedule of ``p`` with every flow of a shared resource in the fluid FIFO queueing network
    (kbfast.fast.network): its state alone (per op ``op_issue``, ``op_end``; per agent ``a_finish``), not clamped
    into bounds, and the network's event count.  Raises :class:`NetworkBudgetExceeded` past ``max_events``
    network events, and the memory limit's error (kbfast.config.budget) when its arrays would not fit.

    Its pools (batches, entries, values, the event heap) start above what the measured all-reduces used (up to
    8.4 entries and 16 values per place at a server, a value per event at most) and grow 4x on overflow, the
    run starting again: the reruns cost at most a third of the last run."""
    from kbfast.fast import network as net
    from kbfast.fast.network_flows import build_flows

    _check_budget(p)
    plan = plan or plan_fast(p)
    fabric, hbm, P, routes, sharing = plan.kernel_inputs
    fl, f_of_op, op_of_f, f_tiso = build_flows(p, plan)
    K, n_srv = len(fl.k_srv), len(fl.s_kind)
    grow = 1
    while True:
        batches = grow * (K + 1024)
        entries = grow * (min(10 * K, max_events // 2) + 4096)
        values = grow * (min(24 * K, max_events) + 4096)     # an event holds at most one value
        events = grow * (K + n_srv + 4096)       # pending at once: at most 0.04 per place in the measured cases
        budget.check(f"the queueing network of {p.name} ({len(op_of_f):,} flows, {K:,} places at servers)",
                     K * 160 + n_srv * 160 + batches * 40 + entries * 16 + values * 8 + events * 80,
                     "use a smaller topology, size or workload, or --method fluid")
        S, W = new_state(P), scratch(P, fabric, hbm, sharing)
        st = net.new_state(fl, batches, entries, values, events)
        status = net.run_program(plan.share, np.zeros(p.n_ops), _no_iso(p, plan), fabric, hbm, P, routes, sharing,
                                 S, W, fl, st, f_of_op, op_of_f, f_tiso, np.int64(max_events))
        if status == net.DONE:
            return _checked(p, (S,))[0], int(st.ctr[1])
        if status == net.OVER_BUDGET or st.ctr[1] >= max_events:
            raise NetworkBudgetExceeded(f"the queueing network of {p.name} passed its budget of {max_events:,} "
                                        "events")
        grow *= 4


def finish_bounds(lower_p: Program, upper_p: Program, passes: int = BOUND_PASSES, plan: Plan | None = None):
    """The lower-bound schedule of ``lower_p`` and the upper-bound schedule of ``upper_p`` (their states: per op
    ``op_issue`` and ``op_end``, per agent ``a_finish``), bounds of every op and agent: the same
    Program with ops' own times (``op_arg``) that are no longer in ``lower_p`` than in ``upper_p``.  The
    upper bound's interference windows open at ``lower_p``'s lower-bound begins, which are no later than
    ``upper_p``'s, so the bound holds (a little looser) without a schedule of its own.  ``passes`` caps the
    upper bound's tightening passes (every pass is a valid bound; fewer are looser and quicker).  ``plan``:
    the plan of a Program that differs from these only in its ops' times (by default planned here, once).

    These are a model piece's stand-in Programs, in which a GEMM command is one timed op: its tile DMAs are
    no flows, so no co-users of the flows beside it.  They keep the window-free start and the descending
    passes (``tight=False`` in :func:`_upper`), whose margins have covered that traffic in every test; the
    tight bound, which counts only the flows it sees, would not (docs/fast_path.md §4)."""
    plan = plan or plan_fast(lower_p)
    up_plan = plan.with_times(upper_p)
    head = up_plan.head_offsets(upper_p.op_nbytes)      # the two Programs' flows are the same
    iso = _shared_iso(up_plan, upper_p)
    lo = _lower(lower_p, plan.with_times(lower_p), head, iso)
    hi = _upper(upper_p, up_plan, head, iso, lo, passes, tight=False)
    return lo[0], hi[0]


def _shared_iso(plan: Plan, p: Program) -> np.ndarray:
    """The schedules' memo of the flows' isolated latencies (:func:`_no_iso`), kept in ``plan``'s shared memo:
    a flow's isolated latency depends on its route, bytes and address, which the plans
    :meth:`~kbfast.fast.plan.Plan.with_times` makes share, so the bounds of a model layer's points at every KV
    length fill one (as :func:`run_fast`'s three schedules share theirs)."""
    return plan.remembered(("iso", p.op_nbytes[plan.data_route >= 0].tobytes()), lambda: _no_iso(p, plan))


def lower_finish(p: Program) -> np.ndarray:
    """Every agent's finish in the lower-bound schedule (:func:`_lower`): no replay or schedule of ``p`` ends an
    agent earlier (docs/fast_path.md §4)."""
    return lower_schedule(p).a_finish


def lower_schedule(p: Program, plan: Plan | None = None):
    """The lower-bound schedule's state (per op ``op_issue``, ``op_end``; per agent ``a_finish``); ``plan``: as
    :func:`finish_bounds`'."""
    return _lower_of(p, None if plan is None else plan.with_times(p))[0]


def _lower_of(p: Program, plan: Plan | None = None):
    """:func:`_lower` on ``p``, planned on its own unless ``plan`` (``p``'s) is given."""
    plan = plan or plan_fast(p)
    iso = _no_iso(p, plan)
    return _lower(p, plan, plan.head_offsets(p.op_nbytes), iso)


def _lower(p: Program, plan: Plan, head: np.ndarray, iso: np.ndarray):
    """The lower-bound schedule: every op alone on the resources it owns."""
    return _checked(p, _schedule(LOWER, np.zeros(p.n_ops), plan.share, head, iso, *_own_resources(plan.kernel_inputs)))


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
    runs = plan.runs
    cz = causal_order(p, plan.bounds) if tight else None
    # windows narrowed to each server (tight only: the model pieces' bound stays as it was)
    B = plan.bounds
    pre, post, seq_pre, seq_post = (window_offsets(B, p.op_nbytes, flit, p.op_code == Op.SEND) if tight else
                                    (np.zeros(len(B.res)),) * 2 + (np.zeros(len(B.seq_res)),) * 2)
    order = fifo_order(B) if tight else np.full(len(B.res), -1, np.int64)

    def bound(end_hi: np.ndarray, windows: bool) -> np.ndarray:
        """The interference per flow, windows closing at ``end_hi`` (or none without ``windows``)."""
        # co-users paid once per run of shared servers where a class has few enough partners; the
        # controller's commits, and the other classes' wires and workers, per server
        extra = (interference(B, p.op_nbytes, flit, begin_lo, end_hi, windows, own, posted, runs.done, pre, post)
                 + run_charges(B, runs, p.op_nbytes, flit, begin_lo, end_hi, windows, seq_pre, seq_post))
        if cz is not None:
            # or per co-user without the causally apart ones (its work per server, or per run where that is
            # less): the smaller of the two, as both bound the delay
            b, e = (begin_lo, end_hi) if windows else (np.full(p.n_ops, -np.inf), np.full(p.n_ops, np.inf))
            np.minimum(extra, causal_interference(B, p.op_nbytes, flit, b, e, own, posted, cz, pre, post, order,
                                                 runs), out=extra)
        return extra

    def run(extra: np.ndarray):
        """The upper schedule with ``extra`` per flow, checked."""
        return _checked(p, _schedule(UPPER, extra, share, head, iso, *args))

    if tight:
        hi = _least_fixpoint(p, iso, bound, run)
        if hi is not None:
            return hi
    extra = _window_free(plan, p, own, posted, lambda: bound(begin_lo, False))
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


def _window_free(plan: Plan, p: Program, own: np.ndarray, posted: np.ndarray, make) -> np.ndarray:
    """The window-free interference per flow (``make()``), remembered in ``plan``'s shared memo: without windows
    it reads no time, only the flow classes and each flow's bytes, own penalty and posting, which the plans
    :meth:`~kbfast.fast.plan.Plan.with_times` makes share (a model layer's points at every KV length)."""
    ops = plan.bounds.ops
    return plan.remembered(("window_free", p.op_nbytes[ops].tobytes(), own.tobytes(), posted[ops].tobytes()),
                           make).copy()


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


def _check_budget(p: Program) -> None:
    """Refuse a Program whose fast-path arrays would pass the memory limit (kbfast.config.budget)."""
    budget.check(f"the fast path on {p.name} ({p.n_ops:,} ops)", budget.fast_bytes(p.n_ops, len(p.route_edges)),
                 "use a smaller topology, size or workload")


def _no_iso(p: Program, plan: Plan) -> np.ndarray:
    """The schedule's memo of isolated latencies, empty (kbfast.fast.schedule.schedule's ``iso``)."""
    return np.full((p.n_ops, 1 + plan.lowered.hbm.n_pcs), np.nan)


_SCRATCH = threading.local()   # .last: (shape, scratch) of this thread's last schedule


def _schedule(mode, extra, share, head, iso, fabric, hbm, P, routes, sharing):
    """kbfast.fast.schedule.schedule in the scratch of this thread's last schedule where the shapes agree, else
    in a new one kept for the next: a model point's three bound schedules, and its layer's other points, share
    one (on a four-SIP decode layer, allocating it took 0.8 ms of a 5.6 ms schedule).  Its results share no
    array with the scratch."""
    shape = (len(P.op_code), len(P.a_start), len(P.ch_src), len(sharing.res_cap),
             int(np.sum(np.diff(sharing.sh_span))), sharing.max_route, len(fabric.e_src), len(fabric.r_ptr),
             int(fabric.n_hbm.max(initial=-1)), hbm.n_pcs)
    last = getattr(_SCRATCH, "last", None)
    if last is None or last[0] != shape:
        _SCRATCH.last = None                 # the old scratch goes before the new one is made
        last = _SCRATCH.last = (shape, scratch(P, fabric, hbm, sharing))
    return schedule(mode, extra, share, head, iso, fabric, hbm, P, routes, sharing, last[1])


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
