"""One GEMM on one PE, evaluated: which fast method, and the figures (kbfast run gemm, GEMM sweeps, calibrate).

Fast methods (docs/gemm.md "Fast path"):

* ``maxplus``: the tile pipeline's max-plus recurrence with closed-form stage times (kbfast.fast.maxplus_gemm).  It
  equals exact mode wherever the GEMM's transfers never overlap: one output tile, or both operands pinned;
* ``fluid``: the fast schedule over the GEMM's Program (kbfast.fast.evaluate), with lower and upper bounds,
  when the C writes share the PE link and PCs with the next tiles' reads;
* ``maxplus_estimate``: the recurrence for such a GEMM above ``FLUID_MAX_TILES`` tiles, where the schedule
  would take seconds: it leaves the writes' interference out, so it is optimistic: it is its own lower bound
  (the recurrence is monotone in its service times, and a transfer is never faster than alone), and it has
  no upper bound (``latency_hi_ns`` NaN; kbfast.fast.maxplus_gemm.gemm_upper is none once a PC's read/write
  turnaround costs time, docs/gemm.md).  ``evaluate_gemm`` adds a ``warning`` saying so.

Exact mode replays the Program (kbfast.exact).
"""

from __future__ import annotations

import numpy as np

from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.fast.maxplus_gemm import dma_times, gemm_fast
from kbfast.sim.lowering import tile_routes
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.gemm import RESOURCES, GemmCase, gemm_case, gemm_figures, gemm_metrics, gemm_nodes

FLUID_MAX_TILES = 1 << 16
ESTIMATE_WARNING = ("maxplus_estimate: more tiles than the fluid schedule takes, so the C writes' share of the PE "
                    "link and PCs is left out: latency_ns is optimistic (a lower bound), and there is no upper bound")


def fast_method(case: GemmCase) -> str:
    """The fast method of ``case`` (see the module docstring)."""
    plan = case.plan
    if plan.n_out == 1 or (plan.a_pinned and plan.b_pinned):
        return "maxplus"
    return "fluid" if plan.n_tile_total <= FLUID_MAX_TILES else "maxplus_estimate"


def evaluate_gemm(t: Tables, router: Router, case: GemmCase, exact: bool = False) -> dict:
    """The figures of ``case`` (kbfast.workloads.gemm.gemm_figures), plus ``method`` and, where the method has
    them, ``latency_lo_ns`` and ``latency_hi_ns`` (NaN otherwise), and a ``warning`` for a ``maxplus_estimate``
    (``ESTIMATE_WARNING``; a sweep's rows leave it out: their method says it).  Builds the Program if the case
    has none and the method needs it."""
    rate = t.spec.pe.gemm_macs_per_ns
    if exact or fast_method(case) == "fluid":
        case = with_program(t, router, case)
    if exact:
        res = run_exact(case.program)
        return {**gemm_metrics(case, res.op_begin_ns, res.op_end_ns, rate), "method": "exact",
                "latency_lo_ns": np.nan, "latency_hi_ns": np.nan}
    method = fast_method(case)
    if method == "fluid":
        res = run_fast(case.program)
        _, lo, hi = res.latency_ns(0.0)
        return {**gemm_metrics(case, res.op_begin_ns, res.op_end_ns, rate), "method": method,
                "latency_lo_ns": lo, "latency_hi_ns": hi}
    row = maxplus_rows(t, router, [case])[0]
    if row["method"] == "maxplus_estimate":
        row["warning"] = ESTIMATE_WARNING
    return row


def with_program(t: Tables, router: Router, case: GemmCase) -> GemmCase:
    """``case`` with its Program, built here if it has none (its size checked first: kbfast.workloads.gemm)."""
    if case.program is not None:
        return case
    return gemm_case(t, router, case.plan.m, case.plan.n, case.plan.k, case.staging, case.pe, case.b_from,
                     epilogues=case.plan.epilogues)


def maxplus_rows(t: Tables, router: Router, cases: list[GemmCase]) -> list[dict]:
    """The figures of every case by the max-plus recurrence, in one batched call, with ``method`` (maxplus
    where that equals exact mode, else maxplus_estimate) and the bounds where it is exact.  One batch of
    isolated latencies serves every tile transfer and up-front load (kbfast.fast.maxplus_gemm.dma_times).  No cases,
    no rows (a batch whose GEMMs all take the fluid schedule)."""
    if not cases:
        return []
    memo: dict[tuple[str, str], tuple[int, int, int]] = {}
    nodes = []
    for c in cases:
        if (c.pe, c.b_from) not in memo:
            memo[c.pe, c.b_from] = gemm_nodes(t, c.pe, c.b_from)
        nodes.append(memo[c.pe, c.b_from])
    plans = [c.plan for c in cases]
    out = gemm_fast(plans, dma_times(tile_routes(t, router, nodes), plans, nodes))
    rate = t.spec.pe.gemm_macs_per_ns
    rows = []
    for c, o in zip(cases, out):
        row = gemm_figures(c, float(o[0]), float(o[1]), dict(zip(RESOURCES, o[2:].tolist())), rate)
        est = fast_method(c) != "maxplus"
        # maxplus equals exact mode: its own bounds; the estimate is a lower bound and has no upper one
        row.update(method="maxplus_estimate" if est else "maxplus", latency_lo_ns=row["latency_ns"],
                   latency_hi_ns=np.nan if est else row["latency_ns"])
        rows.append(row)
    return rows
