"""Memory budget: estimate what a stage will allocate from sizes known before it runs, and refuse beyond a limit.

A runaway input (thousands of SIPs, a 100x100 cube mesh, a flat ring over every PE of whatif_256) would
otherwise fill the machine's memory before anything fails.  Each heavy stage calls :func:`check` with an
estimate in bytes made from counts it knows before allocating (docs/limits.md has the coefficients and
what they were measured on):

* the topology tables (:func:`topology_bytes`: nodes and edges, from the cube template and the counts);
* the routing trees (:func:`routing_bytes`: one shortest-path tree per distinct source, a SIP's nodes);
* a collective's Program (:func:`program_bytes`: the ops its traced kernels emit, before the symbolic check);
* the fast schedule (:func:`fast_bytes`) and the exact replay (kbfast.sim.lowering.estimate_memory_bytes) of a
  built Program.

The limit bounds this process's resident memory.  By default it is what the process uses now plus
``DEFAULT_FRACTION`` of the memory the machine has available; ``KBFAST_MAX_MEMORY`` (a size such as
``30GiB``, or ``unlimited``) sets it instead.  A refusal is a :class:`MemoryBudgetError` (exit 2) naming the
stage, the estimate, the limit and how to raise it or shrink the input.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from kbfast.errors import KbfastError

ENV = "KBFAST_MAX_MEMORY"
DEFAULT_FRACTION = 0.8          # of the memory available when the stage starts
SMALL_BYTES = 32 << 20          # a stage needing less is not checked (the check reads /proc)
WARN_BYTES = 4 << 30            # a stage needing more is announced on stderr, even within the limit

# Bytes per counted item, measured as resident-set growth (docs/limits.md), rounded up.
TABLE_NODE_B = 12               # node kind, overhead, flit flag, names' share
TABLE_EDGE_B = 40               # src, dst, kind, bandwidth, length, plus the int64 temporaries while tiling
ROUTE_TREE_NODE_B = 4           # one int32 predecessor per SIP node per tree
PROGRAM_OP_B = 160              # symbolic replay outputs plus the Program's op arrays, per emitted op
EVAL_MIN_OP_B = 200             # the least an evaluator adds per op (the exact replay's; the fast path's is more)
FAST_OP_B = 520                 # the fast path's plans, three schedules (lower, point, upper), per op
FAST_ROUTE_EDGE_B = 64          # per route edge in the Program
EXACT_NS_PER_EVENT = 60         # exact replay speed (25-95 ns per event measured on 2 cores)
ROUTE_TREE_NS_PER_NODE = 100    # one Dijkstra tree, per SIP node


class MemoryBudgetError(KbfastError):
    """A stage would need more memory than the limit allows (module docstring)."""


def fmt_bytes(n: float) -> str:
    """``12.3 GiB``, ``512 MiB``: binary units, 3 significant digits; at most three digits before the point
    (1,000 KiB is ``0.977 MiB``)."""
    for unit, scale in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(n) >= 1000 * scale / 1024:
            v = n / scale
            return f"{v:,.0f} {unit}" if v >= 100 else f"{v:.3g} {unit}"
    return f"{int(n)} B"


def fmt_seconds(s: float) -> str:
    """``40 s``, ``12 min``, ``3.2 h``."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_bytes() -> int:
    """Memory the machine can still give (psutil if installed, else /proc/meminfo, else free pages)."""
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    avail = _meminfo("MemAvailable")
    if avail is not None:
        return avail
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def rss_bytes() -> int:
    """This process's resident memory now (0 if unknown)."""
    try:
        import psutil
        return int(psutil.Process().memory_info().rss)
    except ImportError:
        pass
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def limit_bytes() -> tuple[int | None, str]:
    """The limit on this process's resident memory (None: unlimited) and how it was set, for messages."""
    text = os.environ.get(ENV, "").strip()
    if text:
        if text.lower() in ("unlimited", "none", "off"):
            return None, f"{ENV}={text}"
        from kbfast.config.units import parse_size
        try:
            n = parse_size(text)
        except (KbfastError, ValueError) as err:
            raise KbfastError(f"{ENV}={text!r} is not a size: {err}; use e.g. {ENV}=30GiB or "
                              f"{ENV}=unlimited") from None
        if n <= 0:
            raise KbfastError(f"{ENV}={text!r} must be > 0; use e.g. {ENV}=30GiB or {ENV}=unlimited")
        return int(n), f"{ENV}={text}"
    avail = available_bytes()
    return rss_bytes() + int(DEFAULT_FRACTION * avail), \
        f"{DEFAULT_FRACTION:.0%} of the {fmt_bytes(avail)} available"


