"""A GEMM whose C writes meet its reads, in its periodic steady state (docs/gemm.md "Fast path").

With several output tiles and a streamed operand, each tile's C write shares the PE link and the PCs with
the next tiles' reads. The max-plus recurrence (kbfast.fast.maxplus_gemm) leaves that out. What the overlap
adds is its *excess*: ``x(n) = exact(n) - maxplus(n)`` for the GEMM's first ``n`` output tiles. Every
output tile's write meets the reads of the tiles after it in the same way, so after the first few output
tiles the excess grows by the same amount per output tile::

    x(n) = x(n3) + d (n - n3),    d = (x(n3) - x(n2)) / (n3 - n2) = (x(n2) - x(n1)) / (n2 - n1)

The three prefixes (``PREFIX_OUT`` output tiles, at most ``prefix_k`` k tiles each) are short GEMMs of
the same tile shapes, replayed exactly (kbfast.exact). The write of one output tile meets only the first
reads of the next, so later k tiles add nothing to the excess, and the prefixes keep only a few. Two
checks guard the extrapolation: the two slopes agree, and the first prefix with ``K_CHECK`` more k tiles
has the same excess. Otherwise the prefixes have not reached the steady state and :func:`steady_window`
says so (None). The latency is then ``maxplus(N) + x(N)``.

Bounds: the recurrence alone is a lower bound. ``kbfast.fast.maxplus_gemm.gemm_upper`` is an upper bound
when a PC's read/write turnaround costs nothing (``hbm.switch_penalty_ns = 0``). So this method is used
only then.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from kbfast.exact import run_exact
from kbfast.fast.maxplus_gemm import gemm_fast
from kbfast.ir import ProgramBuilder
from kbfast.ir.tiling import GemmPlan, plan_gemm
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router

PREFIX_OUT = (4, 8, 12)     # output tiles of the three prefixes (at least; whole rows when N has fewer tiles)
K_CHECK = 2                 # more k tiles on the prefix that checks the excess does not depend on them
SAME_RTOL = 1e-6            # two slopes or excesses agree to this (relative; and absolutely to SAME_ATOL ns)
SAME_ATOL = 1e-6
CACHE = 4096                # prefix excesses kept (per system, PE, controllers and prefix plan)
_EXCESS: OrderedDict = OrderedDict()


def applies(t: Tables) -> bool:
    """Whether the steady state has an upper bound on ``t``: no PC read/write turnaround (module docstring)."""
    return t.spec.hbm.switch_penalty_ns == 0.0


def prefix_k(plan: GemmPlan) -> int:
    """The k tiles a prefix keeps: the pipeline's depth and two more, at least 4 (module docstring)."""
    return min(plan.k_tiles, max(4, plan.depth + 2))


def prefix_plan(t: Tables, plan: GemmPlan, n_out: int, k_tiles: int) -> GemmPlan:
    """A GEMM of ``plan``'s tile shapes, staging and epilogues with at least ``n_out`` output tiles (all of
    ``plan``'s when it has no more) in M -> N order: part of a row of output tiles, or whole rows, and at
    most ``k_tiles`` k tiles."""
    tile = t.spec.pe.tile
    if n_out >= plan.n_out:
        m, n = plan.m, plan.n
    elif plan.n_tiles >= n_out:
        m, n = min(plan.m, tile.m), n_out * tile.n
    else:
        m, n = -(-n_out // plan.n_tiles) * tile.m, plan.n
    k = min(plan.k, k_tiles * tile.k)
    return plan_gemm(t.spec.pe, m, n, k, a_pinned=plan.a_pinned, b_pinned=plan.b_pinned, epilogues=plan.epilogues)


def steady_window(t: Tables, router: Router, plan: GemmPlan, nodes: tuple[int, int, int], times: np.ndarray,
                  system: str) -> float | None:
    """The pipeline window of ``plan`` (from its start to its last write) in the steady state: the
    recurrence's window (``gemm_fast`` on ``times``, ``plan``'s :func:`~kbfast.fast.maxplus_gemm.dma_times`
    row) plus the excess ``x(N)`` (module docstring); None when the prefixes are not yet periodic, or when
    the first prefix with ``K_CHECK`` more k tiles has another excess.  ``nodes``: the PE's pe_dma, its
    controller and B's; ``system``: a key naming ``t``'s system."""
    times = times.copy()
    times[5] = 0.0                               # the prefixes load nothing up front: windows only
    window = float(gemm_fast([plan], times[None, :])[0, 1])
    k_tiles = prefix_k(plan)
    plans: list[GemmPlan] = []
    for n in PREFIX_OUT:                         # strictly more output tiles each (whole rows may round up)
        plans.append(prefix_plan(t, plan, max(n, plans[-1].n_out + 1 if plans else 0), k_tiles))
        if plans[-1].n_out >= plan.n_out:        # the whole GEMM's output tiles: its excess, measured
            break
    x = [_excess(t, router, p, nodes, times, system) for p in plans]
    if plan.k_tiles > k_tiles:                   # the k tiles left out must add nothing to the excess
        wider = prefix_plan(t, plan, plans[0].n_out, k_tiles + K_CHECK)
        if not _close(_excess(t, router, wider, nodes, times, system), x[0]):
            return None
    if plans[-1].n_out >= plan.n_out:
        return window + x[-1]
    (n1, n2, n3), (x1, x2, x3) = (p.n_out for p in plans), x
    d12, d23 = (x2 - x1) / (n2 - n1), (x3 - x2) / (n3 - n2)
    return window + x3 + d23 * (plan.n_out - n3) if _close(d23, d12) else None


def _close(a: float, b: float) -> bool:
    """Two excesses, or two slopes, the same but for rounding (``SAME_RTOL``, ``SAME_ATOL``)."""
    return bool(np.isclose(a, b, rtol=SAME_RTOL, atol=SAME_ATOL))


def _excess(t: Tables, router: Router, plan: GemmPlan, nodes: tuple[int, int, int], times: np.ndarray,
            system: str) -> float:
    """``plan``'s exact window less its recurrence's (its tile transfers are ``times``'s: same tile bytes,
    same endpoints), remembered per (system, nodes, plan)."""
    key = (system, nodes, plan)
    if key not in _EXCESS:
        pe, own, src_b = nodes
        a_bytes, b_bytes, _ = plan.operand_bytes()
        b = ProgramBuilder(t, router, name="gemm prefix")
        agent = b.pe_agent(pe)
        b.start(agent)
        done = b.gemm(agent, plan, (own, 0), (src_b, a_bytes), (own, a_bytes + b_bytes))
        res = run_exact(b.build())
        exact = float(res.op_end_ns[done] - res.op_begin_ns[1])      # from the command's marker
        _EXCESS[key] = exact - float(gemm_fast([plan], times[None, :])[0, 1])
        if len(_EXCESS) > CACHE:
            _EXCESS.popitem(last=False)
    _EXCESS.move_to_end(key)
    return _EXCESS[key]
