"""Run probe cases through an evaluator, tabulate metrics and check kernbench's invariants.

Invariants (spec_pe §10, spec_memory §10.1): latency grows with distance
(SAME_CUBE local < remote best < remote worst < REMOTE_CUBE best < worst; probe
local < same half < cross half; H2D and D2H strictly increase with hops);
D2H >= H2D at every hop; util_aggregate <= 100 %; a single issuer has
util_single == util_aggregate; every PE of a launch starts at the barrier.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.measure.bottleneck import bottleneck, link_table
from kbfast.errors import KbfastError
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.measure.hybrid import run_hybrid
from kbfast.ir import Op, Program
from kbfast.measure.metrics import BREAKDOWN, breakdown, utilization
from kbfast.measure.rows import contended, contention_ns, rel_error
from kbfast.sim.lowering import hbm_constants
from kbfast.sim.result import Result
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.launch import launch_timing
from kbfast.measure.methods import CLOSED_FORM, FLUID
from kbfast.measure.kind import Built, Measurement, WorkloadKind
from kbfast.workloads.probe_catalogue import ProbeCase, build_catalogue, random_traffic, select

COLUMNS = ["case", "nbytes", "n_issuers", "latency_ns", "makespan_ns", "effective_bw_gbps", "util_single",
           "util_aggregate"]


@dataclass(frozen=True)
class Timing:
    """What an evaluator returns for one Program: per-op issue and end times (and bounds, if any)."""

    op_issue_ns: np.ndarray
    op_begin_ns: np.ndarray
    op_end_ns: np.ndarray
    op_end_lo_ns: np.ndarray | None = None
    op_end_hi_ns: np.ndarray | None = None
    shared: bool = False      # two flows were on one resource at once (the fast path's fluid ran)
    method: str = ""          # how the point estimate was made (kbfast.measure.methods); "" for exact mode


Evaluator = Callable[[Program], Timing]


def exact_evaluator(p: Program) -> Timing:
    """The exact replay's per-op times."""
    r = run_exact(p)
    return Timing(r.op_issue_ns, r.op_begin_ns, r.op_end_ns)


def fluid_evaluator(p: Program) -> Timing:
    """The fast path alone: closed form, or the fluid estimate where flows meet."""
    r = run_fast(p)
    return Timing(r.op_issue_ns, r.op_begin_ns, r.op_end_ns, r.op_end_lo_ns, r.op_end_hi_ns, r.shared,
                  FLUID if r.shared else CLOSED_FORM)


def fast_evaluator(p: Program) -> Timing:
    """The hybrid fast path (kbfast.measure.hybrid): a small contended Program is replayed exactly."""
    r = run_hybrid(p)
    return Timing(r.op_issue_ns, r.op_begin_ns, r.op_end_ns, r.op_end_lo_ns, r.op_end_hi_ns, r.shared, r.method)


# The evaluation behind each evaluator: a row's per-link and per-PC tables come from the same one.
RESULT_OF: dict[Evaluator, Callable[[Program], Result]] = {exact_evaluator: run_exact, fast_evaluator: run_hybrid,
                                                           fluid_evaluator: run_fast}


def resource_tables(t: Tables, router: Router, case: ProbeCase, row: pd.Series | dict,
                    evaluate: Evaluator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-link table, per-PC table) of one probe row (:func:`evaluate_case`), from the evaluation behind
    it; link utilisation is over the row's makespan, the span of its bottleneck figure."""
    res = RESULT_OF[evaluate](case.program(t, router, int(row["nbytes"])))
    return link_table(res.edges, float(row["makespan_ns"])), res.pcs


