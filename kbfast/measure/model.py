"""The ``model`` workload kind: a model step, evaluated: the pieces of kbfast.workloads.model in either mode, and the figures people read.

* Exact mode replays each piece's Program with every GEMM command lowered to its tile pipeline
  (kbfast.workloads.commands.TileLowering).
* The fast path times each distinct GEMM command once per distinct PE-to-own-slice route (every PE's route
  is private: no other PE's GEMM shares it) with the GEMM fast path: the max-plus recurrence where it
  equals exact mode, else its steady state (kbfast.measure.gemm_steady), or with a PC read/write turnaround
  the fluid schedule of the one-PE Program, with their bounds (kbfast.measure.gemm).
  The piece's Program then carries each command as one COMPUTE of that time, with everything else: MATH,
  loads and stores, IPCQ rings and all-reduces.  This stand-in Program is small (no tiles), so it is
  replayed exactly when it fits kbfast.measure.hybrid's event budget, else the fast schedule times it; its
  bounds are the fast schedule's on the same Program with the commands' lower and upper times.  A layer's
  point is replayed once for every attention length where the fabric is idle across the attention
  (kbfast.measure.shift).

A step's latency is ``sum(repeat x piece latency)``: each piece starts from a launch barrier with idle
resources, so identical layers are evaluated once (docs/models.md).
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbfast.config.budget import MemoryBudgetError
from kbfast.config.models import Model, Transformer, load_model
from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.measure.gemm import fast_method, maxplus_rows
from kbfast.measure.gemm_steady import applies
from kbfast.exact import run_exact
from kbfast.fast.evaluate import (NetworkBudgetExceeded, finish_bounds, lower_finish, lower_schedule, network_schedule,
                                  point_schedule, run_fast)
from kbfast.fast.plan import Plan, plan_fast
from kbfast.fast.maxplus_gemm import dma_times, gemm_upper
from kbfast.measure.hybrid import DEFAULT_BUDGET_EVENTS, replay_events_estimate
from kbfast.sim.lowering import tile_routes
from kbfast.ir import Op, Program, ProgramBuilder
from kbfast.measure import shift
from kbfast.measure.metrics import phase_ends
from kbfast.measure.pipeline import RECURRENCE, WHOLE, PipelineTiming, schedule, terms_of, whole_events
from kbfast.measure.roofline import ZERO, Floors, piece_floors, roofline_row
from kbfast.measure.rows import STEP_CATEGORIES
from kbfast.sim.diagnostics import ReplayBudgetExceeded
from kbfast.topology.builder import Tables, reverse_route_edges
from kbfast.topology.names import cube_locals, node_name, own_hbm_ctrls
from kbfast.topology.routing import Router
from kbfast.workloads.commands import GemmCommand, TileLowering, TimedLowering
from kbfast.workloads.gemm import GemmCase, gemm_nodes
from kbfast.workloads.launch import launch_timing
from kbfast.measure.methods import (EXACT, EXACT_REPLAY, FAST_CHOICES, FLUID, MAXPLUS, MAXPLUS_ESTIMATE, MAXPLUS_STEADY,
                                    MODES, NETWORK, check_fast_choice, check_method)
from kbfast.measure.kind import Built, Measurement, Prepared, WorkloadKind
from kbfast.workloads.symbolic import forget_traces
from kbfast.workloads.collectives.in_model import AUTO, candidates, check_choice
from kbfast.workloads.model import (STEP_DEFAULTS, Piece, Shape, allreduce_message, allreduce_piece, build_piece,
                                    check_layout, check_overlap, check_phase, compile_model, pipeline_piece,
                                    prefetched, refuse_unread, shape_for, with_collective, with_fields)
from kbfast.workloads.parallel import Parallel, split

UPPER_PASSES = 1    # the upper bound's tightening passes: on a Llama-70B layer more change nothing, and cost 30 %


@dataclass
class PieceResult:
    """One piece in one mode: its latency from the launch (and bounds), per-category critical path (ns),
    per-phase ends, the command counts, and the evaluator's wall time."""

    piece: Piece
    mode: str
    latency_ns: float
    lo_ns: float
    hi_ns: float
    breakdown: dict[str, float]
    phase_ns: dict[str, float]
    counts: dict[str, int]
    wall_s: float
    method: str                      # how it was made (kbfast.measure.methods): exact; or exact replay, fluid
    program: Program | None = field(default=None, repr=False)
    floors: Floors = ZERO            # the piece's roofline floors (kbfast.measure.roofline)
    prefetch: dict = field(default_factory=dict)   # TCM bytes the prefetches may fill, and each one's bytes


def _route_key(t: Tables, router: Router, node: int) -> tuple:
    """What a GEMM's timing depends on besides its plan: the PE's route to its own slice and back."""
    ctrl = int(own_hbm_ctrls(t, np.array([node]))[0])
    rs = router.routes(np.array([node]), np.array([ctrl]), "pe_dma")
    rev = reverse_route_edges(t, rs.ptr, rs.edges)
    key = []
    for edges in (rs.edges, rev):
        key += [tuple(t.edge_bw_gbs[edges]), tuple(t.edge_prop_ns[edges]), tuple(t.node_overhead_ns[t.edge_dst[edges]])]
    return tuple(key) + (float(t.node_overhead_ns[node]),)


_MEMO: dict[tuple, tuple[float, float, float]] = {}     # command times, across timers (sweeps share them)
_STAGES: dict[tuple, dict[str, float]] = {}              # command stage busy times, across timers
# the step category a GEMM command's tile-pipeline stage belongs to (its bound stage takes the command's span)
STAGE_CATEGORY = {"dma_read": "hbm_stream", "dma_write": "hbm_stream", "compute": "gemm_compute",
                  "tcm_read": "gemm_compute", "tcm_write": "gemm_compute"}


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True)`` for rows of non-negative integers, through one integer
    per row (mixed radix) where the radices' product fits in 62 bits (several times quicker)."""
    span = rows.max(0) + 1 if len(rows) else np.ones(rows.shape[1], np.int64)
    if np.any(rows < 0) or float(np.prod(span.astype(np.float64))) >= 2.0 ** 62:
        keys, inverse = np.unique(rows, axis=0, return_inverse=True)
        return keys, inverse.ravel()
    weight = np.cumprod(np.r_[span[1:], 1][::-1])[::-1]
    _, first, inverse = np.unique(rows @ weight, return_index=True, return_inverse=True)
    return rows[first], inverse.ravel()


