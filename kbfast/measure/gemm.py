"""The ``gemm`` workload kind: one GEMM on one PE, evaluated: which fast method, and the figures (kbfast run
gemm, GEMM sweeps, calibrate).

Fast methods (docs/gemm.md "Fast path"):

* ``maxplus``: the tile pipeline's max-plus recurrence with closed-form stage times (kbfast.fast.maxplus_gemm).  It
  equals exact mode wherever the GEMM's transfers never overlap: one output tile, or both operands pinned;
* ``maxplus_steady``: where the C writes share the PE link and PCs with the next tiles' reads, the recurrence
  plus what that overlap adds, measured on three short prefixes replayed exactly and extrapolated over the
  periodic steady state (kbfast.measure.gemm_steady); the recurrence is its lower bound and
  kbfast.fast.maxplus_gemm.gemm_upper its upper one.  Only where that upper bound holds and the prefixes meet
  the PCs as the GEMM does: no PC read/write turnaround (``hbm.switch_penalty_ns`` 0), every tile whole
  rounds of the PE's PCs (kbfast.measure.gemm_steady.applies);
* ``fluid``: the fast schedule over the GEMM's Program (kbfast.fast.evaluate), with lower and upper bounds,
  for such a GEMM without the steady state (a turnaround, tiles off the PC rounds, prefixes not yet periodic);
* ``maxplus_estimate``: the recurrence for such a GEMM above ``FLUID_MAX_TILES`` tiles, where the schedule
  would take seconds: it leaves the writes' interference out, so it is optimistic: it is its own lower bound
  (the recurrence is monotone in its service times, and a transfer is never faster than alone), and it has
  no upper bound (``latency_hi_ns`` NaN).  ``evaluate_gemm`` adds a ``warning`` saying so.

Exact mode replays the Program (kbfast.exact).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.fast.maxplus_gemm import dma_times, gemm_fast, upper_times
from kbfast.config.schema import SystemSpec
from kbfast.measure import gemm_steady
from kbfast.measure.methods import EXACT, FLUID, MAXPLUS, MAXPLUS_ESTIMATE, MAXPLUS_STEADY
from kbfast.measure.kind import Built, Measurement, Prepared, WorkloadKind
from kbfast.sim.lowering import tile_routes
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.gemm import (RESOURCES, GemmCase, check_staging, gemm_case, gemm_figures, gemm_metrics,
                                   gemm_nodes, parse_epilogues)

FLUID_MAX_TILES = 1 << 16
ESTIMATE_WARNING = ("maxplus_estimate: no steady state (a PC read/write turnaround, tiles off the PC rounds, or "
                    "prefixes not yet periodic) and more tiles than the fluid schedule takes, so the C writes' share "
                    "of the PE link and PCs is left out: latency_ns is optimistic (a lower bound), and there is no "
                    "upper bound")


def fast_method(t: Tables, case: GemmCase) -> str:
    """The fast method planned for ``case`` on ``t`` (see the module docstring; one of
    kbfast.measure.methods.GEMM_FAST_METHODS).  A ``maxplus_steady`` whose prefixes are not yet periodic
    falls back to :func:`fallback_method`."""
    plan = case.plan
    if plan.n_out == 1 or (plan.a_pinned and plan.b_pinned):
        return MAXPLUS
    return MAXPLUS_STEADY if gemm_steady.applies(t, plan) else fallback_method(case)


def fallback_method(case: GemmCase) -> str:
    """The method of a GEMM whose writes meet its reads, without the steady state: the fluid schedule up to
    ``FLUID_MAX_TILES`` tiles, else the recurrence alone."""
    return FLUID if case.plan.n_tile_total <= FLUID_MAX_TILES else MAXPLUS_ESTIMATE


def evaluate_gemm(t: Tables, router: Router, case: GemmCase, exact: bool = False) -> dict:
    """The figures of ``case`` (kbfast.workloads.gemm.gemm_figures), plus ``method`` and, where the method has
    them, ``latency_lo_ns`` and ``latency_hi_ns`` (NaN otherwise), and a ``warning`` for a ``maxplus_estimate``
    (``ESTIMATE_WARNING``; a sweep's rows leave it out: their method says it).  Builds the Program if the case
    has none and the method needs it."""
    rate = t.spec.pe.gemm_macs_per_ns
    if exact:
        case = with_program(t, router, case)
        res = run_exact(case.program)
        return {**gemm_metrics(case, res.op_begin_ns, res.op_end_ns, rate), "method": EXACT,
                "latency_lo_ns": np.nan, "latency_hi_ns": np.nan}
    row = maxplus_rows(t, router, [case])[0] if fast_method(t, case) != FLUID else None
    if row is None or takes_fluid(case, row):
        case = with_program(t, router, case)
        res = run_fast(case.program)
        _, lo, hi = res.latency_ns(0.0)
        return {**gemm_metrics(case, res.op_begin_ns, res.op_end_ns, rate), "method": FLUID,
                "latency_lo_ns": lo, "latency_hi_ns": hi}
    if row["method"] == MAXPLUS_ESTIMATE:
        row["warning"] = ESTIMATE_WARNING
    return row


def with_program(t: Tables, router: Router, case: GemmCase) -> GemmCase:
    """``case`` with its Program, built here if it has none (its size checked first: kbfast.workloads.gemm)."""
    if case.program is not None:
        return case
    return gemm_case(t, router, case.plan.m, case.plan.n, case.plan.k, case.staging, case.pe, case.b_from,
                     epilogues=case.plan.epilogues)


def takes_fluid(case: GemmCase, row: dict) -> bool:
    """Whether ``case``, whose :func:`maxplus_rows` row is ``row``, is better served by the fluid schedule: the
    recurrence alone (no steady state) on a GEMM the schedule takes."""
    return row["method"] == MAXPLUS_ESTIMATE and fallback_method(case) == FLUID


def maxplus_rows(t: Tables, router: Router, cases: list[GemmCase]) -> list[dict]:
    """The figures of every case by the max-plus recurrence, in one batched call, with ``method``: maxplus
    where that equals exact mode; else maxplus_steady (the recurrence and its steady-state excess,
    kbfast.measure.gemm_steady, between the recurrence and kbfast.fast.maxplus_gemm.gemm_upper) where it
    applies and its prefixes are periodic; else maxplus_estimate (the recurrence alone: a lower bound, no
    upper one; :func:`takes_fluid` says when the fluid schedule does better).  One batch of isolated latencies
    serves every tile transfer and up-front load (kbfast.fast.maxplus_gemm.dma_times).  Busy times are the
    recurrence's."""
    if not cases:
        return []
    memo: dict[tuple[str, str], tuple[int, int, int]] = {}
    nodes = []
    for c in cases:
        if (c.pe, c.b_from) not in memo:
            memo[c.pe, c.b_from] = gemm_nodes(t, c.pe, c.b_from)
        nodes.append(memo[c.pe, c.b_from])
    plans = [c.plan for c in cases]
    times = dma_times(tile_routes(t, router, nodes), plans, nodes)
    methods = [fast_method(t, c) for c in cases]
    steady = [i for i, m in enumerate(methods) if m == MAXPLUS_STEADY]
    up_plans = [plans[i] for i in steady]        # the steady ones again, for their upper bound: one batch
    both = gemm_fast(plans + up_plans, np.concatenate([times, upper_times(up_plans, times[steady])]))
    out, upper = both[:len(plans)], dict(zip(steady, both[len(plans):]))
    rate = t.spec.pe.gemm_macs_per_ns
    rows = []
    excesses: dict[tuple, float | None] = {}       # a batch's GEMMs of the same tiles share their excess
    for i, (c, o) in enumerate(zip(cases, out)):
        latency, window = float(o[0]), float(o[1])
        method, hi = (MAXPLUS, latency) if methods[i] == MAXPLUS else (MAXPLUS_ESTIMATE, np.nan)
        if methods[i] == MAXPLUS_STEADY:
            p = c.plan
            same = (nodes[i], p.m_tiles, p.n_tiles, p.k_tiles, p.a_pinned, p.b_pinned, p.epilogues)
            if same not in excesses:
                excesses[same] = gemm_steady.steady_excess(t, router, p, nodes[i], times[i])
            excess = excesses[same]
            if excess is not None:          # between the recurrence and its upper bound (both valid)
                method, hi = MAXPLUS_STEADY, float(upper[i][0])
                window = min(max(window + excess, window), float(upper[i][1]))
                latency = min(max(float(times[i, 5]) + window, latency), hi)
        row = gemm_figures(c, latency, window, dict(zip(RESOURCES, o[2:].tolist())), rate)
        row.update(method=method, latency_lo_ns=float(o[0]), latency_hi_ns=hi)
        rows.append(row)
    return rows


# -- the gemm workload kind ---------------------------------------------------------------------------------

INPUTS = ("m", "n", "k", "staging", "pe", "b_from")    # a GEMM's inputs, in its figures (not metrics)


def case_of(t: Tables, router: Router, w: dict[str, Any], program: bool = True) -> GemmCase:
    """The GEMM case of a ``gemm`` workload (``program=False``: its plan only, kbfast.workloads.gemm)."""
    return gemm_case(t, router, int(w["m"]), int(w["n"]), int(w["k"]), staging=str(w["staging"]), pe=str(w["pe"]),
                     b_from=w["b_from"], program=program, epilogues=parse_epilogues(t, w["epilogues"]))


def _prepare(t: Tables, router: Router, w: dict[str, Any]) -> GemmCase:
    """The GEMM's plan (no Program yet), its PE names and epilogues checked: bad input is refused before any
    kernel compiles."""
    case = case_of(t, router, w, program=False)
    gemm_nodes(t, case.pe, case.b_from)
    return case


def _build(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    case = case_of(t, router, w)
    return Built(case.program, gemm=case)


def gemm_row(figures: dict[str, Any], t: Tables) -> dict[str, Any]:
    """The metric row of a GEMM point from its figures (:func:`evaluate_gemm`, :func:`maxplus_rows`): the
    figures but the inputs and the warning (a sweep's method says it), with the PE's peak MAC rate and its
    HBM bandwidth."""
    out = {k: v for k, v in figures.items() if k not in INPUTS and k != "warning"}
    pe, link = t.spec.pe, t.spec.link
    out.update(busbw_gbps=np.nan, effective_bw_gbps=np.nan, contention=np.nan, n_ranks=1,
               peak_macs_per_ns=pe.gemm_macs_per_ns, hbm_gbps=min(link.pe_to_router.bw_gbs, link.router_hbm.bw_gbs))
    return out


def _measure(t: Tables, router: Router, w: dict[str, Any], mode: str, prepared: Prepared) -> Measurement:
    """One GEMM: latency (with any up-front loads), bounds where the method has them, the GEMM figures and
    the method; ``details`` holds the figures with the inputs (and a ``maxplus_estimate``'s warning).  A
    Program built for the fluid schedule or the exact replay is kept in ``prepared``, for the other mode and
    a trace."""
    case = prepared.plan
    if prepared.built is None and (mode == "exact" or fast_method(t, case) == FLUID):
        case = with_program(t, router, case)
        prepared.built = Built(case.program, gemm=case)
    figures = evaluate_gemm(t, router, prepared.built.gemm if prepared.built is not None else case, mode == "exact")
    return Measurement(gemm_row(figures, t), None, figures)


def _measure_batch(t: Tables, router: Router, workloads: list[dict[str, Any]],
                   systems: list[SystemSpec]) -> list[dict[str, Any]]:
    """GEMM points of one system on the fast path: the max-plus ones in one batched call, the others (the
    fluid schedule) one by one."""
    cases = [case_of(t, router, w, program=False) for w in workloads]
    batch = [i for i, c in enumerate(cases) if fast_method(t, c) != FLUID]
    out: list[dict[str, Any] | None] = [None] * len(cases)
    for i, row in zip(batch, maxplus_rows(t, router, [cases[i] for i in batch])):
        out[i] = None if takes_fluid(cases[i], row) else gemm_row(row, t)
    for i, c in enumerate(cases):
        if out[i] is None:
            out[i] = gemm_row(evaluate_gemm(t, router, c, False), t)
    return out


GEMM = WorkloadKind(
    "gemm", "one GEMM through a PE's tile pipeline (kbfast run gemm)",
    {"m": 512, "n": 512, "k": 512, "staging": "load_ref", "pe": "sip0.cube0.pe0", "b_from": None, "epilogues": ""},
    _build, _measure, _measure_batch, prepare=_prepare, dim_fields=("m", "n", "k"), columns=("m", "n", "k", "staging"),
    batch_fields=("m", "n", "k", "staging"), fast_kernels=("runs", "fast", "pipeline"), ignores=("ipcq.",),
    max_batch=25,   # a fluid GEMM takes up to seconds: progress and workers move every few seconds
    checks=(("staging", lambda w: check_staging(w["staging"])),), report="gemm")