def evaluate_case(t: Tables, router: Router, case: ProbeCase, nbytes: int, evaluate: Evaluator,
                  program: Program | None = None) -> dict:
    """One row of metrics of ``case`` at ``nbytes`` per issuer; ``program``: the case's Program, when the
    caller has built it already."""
    p = case.program(t, router, nbytes) if program is None else program
    timing = evaluate(p)
    row: dict = {"case": case.name, "nbytes": nbytes, "n_issuers": case.n_issuers, "group": case.group}
    if case.kind == "launch":
        starts = timing.op_begin_ns[p.op_code == Op.START]
        launch = launch_timing(t, router, p.agent_node)
        row.update(latency_ns=float(starts.max()), makespan_ns=float(starts.max()), effective_bw_gbps=0.0,
                   util_single=0.0, util_aggregate=0.0, start_spread_ns=float(starts.max() - starts.min()),
                   barrier_slack_ns=float(starts.min() - launch.pe_arrival_ns.max()))
        return row
    dma = np.flatnonzero((p.op_code == Op.DMA_WRITE) | (p.op_code == Op.DMA_READ))
    lat = timing.op_end_ns[dma] - timing.op_issue_ns[dma]
    makespan = float(timing.op_end_ns[dma].max() - timing.op_issue_ns[dma].min())
    routes = [p.route(int(p.op_route[o])) for o in dma]
    eff, single, agg = utilization(t, routes, nbytes, makespan)
    row.update(latency_ns=float(lat.mean()), makespan_ns=makespan, effective_bw_gbps=eff, util_single=single,
               util_aggregate=agg)
    if timing.op_end_lo_ns is not None:
        start = timing.op_issue_ns[dma].min()
        row.update(latency_lo_ns=float((timing.op_end_lo_ns[dma] - timing.op_issue_ns[dma]).mean()),
                   latency_hi_ns=float((timing.op_end_hi_ns[dma] - timing.op_issue_ns[dma]).mean()),
                   makespan_lo_ns=float(timing.op_end_lo_ns[dma].max() - start),
                   makespan_hi_ns=float(timing.op_end_hi_ns[dma].max() - start),
                   method=timing.method)
        row.update(contention_ns=contention_ns(makespan, row["makespan_lo_ns"]),
                   contention=contended(makespan, row["makespan_lo_ns"]))
    if case.n_issuers == 1 and case.kind != "d2h":
        o = int(dma[0])
        rev = p.route(int(p.op_rroute[o])) if case.kind == "pe_dma" else None
        parts = breakdown(t, routes[0], rev, nbytes, float(lat[0]),
                          float(timing.op_begin_ns[o] - timing.op_issue_ns[o]), hbm_constants(t.spec).commit_ns)
        row.update({breakdown_column(k): v for k, v in parts.items()})
    row.update(bottleneck(p, makespan))
    return row


def breakdown_column(category: str) -> str:
    """Column of a kernbench breakdown category in the probe table, e.g. ``bd_noc_mesh_ns``."""
    return f"bd_{category}_ns"


def run_probes(t: Tables, router: Router, cases: list[ProbeCase], sizes: list[int],
               evaluate: Evaluator = exact_evaluator, compare: bool = False) -> pd.DataFrame:
    """One row per (case, size); ``compare`` adds the exact replay's figures and the relative error.  A case
    refused on the way (a KbfastError, e.g. over the memory budget) raises :class:`ProbesStopped`, which
    carries the rows finished before it."""
    rows: list[dict] = []
    try:
        for n in sizes:
            for c in cases:
                row = evaluate_case(t, router, c, n, evaluate)
                if compare:
                    ex = evaluate_case(t, router, c, n, exact_evaluator)
                    row["exact_latency_ns"] = ex["latency_ns"]
                    row["exact_makespan_ns"] = ex["makespan_ns"]
                    row["rel_error"] = rel_error(row["makespan_ns"], ex["makespan_ns"])
                rows.append(row)
    except KbfastError as err:
        raise ProbesStopped(_frame(rows), err) from None
    return _frame(rows)


class ProbesStopped(KbfastError):
    """A probe case was refused: ``finished`` holds the rows done before it, ``cause`` the refusal."""

    def __init__(self, finished: pd.DataFrame, cause: KbfastError):
        super().__init__(str(cause))
        self.finished, self.cause, self.exit_code = finished, cause, cause.exit_code


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=None if rows else COLUMNS)
    for col in map(breakdown_column, BREAKDOWN):
        if col not in df:
            df[col] = np.nan
    return df[COLUMNS + [c for c in df.columns if c not in COLUMNS]]


@dataclass(frozen=True)
class Check:
    """One invariant checked on a probe table: its name, whether it holds, and the figures behind it."""

    name: str
    passed: bool
    detail: str


def _chain(df: pd.DataFrame, names: list[str], strict: bool = True) -> tuple[bool, str] | None:
    got = df.set_index("case")["latency_ns"]
    if not all(n in got.index for n in names):
        return None
    vals = [float(got[n]) for n in names]
    ok = all((a < b) if strict else (a <= b) for a, b in zip(vals, vals[1:]))
    return ok, " < ".join(f"{n}={v:,.1f}" for n, v in zip(names, vals)) + " ns"