class CommandTimer:
    """Fast-path times of GEMM commands, memoised per (command, route class): (point, lower, upper) ns."""

    def __init__(self, t: Tables, router: Router):
        self.t, self.router = t, router
        self._class: dict[int, int] = {}          # local node index in its cube -> route class
        self._rep: list[int] = []                 # a node of each class
        self._route_keys: list[tuple] = []        # each class's route key
        self._keys: dict[tuple, int] = {}
        self._of_nodes: OrderedDict = OrderedDict()   # nodes' bytes -> their route classes (the latest)
        self._system = (repr(t.spec.pe), repr(t.spec.hbm), repr(t.spec.fabric))

    def route_class(self, nodes: np.ndarray) -> np.ndarray:
        """Each node's route class (cubes are copies of one template: a node's class is its local index's);
        remembered for the ``PIECE_CACHE`` latest node arrays (a sweep's points time the same pieces)."""
        nodes = np.asarray(nodes, np.int64)
        return _remembered(self._of_nodes, nodes.tobytes(), lambda: self._route_classes(nodes))

    def _route_classes(self, nodes: np.ndarray) -> np.ndarray:
        """:meth:`route_class`, found."""
        _, local = cube_locals(self.t, nodes)
        first, inverse = np.unique(local, return_index=True, return_inverse=True)[1:]
        for i in first.tolist():
            lo, node = int(local[i]), int(np.asarray(nodes)[i])
            if lo not in self._class:
                key = _route_key(self.t, self.router, node)
                if key not in self._keys:
                    self._keys[key] = len(self._rep)
                    self._rep.append(node)
                    self._route_keys.append(key)
                self._class[lo] = self._keys[key]
        classes = np.array([self._class[int(local[i])] for i in first.tolist()], np.int64)[inverse.ravel()]
        classes.flags.writeable = False
        return classes

    def times(self, commands: list[GemmCommand], cmd: np.ndarray, nodes: np.ndarray, which: int,
              pre: np.ndarray | None = None, part: np.ndarray | None = None) -> np.ndarray:
        """Column ``which`` (0 point, 1 lower, 2 upper) of each (command, node, preloaded tiles, part)'s times
        (:meth:`time`; ``pre`` and ``part`` default to 0)."""
        if not len(cmd):
            return np.zeros(0)
        zero = np.zeros(len(cmd), np.int64)
        rows = np.stack([np.asarray(cmd, np.int64), self.route_class(nodes), zero if pre is None else pre,
                         zero if part is None else part], 1)
        keys, inverse = _unique_rows(rows)
        vals = np.array([self.time(commands[c], k, p, q)[which] for c, k, p, q in keys.tolist()])
        return vals[inverse.ravel()]

    def time(self, com: GemmCommand, cls: int, pre: int = 0, part: int = 0) -> tuple[float, float, float]:
        """A command's times on route class ``cls``, shared by every timer whose system times it alike; with
        its first ``pre`` tiles prefetched (kbfast.workloads.commands.TimedLowering), ``part`` 0: from its
        start with those tiles in TCM; 2: the prefetch alone, from its start to its last read's end; 1: the
        command started with the prefetch, from the prefetch's end (at least 0).  Parts 0 and 1 keep the
        command's own upper bound: fewer reads, or fewer depth gates, never make the tile pipeline later
        (it is monotone), so the bound of the command without a prefetch holds for them."""
        key = (com.plan, com.a_addr, com.b_addr, com.c_addr, self._route_keys[cls], self._system, pre, part)
        if key not in _MEMO:
            node = self._rep[cls]
            if pre == 0:
                _MEMO[key] = self._evaluate(com, node)
            elif part == 2:
                _MEMO[key] = self._prefetched(com, node, pre, part)
            else:
                point, lower, upper = self._prefetched(com, node, pre, part)
                upper = min(upper, self.time(com, cls)[2])
                if part == 1:
                    alone = self.time(com, cls, pre, 2)
                    point, lower, upper = (max(x - a, 0.0) for x, a in zip((point, lower, upper), alone))
                _MEMO[key] = (point, lower, upper)
        return _MEMO[key]

    def stages(self, com: GemmCommand, node: int) -> dict[str, float]:
        """The busy ns of each tile-pipeline stage of ``com`` alone on PE ``node`` (the max-plus recurrence's,
        kbfast.workloads.gemm.RESOURCES): which stage binds the command."""
        cls = int(self.route_class(np.array([node]))[0])
        key = (com.plan, self._route_keys[cls], self._system)
        if key not in _STAGES:
            pe = node_name(self.t, self._rep[cls]).rsplit(".", 1)[0]
            row = maxplus_rows(self.t, self.router, [GemmCase(None, com.plan, "model", pe, pe, (), -1)])[0]
            _STAGES[key] = {name: row[f"busy[{name}]"] * row["window_ns"] for name in STAGE_CATEGORY}
        return _STAGES[key]

    def _evaluate(self, com: GemmCommand, node: int) -> tuple[float, float, float]:
        """The command alone on PE ``node`` from idle: max-plus where it equals exact mode, or its steady state
        (kbfast.measure.gemm_steady, where it applies to the command's tiles and addresses) with that method's
        bounds, else the fluid schedule of its one-PE Program (marker to last write, with that schedule's
        bounds)."""
        t, plan = self.t, com.plan
        pe = node_name(t, node).rsplit(".", 1)[0]
        case = GemmCase(None, plan, "model", pe, pe, (), -1)
        method = fast_method(t, case)
        if method == MAXPLUS or (method == MAXPLUS_STEADY and applies(t, plan, (com.a_addr, com.b_addr, com.c_addr))):
            row = maxplus_rows(t, self.router, [case])[0]
            if row["method"] != MAXPLUS_ESTIMATE:
                w, lat = row["window_ns"], row["latency_ns"]      # the window leaves out the pinned operands' loads
                return w, w + (row["latency_lo_ns"] - lat), w + (row["latency_hi_ns"] - lat)
        # the writes' bound (kbfast.fast.maxplus_gemm.gemm_upper) holds without a PC read/write turnaround only
        nodes = [gemm_nodes(t, pe)]
        upper = (float(gemm_upper([plan], dma_times(tile_routes(t, self.router, nodes), [plan], nodes))[0, 1])
                 if t.spec.hbm.switch_penalty_ns == 0.0 else np.inf)
        b = ProgramBuilder(t, self.router, name="gemm command")
        agent = b.pe_agent(node)
        b.start(agent)
        own = int(own_hbm_ctrls(t, np.array([node]))[0])
        done = b.gemm(agent, plan, (own, com.a_addr), (own, com.b_addr), (own, com.c_addr))
        res = run_fast(b.build())
        begin = res.op_begin_ns[1]                 # the command's marker, right after START
        return (float(res.op_end_ns[done] - begin), float(res.op_end_lo_ns[done] - begin),
                min(float(res.op_end_hi_ns[done] - begin), upper))

    def _prefetched(self, com: GemmCommand, node: int, pre: int, part: int) -> tuple[float, float, float]:
        """The fast schedule of a prefetched command's one-PE Program, with its bounds: a 0 ns prefetch marker,
        then per ``part`` (0) the prefetch settled before the command's marker, timed from that marker; (1)
        the command's marker at once, its first tiles' FETCHes waiting for the prefetch's reads, timed from the
        prefetch's marker; (2) the prefetch alone, timed from its marker."""
        t = self.t
        b = ProgramBuilder(t, self.router, name="prefetched gemm command")
        agent = b.pe_agent(node)
        b.start(agent)
        own = int(own_hbm_ctrls(t, np.array([node]))[0])
        a, bb, c = (own, com.a_addr), (own, com.b_addr), (own, com.c_addr)
        start = b.n_ops
        ids = b.prefetch(agent, com.plan, a, bb, pre, settle=part != 1)
        if part == 0:
            b.wait(agent, int(ids[-1]))
            start = b.n_ops
        done = b.wait(agent, int(ids[-1])) if part == 2 else \
            b.gemm(agent, com.plan, a, bb, c, preloaded=pre, ready=ids if part == 1 else None)
        res = run_fast(b.build())
        begin = res.op_begin_ns[start]
        return tuple(float(x[done] - begin) for x in (res.op_end_ns, res.op_end_lo_ns, res.op_end_hi_ns))


