"""A GEMM whose C writes meet its reads, in its periodic steady state (docs/gemm.md "The steady state").

With several output tiles and a streamed operand, each tile's C write shares the PE link and the PCs with
the next tiles' reads. The max-plus recurrence (kbfast.fast.maxplus_gemm) leaves that out. What the overlap
adds is its *excess*: ``x(n) = exact(n) - maxplus(n)`` for the GEMM's first ``n`` output tiles. Every
output tile's write meets the reads of the tiles after it in the same way, so after the first few output
tiles the excess grows by the same amount per output tile::

    x(n) = x(n3) + d (n - n3),    d = (x(n3) - x(n2)) / (n3 - n2) = (x(n2) - x(n1)) / (n2 - n1)

The three prefixes (``PREFIX_OUT`` output tiles; the pipeline's depth and two more k tiles, at least 4) are short GEMMs of
the same tiles, replayed exactly (kbfast.exact). The write of one output tile meets only the first reads
of the next, so later k tiles add nothing to the excess, and the prefixes keep only a few. Two checks
guard the extrapolation: the two slopes agree, and the first prefix with ``K_CHECK`` more k tiles has the
same excess. Otherwise the prefixes have not reached the steady state and :func:`steady_excess` says so
(None). The window is then ``maxplus(N) + x(N)``.

It applies (:func:`applies`) where its upper bound, ``kbfast.fast.maxplus_gemm.gemm_upper``, holds: a PC's
read/write turnaround costs nothing (``hbm.switch_penalty_ns = 0``). And every tile moves whole rounds of
the PE's PCs, so that every tile meets the PCs in the same order whatever its address; a prefix lays its
operands out with its own shape, and would otherwise meet them in another order.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import lru_cache

import numpy as np

from kbfast.exact import run_exact
from kbfast.fast.maxplus_gemm import gemm_fast
from kbfast.ir import ProgramBuilder
from kbfast.ir.tiling import GemmPlan, plan_gemm
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.gemm import operand_addresses

PREFIX_OUT = (4, 8, 12)     # output tiles of the three prefixes (at least; whole rows when N has fewer tiles)
K_CHECK = 2                 # more k tiles on the prefix that checks the excess does not depend on them
SAME_RTOL = 1e-6            # two slopes or excesses agree to this, relatively, or to SAME_ATOL ns
SAME_ATOL = 1e-6
CACHE_SIZE = 4096           # prefix excesses and fits kept
_EXCESS: OrderedDict[tuple, float] = OrderedDict()             # (system, routing, nodes, prefix plan) -> x
_FITS: OrderedDict[tuple, tuple | None] = OrderedDict()        # (system, routing, nodes, ..., prefixes) -> fit

Tiles = tuple[int, int, int]    # a prefix's (m, n, k) tiles


def pc_round_bytes(t: Tables) -> int:
    """One round of a PE's PCs: ``hbm.pcs_per_pe`` bursts (consecutive bursts go to consecutive PCs)."""
    return t.spec.hbm.pcs_per_pe * t.spec.hbm.burst_bytes


def applies(t: Tables, plan: GemmPlan, addresses: tuple[int, ...] = ()) -> bool:
    """Whether the steady state holds with its bounds for ``plan`` on ``t`` (module docstring): no PC
    read/write turnaround, and every tile (and each operand address in ``addresses``) a whole number of PC
    rounds."""
    rounds = pc_round_bytes(t)
    return t.spec.hbm.switch_penalty_ns == 0.0 and all(
        x % rounds == 0 for x in (plan.a_tile_bytes, plan.b_tile_bytes, plan.c_tile_bytes, *addresses))