def check_invariants(df: pd.DataFrame) -> list[Check]:
    """kernbench's probe invariants, per probe size."""
    checks: list[Check] = []
    for nbytes, sub in df.groupby("nbytes", sort=True):
        tag = f"@{nbytes}B"
        for label, names in (
            ("distance order", ["SAME_CUBE_PE_LOCAL", "SAME_CUBE_PE_REMOTE_BEST", "SAME_CUBE_PE_REMOTE_WORST",
                                "REMOTE_CUBE_PE_REMOTE_BEST", "REMOTE_CUBE_PE_REMOTE_WORST"]),
            ("local < same half < cross half", ["SAME_CUBE_PE_LOCAL", "PROBE_PE_SAME_HALF", "PROBE_PE_CROSS_HALF"]),
        ):
            res = _chain(sub, names)
            if res:
                checks.append(Check(f"{label} {tag}", *res))
        for kind in ("H2D", "D2H"):
            names = sorted((c for c in sub["case"] if c.startswith(f"{kind}_CUBE")), key=lambda c: int(c[8:]))
            res = _chain(sub, names) if len(names) > 1 else None
            if res:
                checks.append(Check(f"{kind} grows with hops {tag}", *res))
        lat = sub.set_index("case")["latency_ns"]
        for c in sub["case"]:
            if c.startswith("H2D_CUBE") and f"D2H{c[3:]}" in lat.index:
                d = f"D2H{c[3:]}"
                checks.append(Check(f"{d} >= {c} {tag}", bool(lat[d] >= lat[c]),
                                    f"D2H {lat[d]:,.1f} ns, H2D {lat[c]:,.1f} ns"))
        bad = sub[sub["util_aggregate"] > 1.0 + 1e-9]
        checks.append(Check(f"util_aggregate <= 100% {tag}", bad.empty,
                            "all cases" if bad.empty else ", ".join(bad["case"])))
        single = sub[(sub["n_issuers"] == 1) & (sub["util_aggregate"] > 0)]
        diff = (single["util_single"] - single["util_aggregate"]).abs() > 1e-9
        checks.append(Check(f"single issuer util_single == util_aggregate {tag}", not diff.any(),
                            "all single-issuer cases" if not diff.any() else ", ".join(single[diff]["case"])))
        if "start_spread_ns" in sub and sub["start_spread_ns"].notna().any():
            spread = float(sub["start_spread_ns"].max())
            slack = float(sub["barrier_slack_ns"].min())
            checks.append(Check(f"launch: every PE starts at the barrier {tag}", spread == 0.0 and slack >= 0.0,
                                f"start spread {spread} ns; earliest start minus latest command arrival {slack} ns"))
    return checks


# -- the probe and traffic workload kinds -------------------------------------------------------------------

def _build_probe(t: Tables, router: Router, w: dict) -> Built:
    """One case of the probe catalogue at ``size`` bytes per issuer."""
    case = select(build_catalogue(t, router), [str(w["case"])])[0]
    return Built(case.program(t, router, int(w["size"])), case=case)


def _build_traffic(t: Tables, router: Router, w: dict) -> Built:
    """Random PE-to-HBM flows of ``size`` bytes each."""
    if w["pattern"] != "random":
        raise KbfastError(f"unknown traffic pattern {w['pattern']!r}: use random")
    case = random_traffic(t, int(w["n_flows"]), int(w["flow_seed"]))
    return Built(case.program(t, router, int(w["size"])), case=case)


def case_row(t: Tables, router: Router, built: Built, nbytes: int, mode: str) -> dict:
    """The metric row of a probe case or traffic pattern (:func:`evaluate_case` on the fluid fast path or
    exactly): its makespan as the latency, with the bounds, contention and utilisation."""
    case = built.case
    row = evaluate_case(t, router, case, nbytes, exact_evaluator if mode == "exact" else fluid_evaluator,
                        built.program)
    return {"latency_ns": row["makespan_ns"], "latency_lo_ns": row.get("makespan_lo_ns", np.nan),
            "latency_hi_ns": row.get("makespan_hi_ns", np.nan), "busbw_gbps": np.nan,
            "effective_bw_gbps": row["effective_bw_gbps"], "contention": row.get("contention", np.nan),
            "contention_ns": row.get("contention_ns", np.nan),
            "n_ranks": case.n_issuers, "util_single": row["util_single"], "util_aggregate": row["util_aggregate"]}


def _measurer(build: Callable[[Tables, Router, dict], Built]):
    """The ``measure`` of a kind whose Program ``build`` makes from a probe case."""
    def measure(t: Tables, router: Router, w: dict, mode: str) -> Measurement:
        return Measurement(case_row(t, router, build(t, router, w), int(w["size"]), mode))
    return measure


PROBE = WorkloadKind("probe", "one case of the probe catalogue (kbfast probe --list)",
                     {"case": "SAME_CUBE_PE_LOCAL", "size": "16KiB"}, _build_probe, _measurer(_build_probe),
                     columns=("case",), ignores=("ipcq.",), size_label="bytes per issuer")
TRAFFIC = WorkloadKind("traffic", "random PE-to-HBM flows",
                       {"pattern": "random", "n_flows": 64, "flow_seed": 0, "size": "16KiB"}, _build_traffic,
                       _measurer(_build_traffic), ignores=("ipcq.",), size_label="bytes per flow")