def evaluate_piece(t: Tables, router: Router, piece: Piece, mode: str = "fast",
                   timer: CommandTimer | None = None, method: str = "hybrid", launch_ns: float | None = None,
                   bounds: bool = True, system: str | None = None) -> PieceResult:
    """``piece`` in ``mode`` (see the module docstring); the fast path's ``method``: ``hybrid`` (replay the
    stand-in Program exactly when it fits the budget, kbfast.measure.hybrid), ``network`` (the queueing network's
    schedule, :func:`_network`) or ``fluid`` (the fast schedule only).
    ``bounds`` False: the fast path's point alone, its bounds NaN and its roofline floors left out (a serving
    run's step costs: about a third quicker).  ``system``: ``t.system_key``, when the caller has it."""
    if mode not in MODES or method not in FAST_CHOICES:
        raise ValueError((mode, method))
    t0 = time.perf_counter()
    if mode == "exact":
        lower = TileLowering(piece.commands)
        p = build_piece(t, router, piece, lower, launch_ns)
        res = run_exact(p)
        lat = lo = hi = float(res.latency_ns(p.launch_ns)[0])
        method = EXACT
        untimed = TimedLowering.untimed(piece.commands)   # each command one op
        floors = piece_floors(t, build_piece(t, router, piece, untimed, launch_ns), piece.commands,
                              np.asarray(untimed.command_op), np.asarray(untimed.command_id))
    else:
        timer = timer or command_timer(t, router)
        lower = TimedLowering(piece.commands, lambda c, n, pre, part: timer.times(piece.commands, c, n, 0, pre, part))
        p = build_piece(t, router, piece, lower, launch_ns)
        bounded = None
        if bounds:
            timed, args = lower.timed()
            nodes = p.agent_node[p.op_agent[timed]]
            bounded = []
            for which in (1, 2):
                arg = p.op_arg.copy()
                arg[timed] = timer.times(piece.commands, args[:, 0], nodes, which, args[:, 1], args[:, 2])
                bounded.append(dataclasses.replace(p, op_arg=arg))
        ev = _stand_in(system or t.system_key, p, bounded, method)
        res, method = ev.point, ev.method
        lat = res.latency(p.launch_ns)
        lo = hi = np.nan
        floors = ZERO
        if bounds:
            lo, hi = ev.lower.latency(p.launch_ns), ev.upper.latency(p.launch_ns)
            floors = piece_floors(t, p, piece.commands, np.asarray(lower.command_op, np.int64),
                                  np.asarray(lower.command_id, np.int64))
    wall = time.perf_counter() - t0
    timer = timer or command_timer(t, router)
    return PieceResult(piece, mode, float(lat), float(lo), float(hi),
                       last_pe_time_by_category(p, res, piece, lower, timer),
                       phase_ends(p, res.op_end_ns, p.launch_ns), dict(lower.counts), wall, method, p, floors,
                       lower.prefetch_bytes())


_LAUNCH: OrderedDict = OrderedDict()   # (system but its link bandwidths, PEs) -> the launch barrier, ns


def _launch_ns(t: Tables, router: Router, nodes: np.ndarray) -> float:
    """The launch barrier of a kernel on ``nodes`` (kbfast.workloads.launch), remembered: it sums overheads
    and propagation along zero-byte routes, so the link bandwidths do not enter it."""
    key = (t.system_key_without_links, nodes.tobytes())
    return _remembered(_LAUNCH, key, lambda: launch_timing(t, router, nodes).target_start_ns, TIMES_CACHE)


def _remembered(cache: OrderedDict, key, make, limit: int | None = None):
    """``make()``, remembered in ``cache`` under ``key`` with the ``limit`` (default ``PIECE_CACHE``) most
    recently used (nothing when ``make`` raises)."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = cache[key] = make()
    if len(cache) > (limit or PIECE_CACHE):
        cache.popitem(last=False)
    return value


def _ranks(piece: Piece) -> tuple:
    """A memo key's part for where ``piece`` runs: its PEs and their groups (replicas or stages placed side by
    side, kbfast.workloads.parallel: an all-reduce over each group of a data-parallel layer is not the one over
    all its PEs, though the PEs and the message are the same)."""
    return (piece.nodes.tobytes(), None if piece.groups is None else piece.groups.tobytes(),
            repr(piece.info.get("group")))


def _piece_key(system: str, piece: Piece) -> tuple:
    """What a piece's result depends on besides how it is evaluated: the system, its kernel, sizes, commands and
    ranks."""
    return system, piece.name, piece.kernel, repr(piece.info), repr(piece.commands), _ranks(piece)


_TIMERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # Router -> the CommandTimer of its system


def command_timer(t: Tables, router: Router) -> CommandTimer:
    """The CommandTimer of ``router``'s system, one per Router: the route classes it finds serve every later
    point of a sweep's system (its command times are shared across timers anyway)."""
    timer = _TIMERS.get(router)
    if timer is None or timer.t is not t:
        timer = _TIMERS[router] = CommandTimer(t, router)
    return timer


_PIECES: OrderedDict = OrderedDict()   # (system, piece, mode, method, launch) -> PieceResult
PIECE_CACHE = 64
# caches of a few numbers each (launch barriers, all-reduce times and auto's choices): a search's candidates
# come back to a system, its ranks and a message after many others, which 64 entries had already dropped
# (on the default Llama-3-70B search, 42 of 230 all-reduce timings were made twice)
TIMES_CACHE = 4096


def _memo_piece(system: str, t: Tables, router: Router, piece: Piece, mode: str, timer: CommandTimer, method: str,
                launch_ns: float, bounds: bool = True) -> PieceResult:
    """:func:`evaluate_piece`, remembered across steps: points of a sweep that differ only where a piece does
    not look (the LM head does not depend on the KV length) evaluate it once.  The key holds everything the
    result depends on: the system, the piece's kernel, sizes, commands and PEs, the mode and method."""
    return _remembered(_PIECES, (*_piece_key(system, piece), mode, method, launch_ns, bounds),
                       lambda: evaluate_piece(t, router, piece, mode, timer, method, launch_ns, bounds, system))


def _memo_lower(system: str, t: Tables, router: Router, piece: Piece, timer: CommandTimer,
                launch_ns: float) -> tuple[float, int]:
    """A lower bound on ``piece``'s fast-path point (ns from the launch barrier), and about the events its
    stand-in's replay takes: the lower-bound schedule (kbfast.fast.evaluate.lower_finish: every op alone on
    the resources it owns) of the stand-in Program with every GEMM command at its lower time.  The point is
    that Program's replay, or its schedule clamped into its bounds, with each command at its point time, no
    shorter: so never below this (docs/fast_path.md §4).  Remembered as :func:`_memo_piece`'s results are."""
    def make() -> tuple[float, int]:
        lower = TimedLowering(piece.commands, lambda c, n, pre, part: timer.times(piece.commands, c, n, 1, pre, part))
        p = build_piece(t, router, piece, lower, launch_ns)
        return float(lower_finish(p).max() - p.launch_ns), replay_events_estimate(p)
    return _remembered(_PIECES, (*_piece_key(system, piece), "lower", launch_ns), make)


_CHOSEN: OrderedDict = OrderedDict()   # (system, ranks, size, tile I/O, method, candidates) -> (algorithm, {alg: ns})
_ALONE: OrderedDict = OrderedDict()    # (system, ranks, size, tile I/O, method, algorithm) -> ns


def allreduce_alone_ns(t: Tables, router: Router, piece: Piece, algorithm: str, method: str, launch_ns: float) -> float:
    """``piece``'s all-reduce by ``algorithm`` alone on the piece's PEs and wiring, from the launch barrier, its
    point timed as the piece's would be (:func:`_replayed`, else the fast path's in its own bounds; no bounds of
    its own are kept).  Remembered per (system, ranks, message size, tile I/O, method, algorithm); a refusal (a
    KbfastError) is raised."""
    nbytes, tile_io = allreduce_message(piece)
    def make() -> float:
        p = build_piece(t, router, allreduce_piece(piece, algorithm), TimedLowering.untimed([]), launch_ns)
        replayed = _replayed(p, method)
        if replayed is not None:
            return replayed.latency(p.launch_ns)
        lat, lo, hi = run_fast(p, tight=False).latency_ns(p.launch_ns)
        S = _network(p, method)
        if S is not None:           # the network's point, in the fast path's bounds
            return float(np.clip(S.a_finish.max() - p.launch_ns, lo, hi))
        return float(lat)           # the fast schedule's point, in its own bounds
    return _remembered(_ALONE, (t.system_key, _ranks(piece), nbytes, tile_io, method, algorithm), make, TIMES_CACHE)