def check(what: str, need: int, shrink: str, seconds: float | None = None) -> None:
    """Refuse (:class:`MemoryBudgetError`) when this process's memory plus ``need`` bytes exceeds the limit; within
    it, a stage that needs more than ``WARN_BYTES`` says so on stderr (a warning line, nothing is stopped).

    ``what`` names the stage and the input's size ("the routing trees of ... (10,000 sources)"), ``shrink``
    says how to make the input smaller; ``seconds``, when known, is the time estimate shown beside it."""
    if need < SMALL_BYTES:
        return
    limit, how = limit_bytes()
    took = f" and about {fmt_seconds(seconds)}" if seconds is not None else ""
    have = rss_bytes() if limit is not None else 0
    if limit is None or have + need <= limit:
        if need > WARN_BYTES:
            sys.stderr.write(f"warning: {what} will need about {fmt_bytes(need)} of memory{took} (more than "
                             f"{fmt_bytes(WARN_BYTES)}); {ENV}=<size> sets the limit\n")
            sys.stderr.flush()
        return
    raise MemoryBudgetError(
        f"{what} would need about {fmt_bytes(need)} of memory{took}, over the limit of {fmt_bytes(limit)} "
        f"({how}; this process already uses {fmt_bytes(have)}).\n  hint: {shrink}; or raise the limit with "
        f"{ENV}=<size> (e.g. {ENV}={_suggest(have + need)}) if the machine has the memory")


def check_hbm_slice(spec, need: int, problem: str | Callable[[], str], fix: str) -> None:
    """Refuse (KbfastError) data that one PE keeps in its own HBM slice, ``need`` bytes, beyond the slice
    (``spec.hbm_slice_bytes``: the cube's HBM shared by its PEs).  ``problem`` says what does not fit and what
    the PE holds (a callable when it is costly to write: it is called only on a refusal, so that a sweep's
    points that fit pay nothing for it), ``fix`` how to make it smaller."""
    have = spec.hbm_slice_bytes
    if need > have:
        text = problem() if callable(problem) else problem
        raise KbfastError(f"{text}, {fmt_bytes(need)} in all, and its HBM slice holds {fmt_bytes(have)} "
                          f"(hbm.total_gib_per_cube {spec.hbm.total_gib_per_cube} GiB over "
                          f"{spec.hbm.slices_per_cube} PEs)\n  hint: {fix}")


def _suggest(n: int) -> str:
    """A round size at least ``n``: whole GiB, or whole TiB above 1 TiB."""
    if n > 2 ** 40:
        return f"{-(-n // 2 ** 40)}TiB"
    return f"{max(1, -(-n // 2 ** 30))}GiB"


def topology_bytes(n_nodes: int, n_edges: int) -> int:
    """The flat tables of a system with ``n_nodes`` nodes and ``n_edges`` directed edges."""
    return TABLE_NODE_B * n_nodes + TABLE_EDGE_B * n_edges


def routing_bytes(new_trees: int, old_trees: int, nodes_per_sip: int) -> int:
    """``new_trees`` more shortest-path trees beside ``old_trees``: each is held once in a list and once in
    the stacked array the route composition reads, which is rebuilt (old and new copies meet)."""
    return ROUTE_TREE_NODE_B * nodes_per_sip * (2 * new_trees + old_trees)


def routing_seconds(new_trees: int, nodes_per_sip: int) -> float:
    """About how long computing ``new_trees`` shortest-path trees over ``nodes_per_sip`` nodes each takes."""
    return ROUTE_TREE_NS_PER_NODE * 1e-9 * new_trees * nodes_per_sip


def program_bytes(n_ops: int) -> int:
    """A collective's symbolic replay and Program of ``n_ops`` ops, and the least an evaluator then needs
    (the exact replay's per-op state; the fast path needs more): generating what cannot be evaluated is
    refused before it starts."""
    return (PROGRAM_OP_B + EVAL_MIN_OP_B) * n_ops


def fast_bytes(n_ops: int, n_route_edges: int) -> int:
    """The fast path (kbfast.fast.evaluate.run_fast) on a Program."""
    return FAST_OP_B * n_ops + FAST_ROUTE_EDGE_B * n_route_edges


def exact_seconds(n_events: int) -> float:
    """About how long an exact replay of ``n_events`` events takes (kbfast.sim.lowering.replay_events_estimate)."""
    return EXACT_NS_PER_EVENT * 1e-9 * n_events