@lru_cache(maxsize=CACHE_SIZE)
def _prefix_tiles(m_tiles: int, n_tiles: int, k_tiles: int, depth: int) -> tuple[Tiles, ...]:
    """The prefixes of a GEMM of these tiles and pipeline depth: at least ``PREFIX_OUT`` output tiles each,
    strictly more each time, in M -> N order (part of a row of output tiles, or whole rows), the depth and
    two more k tiles (at least 4); or, when one would have all the GEMM's output tiles, that one alone.
    Remembered: a sweep asks again."""
    k, out = min(k_tiles, max(4, depth + 2)), []
    for n in PREFIX_OUT:
        n = max(n, out[-1][0] * out[-1][1] + 1 if out else 0)
        if n >= m_tiles * n_tiles:                           # the whole GEMM's output tiles: measured
            return ((m_tiles, n_tiles, k),)
        out.append((1, n, k) if n_tiles >= n else (-(-n // n_tiles), n_tiles, k))
    return tuple(out)


def steady_excess(t: Tables, router: Router, plan: GemmPlan, nodes: tuple[int, int, int],
                  times: np.ndarray) -> float | None:
    """The excess ``x(N)`` of ``plan`` over its recurrence's window (module docstring), or None when its
    prefixes are not yet in the steady state.  ``nodes``: the PE's pe_dma, its controller and B's;
    ``times``: ``plan``'s :func:`~kbfast.fast.maxplus_gemm.dma_times` row (a prefix's tile transfers are the
    same).  Remembered per (system, routing, nodes, pinning, epilogues, prefixes)."""
    system = t.system_key
    shapes = _prefix_tiles(plan.m_tiles, plan.n_tiles, plan.k_tiles, plan.depth)
    k = shapes[0][2]
    check = (shapes[0][0], shapes[0][1], min(plan.k_tiles, k + K_CHECK)) if plan.k_tiles > k else None
    key = (system, router.policy, nodes, plan.a_pinned, plan.b_pinned, plan.epilogues, shapes, check)
    fit = _FITS.get(key, _FITS)
    if fit is _FITS:
        fit = _FITS[key] = _fit(t, router, plan, nodes, times, system, list(shapes), check)
        if len(_FITS) > CACHE_SIZE:
            _FITS.popitem(last=False)
    if fit is None:
        return None
    n3, x3, d = fit
    return x3 + d * (plan.n_out - n3)


def _fit(t: Tables, router: Router, plan: GemmPlan, nodes: tuple[int, int, int], times: np.ndarray, system: str,
         shapes: list[Tiles], check: Tiles | None) -> tuple[int, float, float] | None:
    """(n3, x3, d) of the prefixes ``shapes`` (one: measured, d = 0), None when a check fails."""
    excess = [_excess(t, router, plan, s, nodes, times, system) for s in shapes]
    if check is not None and not _same(_excess(t, router, plan, check, nodes, times, system), excess[0]):
        return None
    n = [m_tiles * n_tiles for m_tiles, n_tiles, _ in shapes]       # output tiles
    if len(shapes) == 1:
        return n[0], excess[0], 0.0
    d12, d23 = (excess[1] - excess[0]) / (n[1] - n[0]), (excess[2] - excess[1]) / (n[2] - n[1])
    return (n[2], excess[2], d23) if _same(d23, d12) else None


def _same(a: float, b: float) -> bool:
    """Two excesses, or two slopes, the same but for rounding (``SAME_RTOL``, ``SAME_ATOL``)."""
    return math.isclose(a, b, rel_tol=SAME_RTOL, abs_tol=SAME_ATOL)


def _excess(t: Tables, router: Router, plan: GemmPlan, tiles: Tiles, nodes: tuple[int, int, int],
            times: np.ndarray, system: str) -> float:
    """The exact window of the GEMM of ``tiles`` whole tiles (``plan``'s pinning and epilogues) less its
    recurrence's, remembered per (system, routing, nodes, plan)."""
    tile = t.spec.pe.tile
    p = plan_gemm(t.spec.pe, tiles[0] * tile.m, tiles[1] * tile.n, tiles[2] * tile.k, a_pinned=plan.a_pinned,
                  b_pinned=plan.b_pinned, epilogues=plan.epilogues)
    key = (system, router.policy, nodes, p)
    if key not in _EXCESS:
        pe, own, src_b = nodes
        a, b_addr, c = operand_addresses(p)
        b = ProgramBuilder(t, router, name="gemm prefix")
        agent = b.pe_agent(pe)
        b.start(agent)
        done = b.gemm(agent, p, (own, a), (src_b, b_addr), (own, c))
        res = run_exact(b.build())
        exact = float(res.op_end_ns[done] - res.op_begin_ns[1])      # from the command's marker
        loads_free = times.copy()
        loads_free[5] = 0.0                                           # the prefix loads nothing up front
        _EXCESS[key] = exact - float(gemm_fast([p], loads_free[None, :])[0, 1])
        if len(_EXCESS) > CACHE_SIZE:
            _EXCESS.popitem(last=False)
    _EXCESS.move_to_end(key)
    return _EXCESS[key]