def choose_collective(t: Tables, router: Router, piece: Piece, method: str,
                      launch_ns: float) -> tuple[str, dict[str, float]]:
    """``auto``'s choice for ``piece``'s all-reduce: each candidate (kbfast.workloads.collectives.in_model
    .candidates) timed alone (:func:`allreduce_alone_ns`); the fastest, the earlier candidate on a tie.  A
    candidate refused (over the memory limit, say: the flat ring's messages grow with the square of the PEs)
    is not chosen, and its time is None.  Remembered per (system, ranks (:func:`_ranks`), message size, tile I/O,
    method, candidates: sequence parallelism has fewer): a sweep's points choose once.  Returns the choice and
    every candidate's latency (ns)."""
    nbytes, tile_io = allreduce_message(piece)
    algs = candidates(len(piece.nodes), piece.info[piece.allreduce].get("sequence_parallel", False))
    def make() -> tuple[str, dict[str, float | None]]:
        times: dict[str, float | None] = {}
        refusal = None
        for alg in algs:
            try:
                times[alg] = allreduce_alone_ns(t, router, piece, alg, method, launch_ns)
            except KbfastError as err:
                times[alg], refusal = None, refusal or err
        ok = {alg: v for alg, v in times.items() if v is not None}
        if not ok:
            raise refusal
        return min(ok, key=ok.get), times
    return _remembered(_CHOSEN, (t.system_key, _ranks(piece), nbytes, tile_io, method, tuple(algs)), make,
                       TIMES_CACHE)


def resolve_collectives(t: Tables, router: Router, pieces: list[Piece], method: str,
                        launch: dict[bytes, float]) -> tuple[list[Piece], dict[str, dict]]:
    """``pieces`` with every ``auto`` all-reduce replaced by :func:`choose_collective`'s choice, and per piece
    that chose, its message (``bytes``), the choice and every candidate's latency (``candidates_ns``)."""
    out, choices = [], {}
    for p in pieces:
        if p.collective == AUTO:
            alg, times = choose_collective(t, router, p, method, launch[p.nodes.tobytes()])
            choices[p.name] = {"bytes": allreduce_message(p)[0], "chosen": alg, "candidates_ns": times}
            p = with_collective(p, alg)
        out.append(p)
    return out, choices


def resolve_prefetches(t: Tables, router: Router, pieces: list[Piece], method: str, launch: dict[bytes, float],
                       timer: CommandTimer) -> list[Piece]:
    """``pieces`` (their collectives resolved) with a limit on each prefetch (kbfast.workloads.model
    .prefetched): the tiles the PE's read channel streams while the collective the prefetch hides behind runs
    (its all-reduce alone, :func:`allreduce_alone_ns`; half of it for a reduce-scatter), at the command's own
    read time per tile (its tile pipeline's read-channel busy time over its tiles).  The read channel serves
    first in, first out, so a prefetch that outlasts its collective holds up the next GEMM's operand load,
    and each tile it brings saves less than it costs there: the read and the compute times per tile are
    close (docs/models.md "Overlap")."""
    out = []
    for p in pieces:
        names = prefetched(p)
        if names:
            fields = p.info[p.allreduce]
            window = allreduce_alone_ns(t, router, p, p.collective, method, launch[p.nodes.tobytes()])
            window *= 0.5 if fields["sequence_parallel"] else 1.0
            most = {}
            for name in names:
                com = p.commands[fields[name]]
                per_tile = timer.stages(com, int(p.nodes[0]))["dma_read"] / com.plan.n_tile_total
                most[name] = int(window // per_tile) if per_tile > 0 else com.plan.n_tile_total
            p = with_fields(p, prefetch_most=most)
        out.append(p)
    return out


# A stand-in over the hybrid budget is still replayed when the replay should be no slower than the fast
# schedule: the replay costs 45-60 ns per event, the schedule 5-35 us per IPCQ send (measured on Llama-3-70B
# decode layers: lrab 13 us, hier2d 28-35 us, ring_pipe 5 us), so at most REPLAY_EVENTS_PER_SEND events per
# send, and at most REPLAY_MOST_EVENTS events (about 2 s).
REPLAY_EVENTS_PER_SEND = 300
REPLAY_MOST_EVENTS = 40_000_000


def _replayed(p: Program, method: str) -> shift.Times | None:
    """The stand-in Program's exact replay, when ``method`` is hybrid and the replay fits kbfast.measure.hybrid's
    event budget (its estimate first, then the replay's own guard), or should be no slower than the schedule
    (``REPLAY_EVENTS_PER_SEND``), and fits the memory limit (kbfast.config.budget); else None: the caller takes
    the fast schedule's point.  A stand-in is small (no tiles), and a model's collectives always meet, so the
    hybrid evaluator's first fast pass would only say so: it is skipped.  (A flat 40 M-event budget was tried:
    the replay of a batch-8 Llama-70B decode layer with hier2d and prefetch, 7.4 M events, takes 0.44 s against
    its schedule's 1.09 s, but model_1e4's lrab points, 1,400 events per send, schedule quicker than they
    replay, and a warm model point was 88 % slower, paired: docs/models.md.)"""
    if method != "hybrid":
        return None
    events = replay_events_estimate(p)
    sends = int(np.count_nonzero(p.op_code == Op.SEND))
    quicker = events <= min(REPLAY_MOST_EVENTS, REPLAY_EVENTS_PER_SEND * sends)
    if events <= 2 * DEFAULT_BUDGET_EVENTS or quicker:
        try:
            res = run_exact(p, max_events=events if quicker else DEFAULT_BUDGET_EVENTS)
            return shift.Times(res.op_issue_ns, res.op_end_ns, res.agent_finish_ns)
        except (ReplayBudgetExceeded, MemoryBudgetError):     # the replay only makes the point exact
            pass
    return None


def _within(point: shift.Times, lower: shift.Times, upper: shift.Times) -> shift.Times:
    """A fluid point's op ends and agent finishes clamped into its bounds' (both bound exact mode, so a point
    outside them is clamped in, as kbfast.fast.evaluate.run_fast does with its own)."""
    return shift.Times(point.op_issue_ns, np.clip(point.op_end_ns, lower.op_end_ns, upper.op_end_ns),
                       np.clip(point.agent_finish_ns, lower.agent_finish_ns, upper.agent_finish_ns))


@dataclass(frozen=True)
class StandIn:
    """A stand-in Program evaluated: its point's times, made ``method``, and those of its lower- and
    upper-bound schedules (None without bounds)."""

    point: shift.Times | None
    method: str | None
    lower: shift.Times | None = None
    upper: shift.Times | None = None


def _network(p: Program, method: str, plan: Plan | None = None):
    """For the choice ``network``, the queueing network's schedule of ``p`` (its state) when it fits its budget and
    the memory limit (kbfast.fast.evaluate.network_schedule); else None: the caller takes the fluid's, and its
    method says so."""
    if method != "network":
        return None
    try:
        return network_schedule(p, plan)[0]
    except (NetworkBudgetExceeded, MemoryBudgetError):
        return None


def _direct(p: Program, bounded: list[Program] | None, method: str, point: bool = True,
            plan: Plan | None = None) -> StandIn:
    """The stand-in ``p`` evaluated: its point (:func:`_replayed`, else the fast schedule's point; with ``point``
    False, none), and with ``bounded`` (``p`` with every command at its lower, then upper time) the bounds'
    schedules (kbfast.fast.evaluate.finish_bounds; ``plan``: ``p``'s fast-path plan, when the caller has it).
    A fluid or network point is clamped into those bounds (:func:`_within`); without them it is the schedule's as
    it is."""
    if plan is None and bounded is not None:
        plan = plan_fast(p)            # the bounds' plan too: their Programs differ from p in times only
    times, how = None, None
    if point:
        times, how = _replayed(p, method), EXACT_REPLAY
        if times is None:      # the fast schedule's point; GEMM tile DMAs are no flows of a stand-in
            S, how = _network(p, method, plan), NETWORK
            if S is None:
                S, how = point_schedule(p, plan), FLUID
            times = shift.Times(S.op_issue, S.op_end, S.a_finish)
    if bounded is None:
        return StandIn(times, how)
    lo, hi = finish_bounds(*bounded, UPPER_PASSES, plan)
    lower, upper = (shift.Times(s.op_issue, s.op_end, s.a_finish) for s in (lo, hi))
    return StandIn(_within(times, lower, upper) if how in (FLUID, NETWORK) else times, how, lower, upper)


_SPLITS: OrderedDict = OrderedDict()  # (system, layer) -> its runs (kbfast.measure.shift.split), or None
_PLANS: OrderedDict = OrderedDict()   # (system, the layer with its runs at 0 ns) -> (B ns per run, fast plan)
_BASES: OrderedDict = OrderedDict()   # (system, layer, method, B, fixed runs' ops) -> the base's point, or None


def _stand_in(system: str, p: Program, bounded: list[Program] | None, method: str) -> StandIn:
    """:func:`_direct`; where the attention's length is all that differs between ``p`` and its layer's base,
    with the base's point moved (kbfast.measure.shift; docs/models.md "Attention shifts").  The bounds are
    always the point's own."""
    mask = shift.run_mask(p)
    if mask is None:
        return _direct(p, bounded, method)
    layer = (system, shift.layer_key(p, mask))
    s = _remembered(_SPLITS, layer, lambda: shift.split(p))     # it reads nothing the layer's points differ in
    if s is None:
        return _direct(p, bounded, method)
    b_ns, layer_plan = _remembered(_PLANS, layer, lambda: _layer_plan(p, s))
    # the layer's fast-path plan serves every point of it: their Programs differ in times only (and in
    # their runs' MATH element counts), as do the bounds' Programs
    plan = layer_plan.with_times(p)

    def own(point: bool) -> StandIn:
        return _direct(p, bounded, method, point, plan)

    spent = shift.spent(p, s)
    fixed = np.any(spent != spent[0], axis=0) | (spent[0] < b_ns)     # such a run: as it is in the base
    if fixed.all():
        return own(True)
    kept = s.ops[fixed[s.run_of]]      # the base: the layer, its moved runs at B, its fixed runs' ops as they are
    key = (*layer, method, b_ns.tobytes(), fixed.tobytes(), p.op_arg[kept].tobytes())
    base = _remembered(_BASES, key, lambda: _base(shift.based(p, s, b_ns, fixed), s, fixed, method))
    if base is None:
        return own(True)
    bounds = own(False)
    point = shift.moved(base.point, p, s, np.where(fixed, 0.0, spent[0] - b_ns))
    if bounds.lower is not None and base.method in (FLUID, NETWORK):
        point = _within(point, bounds.lower, bounds.upper)
    return StandIn(point, base.method, bounds.lower, bounds.upper)


def _layer_plan(p: Program, s: shift.Split) -> tuple[np.ndarray, Plan]:
    """The ``B`` ns of each run of ``p``'s layer (kbfast.measure.shift.plan) and ``p``'s fast-path plan, which
    every point of the layer shares (:meth:`kbfast.fast.plan.Plan.with_times`)."""
    plan = plan_fast(p)
    return shift.plan(p, s, lambda q: lower_schedule(q, plan)), plan


def _base(base: Program, s: shift.Split, fixed: np.ndarray, method: str) -> StandIn | None:
    """The base's point evaluated, when its timeline keeps the fabric idle across every moved run and holds
    each WAIT by its later class (kbfast.measure.shift); else None."""
    ev = _direct(base, None, method)
    apart = np.all(shift.gaps(base, s, ev.point)[~fixed] < 0.0) and shift.held(base, s, ev.point)
    return ev if apart else None


def last_pe_time_by_category(p: Program, res, piece: Piece, lower, timer: CommandTimer) -> dict[str, float]:
    """The last-finishing working PE's time from the launch barrier, by category (STEP_CATEGORIES):

    * each GEMM command's span goes to the stage that binds it (its largest busy stage, ``timer.stages``):
      up to that stage's busy time to its category (``STAGE_CATEGORY``: HBM streaming for the tile DMA, GEMM
      compute for the compute slot and TCM), the rest of the span (fill, drain, the other stages' waits) to
      the other of the two.  A decode GEMM whose tiles wait on their B reads is HBM streaming, not compute;
    * MATH; the IPCQ sends and receives (collective, waiting for peers included); loads and stores (HBM
      streaming); and the rest of its time from the launch barrier (``other``)."""
    finish = res.agent_finish_ns[:len(piece.nodes)]
    a = int(np.argmax(finish))
    ops = p.ops_of(a)
    code = p.op_code[ops]
    took = res.op_end_ns[ops] - res.op_issue_ns[ops]
    out = dict.fromkeys(STEP_CATEGORIES, 0.0)
    mine = np.isin(lower.command_op, ops)
    starts = np.asarray(lower.command_op, np.int64)[mine]
    ends = np.asarray(lower.command_end, np.int64)[mine]
    spans = res.op_end_ns[ends] - res.op_issue_ns[starts]
    node = int(p.agent_node[a])
    for span, cid in zip(spans.tolist(), np.asarray(lower.command_id, np.int64)[mine].tolist()):
        busy = timer.stages(piece.commands[cid], node)
        bound = max(busy, key=busy.get)
        cat = STAGE_CATEGORY[bound]
        credit = min(span, busy[bound])
        out[cat] += credit
        out["gemm_compute" if cat == "hbm_stream" else "hbm_stream"] += span - credit
    dma = (code == Op.DMA_READ) | (code == Op.DMA_WRITE)
    out["hbm_stream"] += float(took[dma].sum())
    out["math"] = float(took[code == Op.MATH].sum())
    out["collective"] = float(took[(code == Op.SEND) | (code == Op.RECV)].sum())
    whole = float(finish[a] - p.launch_ns)
    rest = whole - sum(out.values())
    out["other"] = rest if rest > 1e-9 * whole else 0.0       # not a rounding residue of the sum
    return out


def runs_of(piece: Piece, layers: int, par: Parallel) -> int:
    """How often a step of ``layers`` layers runs ``piece``: the layers for a transformer layer, else the piece's
    own count; in a pipeline, per micro-batch, and the hand-off between every two stages."""
    if par.pp == 1:
        return layers if piece.name == "layer" else piece.repeat
    per = {"layer": layers, "hand-off": par.pp - 1}.get(piece.name, 1)
    return per * par.micro_batches


@dataclass
class StepResult:
    """A model step: its pieces' results (per mode), and the step's totals from ``mode``."""

    model: Model
    shape: Shape | None
    layout: str
    layers: int
    pieces: list[Piece]
    results: dict[str, list[PieceResult]]      # mode -> one result per piece
    mode: str                                  # the mode the totals come from
    refused: KbfastError | None = None         # why a later mode is missing (its refusal), the earlier kept
    choices: dict[str, dict] = field(default_factory=dict)   # auto's all-reduce choices (resolve_collectives)
    parallel: Parallel = Parallel()            # pipeline stages, replicas, micro-batches
    pipeline: dict[str, PipelineTiming] = field(default_factory=dict)   # mode -> the recurrence on its pieces
    whole: dict[str, tuple] = field(default_factory=dict)   # mode -> the whole pipeline: (makespan, period, lo, hi)

    def with_mode(self, other: StepResult) -> StepResult:
        """This step with ``other``'s modes added (the same step measured in another mode); the totals stay
        from this step's mode."""
        return dataclasses.replace(self, results={**self.results, **other.results},
                                   pipeline={**self.pipeline, **other.pipeline}, whole={**self.whole, **other.whole})

    def repeat(self, piece: Piece) -> int:
        """How often the step runs ``piece`` (:func:`runs_of`)."""
        return runs_of(piece, self.layers, self.parallel)

    def latency_ns(self, mode: str | None = None) -> float:
        """The step: every piece's latency times how often the step runs it (identical layers once); a
        pipeline's makespan (kbfast.measure.pipeline), in exact mode the whole pipeline's replay."""
        mode = mode or self.mode
        if self.parallel.pp > 1:
            return self.whole[mode][0] if mode in self.whole else self.pipeline[mode].makespan_ns
        return sum(self.repeat(p) * r.latency_ns for p, r in zip(self.pieces, self.results[mode]))

    def period_ns(self, mode: str | None = None) -> float:
        """What a step costs among steps: a pipeline's period (its next round's micro-batches enter as their
        tokens come back, kbfast.measure.pipeline), else the step's latency."""
        mode = mode or self.mode
        if self.parallel.pp > 1:
            return self.whole[mode][1] if mode in self.whole else self.pipeline[mode].period_ns
        return self.latency_ns(mode)

    def pipeline_method(self, mode: str | None = None) -> str:
        """How a pipelined step's totals were made in ``mode``: the whole pipeline replayed, or composed by the
        recurrence (kbfast.measure.pipeline); "" without a pipeline."""
        if self.parallel.pp == 1:
            return ""
        return WHOLE if (mode or self.mode) in self.whole else RECURRENCE

    def bounds_ns(self) -> tuple[float, float]:
        """The latency's lower and upper bounds: the pieces' summed; a pipeline replayed whole, the replay's;
        composed by the recurrence, the last stage's roofline floor (no schedule does its work quicker) and
        the recurrence on the pieces' upper bounds (the recurrence on their lower bounds is no bound: in the
        pipeline a piece starts before the one it follows has ended on every PE, kbfast.measure.pipeline)."""
        res = self.results[self.mode]
        if self.mode in self.whole:
            return self.whole[self.mode][2:]
        if self.parallel.pp > 1:
            by = {p.name: r for p, r in zip(self.pieces, res)}
            par = self.parallel
            hi = schedule(terms_of(by, "hi_ns"), par.pp, par.micro_batches, self.layers // par.pp).makespan_ns
            return self.floors().bound()[1], hi
        return (sum(self.repeat(p) * r.lo_ns for p, r in zip(self.pieces, res)),
                sum(self.repeat(p) * r.hi_ns for p, r in zip(self.pieces, res)))

    def macs(self) -> int:
        """The step's useful multiply-accumulates."""
        return sum(self.repeat(p) * p.macs for p in self.pieces)

    def working_pes(self) -> int:
        """The PEs the step runs on: its first piece's, on every stage."""
        return len(self.pieces[0].nodes) * self.parallel.pp

    def mac_util(self, t: Tables) -> float:
        """Useful MACs over what the working PEs' GEMM units could do in the step's time."""
        n_pe = self.working_pes()
        lat = self.latency_ns()
        return self.macs() / (lat * n_pe * t.spec.pe.gemm_macs_per_ns) if lat > 0 else 0.0

    def floors(self, mode: str | None = None) -> Floors:
        """The step's roofline floors (kbfast.measure.roofline): every piece's, times how often the step runs it;
        a pipeline's, its last stage's (no stage works more): its layers, the LM head and the hand-off in,
        per micro-batch."""
        out = ZERO
        par = self.parallel
        for p, r in zip(self.pieces, self.results[mode or self.mode]):
            runs = self.repeat(p) if par.pp == 1 else par.micro_batches * {
                "layer": self.layers // par.pp, "head": 1, "hand-off": 1}.get(p.name, 0)
            out = out + r.floors * runs
        return out

    def roofline(self) -> dict:
        """The step's roofline as a report shows it (kbfast.measure.roofline.roofline_row)."""
        return roofline_row(self.floors(), self.latency_ns())

    def breakdown(self) -> dict[str, float]:
        """The critical path of the step by category: each piece's, times its repeat count; a pipeline's, each
        piece's in the share of its latency its terms spend on the recurrence's critical path, scaled to the
        step's latency (the whole pipeline replayed overlaps its pieces a little)."""
        out = dict.fromkeys(STEP_CATEGORIES, 0.0)
        weight = {p.name: self.repeat(p) for p in self.pieces}
        if self.parallel.pp > 1 and self.mode in self.pipeline:
            path = self.pipeline[self.mode].on_path
            spent = {"layer": path["layer"], "head": path["head"], "hand-off": path["send"] + path["recv"],
                     "token": path["token"] + path["token_out"]}
            scale = self.latency_ns() / self.pipeline[self.mode].makespan_ns    # the whole replayed: its share
            weight = {p.name: scale * spent[p.name] / r.latency_ns if r.latency_ns > 0 else 0.0
                      for p, r in zip(self.pieces, self.results[self.mode])}
        for p, r in zip(self.pieces, self.results[self.mode]):
            for k, v in r.breakdown.items():
                out[k] += weight[p.name] * v
        return out


@dataclass(frozen=True)
class StepPlan:
    """A model step checked and compiled (:func:`plan_step`), before any kernel runs."""

    model: Model
    shape: Shape | None
    layout: str
    layers: int | None
    method: str
    pieces: list
    parallel: Parallel = Parallel()


def plan_step(t: Tables, model: Model, shape: Shape | None = None, layout: str = "tp_pes", layers: int | None = None,
              method: str = "hybrid", collective: str | None = None, sequence_parallel: bool | None = None,
              overlap: str | None = None, fit_hbm: bool = True, pp: int | None = None, dp: int | None = None,
              micro_batches: int | None = None, ep: int | None = None, hot_expert: float | None = None) -> StepPlan:
    """Check the step's inputs and compile ``model`` into its pieces (kbfast.workloads.model.compile_model): pure
    Python, no kernel, so that a command refuses bad input before a first run compiles anything.  ``layers``
    (default: all) says how many layers the step counts; ``method`` is the fast path's (:func:`evaluate_piece`);
    ``collective`` runs the all-reduces (default: the model's own; ``auto`` is chosen in :func:`run_step`);
    ``sequence_parallel``, ``overlap``, ``fit_hbm``, ``pp``, ``dp``, ``micro_batches``, ``ep`` and
    ``hot_expert``: kbfast.workloads.model.compile_model's."""
    check_fast_choice(method)
    par = Parallel()
    if isinstance(model, Transformer):
        given = layers
        layers = model.layers if layers is None else layers
        if not 1 <= layers <= model.layers:
            raise KbfastError(f"--layers {layers}: {model.name} has {model.layers} layers; use 1 to {model.layers}")
        par = split(t, pp, dp, micro_batches, (shape or shape_for(model)).batch)
        if par.pp > 1 and given not in (None, model.layers):
            raise KbfastError(f"--layers {given} with --pp {par.pp}: a pipeline runs every layer, "
                              f"{model.layers // par.pp if model.layers % par.pp == 0 else '?'} per stage\n"
                              "  hint: drop --layers")
    else:
        refuse_unread(model, {"layers": layers, "pp": pp, "dp": dp, "micro_batches": micro_batches, "ep": ep,
                              "hot_expert": hot_expert})
    return StepPlan(model, shape, layout, layers, method,
                    compile_model(t, model, shape, layout, collective=collective, sequence_parallel=sequence_parallel,
                                  overlap=overlap, fit_hbm=fit_hbm, pp=pp, dp=dp, micro_batches=micro_batches,
                                  ep=ep, hot_expert=hot_expert), par)


def run_step(t: Tables, router: Router, plan: StepPlan, modes: tuple[str, ...] = ("fast",),
             bounds: bool = True) -> StepResult:
    """Evaluate the pieces of ``plan`` in each of ``modes``.  When a mode after the first is refused (a
    KbfastError: over the memory limit, say), the modes before it are kept and the refusal is in ``refused``.
    ``bounds`` False: the fast path's points alone (:func:`evaluate_piece`)."""
    timer = command_timer(t, router)
    launch = {p.nodes.tobytes(): _launch_ns(t, router, p.nodes) for p in plan.pieces}
    pieces, choices = resolve_collectives(t, router, plan.pieces, plan.method, launch)
    pieces = resolve_prefetches(t, router, pieces, plan.method, launch, timer)
    system = t.system_key
    results: dict[str, list[PieceResult]] = {}
    refused = None
    for m in modes:
        try:
            results[m] = [_memo_piece(system, t, router, p, m, timer, plan.method, launch[p.nodes.tobytes()], bounds)
                          for p in pieces]
        except KbfastError as err:
            if not results:
                raise
            refused = err
            break
    pipeline, whole = _pipeline(t, router, plan, pieces, results, timer, bounds) if plan.parallel.pp > 1 else ({}, {})
    return StepResult(plan.model, plan.shape, plan.layout, plan.layers or 1, pieces, results, modes[0], refused,
                      choices, plan.parallel, pipeline, whole)


def step_lower_ns(t: Tables, router: Router, plan: StepPlan) -> float:
    """A lower bound on the fast path's period of ``plan``'s step (its latency without a pipeline), before any
    point is timed: ``kbfast search`` never times a candidate this proves beaten (docs/search.md
    "Evaluation").

    * Without a pipeline the step is the sum of its pieces' runs, each at least its lower bound
      (:func:`_memo_lower`).
    * A pipeline composed by the recurrence (kbfast.measure.pipeline): its last stage serves its micro-batches
      first in, first out, so the second round's ``m`` micro-batches there follow the first round's end and
      the period is at least ``m x (L x layer + head)`` (``L`` layers a stage), each piece at least its lower
      bound.
    * A pipeline the fast path replays whole (its stand-in within the hybrid budget): NaN, no bound.

    ``auto`` all-reduces are chosen first (:func:`resolve_collectives`), and prefetches limited, as
    :func:`run_step` does."""
    timer = command_timer(t, router)
    launch = {p.nodes.tobytes(): _launch_ns(t, router, p.nodes) for p in plan.pieces}
    pieces, _ = resolve_collectives(t, router, plan.pieces, plan.method, launch)
    pieces = resolve_prefetches(t, router, pieces, plan.method, launch, timer)
    system = t.system_key
    lows = {p.name: _memo_lower(system, t, router, p, timer, launch[p.nodes.tobytes()]) for p in pieces}
    par, layers = plan.parallel, plan.layers or 1
    if par.pp == 1:
        return sum(runs_of(p, layers, par) * lows[p.name][0] for p in pieces)
    events = {name: n for name, (_, n) in lows.items()}
    if plan.method == "hybrid" and whole_events(events, layers, par.pp, par.micro_batches) <= \
            2 * DEFAULT_BUDGET_EVENTS:
        return np.nan
    return par.micro_batches * (layers // par.pp * lows["layer"][0] + lows["head"][0])


def _pipeline(t: Tables, router: Router, plan: StepPlan, pieces: list[Piece], results: dict, timer: CommandTimer,
              bounds: bool) -> tuple[dict, dict]:
    """A pipelined step (kbfast.measure.pipeline) in each mode: the recurrence on the pieces' results, and the
    whole pipeline replayed (rounds 1 and 2: the makespan and the period, with the first round's bounds) in
    exact mode, and on the fast path when the hybrid method's replay of its stand-in fits the budget; a whole
    pipeline over the memory limit stays composed."""
    par = plan.parallel
    per_stage = (plan.layers or 1) // par.pp
    pipeline, whole = {}, {}
    for m, res in results.items():
        pipeline[m] = schedule(terms_of({p.name: r for p, r in zip(pieces, res)}), par.pp, par.micro_batches,
                               per_stage)
        if m == "fast":
            estimates = {p.name: replay_events_estimate(r.program) for p, r in zip(pieces, res)}
            if plan.method != "hybrid" or whole_events(estimates, plan.layers, par.pp, par.micro_batches) > \
                    2 * DEFAULT_BUDGET_EVENTS:
                continue
        try:
            one, two = (evaluate_piece(t, router, pipeline_piece(t, pieces, par, per_stage, rounds), m, timer,
                                       plan.method, bounds=bounds and rounds == 1) for rounds in (1, 2))
        except MemoryBudgetError:          # too large to replay whole: composed (the row's method says so)
            continue
        whole[m] = (one.latency_ns, two.latency_ns - one.latency_ns, one.lo_ns, one.hi_ns)
    return pipeline, whole


def evaluate_step(t: Tables, router: Router, model: Model, shape: Shape | None = None, layout: str = "tp_pes",
                  layers: int | None = None, modes: tuple[str, ...] = ("fast",), method: str = "hybrid",
                  collective: str | None = None, sequence_parallel: bool | None = None,
                  overlap: str | None = None) -> StepResult:
    """:func:`plan_step` then :func:`run_step`: one step of ``model`` in each of ``modes``."""
    return run_step(t, router, plan_step(t, model, shape, layout, layers, method, collective, sequence_parallel,
                                         overlap), modes)


# -- the model workload kind --------------------------------------------------------------------------------

def _build(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    """The first piece of the model step (a transformer's layer) as its exact Program, its ``auto`` all-reduce
    chosen; a model point is measured as a whole step (:func:`step_row`), and this Program serves the link and
    PC tables."""
    piece = _prepare(t, router, w).pieces[0]
    launch = {piece.nodes.tobytes(): _launch_ns(t, router, piece.nodes)}
    piece = resolve_collectives(t, router, [piece], str(w["method"]), launch)[0][0]
    piece = resolve_prefetches(t, router, [piece], str(w["method"]), launch, command_timer(t, router))[0]
    return Built(build_piece(t, router, piece, TileLowering(piece.commands)), model=piece)


def model_shape(model, w: dict[str, Any]) -> Shape | None:
    """The step's shape from a model workload's fields (None for a model without one, which refuses them:
    kbfast.workloads.model.shape_for)."""
    return shape_for(model, w["phase"], None if w["batch"] is None else int(w["batch"]), w["seq"], w["kv_len"])


def _model_fields(label: str, w: dict[str, Any]) -> dict[str, Any]:
    """A model point's fields: the step options its model does not read are refused (``workload.phase`` on the
    TP MLP, say), and a transformer's phase and batch defaults filled in (decode, 1) so its row names them;
    the shape itself is checked when the point runs.  A model that cannot be read is left to the point, which
    records why."""
    try:
        model = _model_of(str(w["model"]))
    except KbfastError:
        return w
    refuse_unread(model, w, label)
    if model.kind != "transformer":
        return w
    return {**w, **{k: v for k, v in STEP_DEFAULTS.items() if w[k] is None}}


_MODELS: dict[tuple, Any] = {}


def _model_of(name: str):
    """``load_model(name)``, remembered while the file is unchanged (a sweep expands thousands of points)."""
    path = Path(name)
    stat = path.stat() if path.is_file() else None
    key = (name, stat and (stat.st_mtime_ns, stat.st_size))
    if key not in _MODELS:
        _MODELS[key] = load_model(name)
    return _MODELS[key]


def collectives_used(pieces: list[Piece]) -> str:
    """The all-reduce algorithm the step's pieces ran: one name when they agree, else ``piece:algorithm`` pairs
    (``layer:hier2d,head:lrab``); "" without an all-reduce."""
    used = {p.name: p.collective for p in pieces if p.allreduce}
    if len(set(used.values())) <= 1:
        return next(iter(used.values()), "")
    return ",".join(f"{k}:{v}" for k, v in used.items())


def step_row(step: StepResult, t: Tables) -> dict[str, Any]:
    """The metric row of a model step: latency with bounds, tokens/s or time to first token, MAC
    utilisation, the critical path by category (``critical_path_<category>_ns``), the fast method, the
    all-reduce algorithms and the overlap a transformer's layer ran ("" for the other models)."""
    res = step.results[step.mode]
    lat = step.latency_ns()
    lo, hi = step.bounds_ns()
    out = {"latency_ns": lat, "latency_lo_ns": lo, "latency_hi_ns": hi,
           "busbw_gbps": np.nan, "effective_bw_gbps": np.nan, "contention": np.nan,
           "n_ranks": step.working_pes(), "mac_util": step.mac_util(t),
           "method": ",".join(sorted({r.method for r in res} | ({step.pipeline_method()} - {""}))),
           "collective_used": collectives_used(step.pieces),
           "overlap": next((p.info["layer"]["overlap"] for p in step.pieces if "layer" in p.info), "")}
    if step.shape is not None:
        out["tokens_per_s" if step.shape.phase == "decode" else "time_to_first_token_ns"] = \
            step.shape.batch / (step.period_ns() * 1e-9) if step.shape.phase == "decode" else lat
        out["step_period_ns"] = step.period_ns()
    out.update({f"critical_path_{k}_ns": v for k, v in step.breakdown().items()})
    return out


BOUNDS_CHOICES = (None, True, False, "lower")     # workload.bounds: with bounds, the point alone, a lower bound


def _check_bounds(w: dict[str, Any]) -> None:
    """Refuse a ``workload.bounds`` that is not one of :data:`BOUNDS_CHOICES`."""
    if w.get("bounds") not in BOUNDS_CHOICES:
        raise KbfastError(f"workload.bounds must be true, false or lower (got {w['bounds']!r}): false times the "
                          "fast path's point alone, lower its lower bound alone")


def _unless_none(field: str, check: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    """The check of a field whose None means its default: ``check(value)`` when a value is given."""
    return lambda w: None if w[field] is None else check(w[field])


# the fields a sweep checks before any point runs (WorkloadKind.checks)
_CHECKS = (("layout", lambda w: check_layout(str(w["layout"]))),
           ("method", check_method),
           ("phase", _unless_none("phase", check_phase)), ("collective", _unless_none("collective", check_choice)),
           ("overlap", _unless_none("overlap", check_overlap)), ("bounds", _check_bounds))


def _prepare(t: Tables, router: Router, w: dict[str, Any]) -> StepPlan:
    """The step's plan (:func:`plan_step`): the model read, its shape and layout checked and compiled, before
    any kernel compiles."""
    model = _model_of(str(w["model"]))
    refuse_unread(model, w)
    _check_bounds(w)
    layers = None if w["layers"] is None else int(w["layers"])
    return plan_step(t, model, model_shape(model, w), str(w["layout"]), layers, str(w["method"]), w["collective"],
                     w["sequence_parallel"], w["overlap"], pp=_int_or_none(w["pp"]), dp=_int_or_none(w["dp"]),
                     micro_batches=_int_or_none(w["micro_batches"]), ep=_int_or_none(w["ep"]),
                     hot_expert=None if w["hot_expert"] is None else float(w["hot_expert"]))


def _int_or_none(v):
    """A sweep field's integer (a spec's YAML and an axis give ints; a CSV's read gives floats), or None."""
    return None if v is None else int(v) if isinstance(v, float) and v == int(v) else v


def _measure(t: Tables, router: Router, w: dict[str, Any], mode: str, prepared: Prepared) -> Measurement:
    """One model step (:func:`run_step`) in ``mode``: its metric row and the step's result; ``bounds`` False:
    the fast path's point alone (``kbfast search``: about a third quicker; its rows' bounds NaN); ``lower``:
    only a lower bound on its period (:func:`step_lower_ns`, the row's ``period_lo_ns``)."""
    if w.get("bounds") == "lower":
        if mode != "fast":
            raise KbfastError("workload.bounds: lower bounds the fast path's point; exact mode has none to bound\n"
                              "  hint: drop --exact, or set workload.bounds to true")
        return Measurement({"period_lo_ns": step_lower_ns(t, router, prepared.plan)})
    step = run_step(t, router, prepared.plan, (mode,), bounds=w.get("bounds") is not False)
    return Measurement(step_row(step, t), step)


def _forget() -> None:
    """Empty the GEMM command timings, the pieces' results, layers and bases, the launches and the traced
    collectives: a cold step."""
    _MEMO.clear()
    _STAGES.clear()
    _PIECES.clear()
    _SPLITS.clear()
    _PLANS.clear()
    _BASES.clear()
    _LAUNCH.clear()
    _CHOSEN.clear()
    _ALONE.clear()
    forget_traces()


def _measure_batch(t: Tables, router: Router, workloads: list[dict[str, Any]],
                   systems: list[SystemSpec]) -> list[dict[str, Any]]:
    """Model points of one system on the fast path: they share its tables and GEMM command timings."""
    return [_measure(t, router, w, "fast", Prepared(_prepare(t, router, w))).row for w in workloads]


MODEL = WorkloadKind(
    "model", "one step of a model: a transformer layer x layers + LM head, the TP MLP or the attention panels "
             "(kbfast run model)",
    {"model": "llama3_70b", "phase": None, "batch": None, "seq": None, "kv_len": None, "layers": None,
     "layout": "tp_pes", "method": "hybrid", "collective": None, "sequence_parallel": None, "overlap": None,
     "pp": None, "dp": None, "micro_batches": None, "ep": None, "hot_expert": None, "bounds": None},
    # phase and batch: decode and 1 for a transformer; collective: the model file's (auto by default);
    # overlap: prefetch for a transformer
    _build, _measure, _measure_batch, columns=("model", "phase", "batch", "layout"), kernels=("collectives",),
    resolve=_model_fields, batch_fields=("model", "phase", "batch", "seq", "kv_len", "layers", "layout", "method",
                                         "collective", "sequence_parallel", "overlap", "pp", "dp", "micro_batches",
                                         "ep", "hot_expert", "bounds"),
    batch_system_keys=(),                          # a batch shares one system: tables and timings
    max_batch=25,                                  # 0.1 s a point: small batches keep workers busy
    fast_kernels=("runs", "fast", "pipeline", "exact"),   # the stand-in is replayed exactly
    file_fields=(("model", load_model),), checks=_CHECKS, report="model", prepare=_prepare, forget=_forget)
