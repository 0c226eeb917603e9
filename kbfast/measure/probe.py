"""The ``probe`` and ``traffic`` workload kinds: a probe case or traffic pattern through an evaluator, and the
figures of the probe table (kbfast.measure.probe_table holds the table and kernbench's invariants on it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbfast.measure.bottleneck import bottleneck
from kbfast.errors import KbfastError
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.measure.hybrid import method_of, run_hybrid, run_network
from kbfast.ir import Op, Program
from kbfast.measure.metrics import breakdown, utilization
from kbfast.measure.probe_table import breakdown_column
from kbfast.measure.rows import contended, contention_ns
from kbfast.sim.lowering import hbm_constants
from kbfast.sim.result import Result
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.launch import launch_timing
from kbfast.measure.methods import check_method
from kbfast.measure.kind import Built, Measurement, Prepared, WorkloadKind
from kbfast.workloads.probe_catalogue import ProbeCase, build_catalogue, random_traffic, select


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


def timing_of(r: Result, exact: bool) -> Timing:
    """The per-op times of one evaluation: an exact replay's, or the fast path's with its bounds and method (a
    hybrid result names its own, kbfast.measure.hybrid; the fluid path's is closed form unless flows met)."""
    if exact:
        return Timing(r.op_issue_ns, r.op_begin_ns, r.op_end_ns)
    return Timing(r.op_issue_ns, r.op_begin_ns, r.op_end_ns, r.op_end_lo_ns, r.op_end_hi_ns, r.shared,
                  method_of(r, exact=False))


def exact_evaluator(p: Program) -> Timing:
    """The exact replay's per-op times."""
    return timing_of(run_exact(p), exact=True)


def fluid_evaluator(p: Program) -> Timing:
    """The fast path alone: closed form, or the fluid estimate where flows meet."""
    return timing_of(run_fast(p), exact=False)


def fast_evaluator(p: Program) -> Timing:
    """The hybrid fast path (kbfast.measure.hybrid): a small contended Program is replayed exactly."""
    return timing_of(run_hybrid(p), exact=False)


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


# -- the probe and traffic workload kinds -------------------------------------------------------------------

# How a probe point's Program is evaluated: exact mode, or the fast path's choice (kbfast.measure.methods).
RUNS: dict[str, Callable[[Program], Result]] = {"exact": run_exact, "hybrid": run_hybrid, "network": run_network,
                                                "fluid": run_fast}


def _prepare_probe(t: Tables, router: Router, w: dict) -> ProbeCase:
    """The named case of the probe catalogue (an unknown name gets a did-you-mean error) and the method."""
    check_method(w)
    return select(build_catalogue(t, router), [str(w["case"])])[0]


def _check_pattern(w: dict) -> None:
    """Refuse a traffic pattern other than ``random``."""
    if w["pattern"] != "random":
        raise KbfastError(f"unknown traffic pattern {w['pattern']!r}: use random")


def _prepare_traffic(t: Tables, router: Router, w: dict) -> ProbeCase:
    """The traffic pattern's flows, and the method."""
    check_method(w)
    _check_pattern(w)
    return random_traffic(t, int(w["n_flows"]), int(w["flow_seed"]))


def case_row(row: dict) -> dict:
    """The metric row of a probe case or traffic pattern from its figures (:func:`evaluate_case`): its
    makespan as the latency, with the bounds, contention and utilisation."""
    return {"latency_ns": row["makespan_ns"], "latency_lo_ns": row.get("makespan_lo_ns", np.nan),
            "latency_hi_ns": row.get("makespan_hi_ns", np.nan), "busbw_gbps": np.nan,
            "effective_bw_gbps": row["effective_bw_gbps"], "contention": row.get("contention", np.nan),
            "contention_ns": row.get("contention_ns", np.nan),
            "n_ranks": row["n_issuers"], "util_single": row["util_single"], "util_aggregate": row["util_aggregate"]}


def _measurer(prepare: Callable[[Tables, Router, dict], ProbeCase]):
    """The ``build`` and ``measure`` of a kind whose case ``prepare`` finds: the case's Program at ``size``
    bytes, evaluated exactly or by the point's fast method; its row says how (``method``).  ``details`` holds
    the probe table's row (:func:`evaluate_case`: the mean DMA latency, the makespan, the breakdown, the busiest
    link); ``result`` the evaluation, for the link and PC tables."""
    def built(t: Tables, router: Router, w: dict, case: ProbeCase) -> Built:
        return Built(case.program(t, router, int(w["size"])), case=case)

    def build(t: Tables, router: Router, w: dict) -> Built:
        return built(t, router, w, prepare(t, router, w))

    def measure(t: Tables, router: Router, w: dict, mode: str, prepared: Prepared) -> Measurement:
        if prepared.built is None:
            prepared.built = built(t, router, w, prepared.plan)
        built_ = prepared.built
        res = RUNS["exact" if mode == "exact" else str(w["method"])](built_.program)
        figures = evaluate_case(t, router, built_.case, int(w["size"]), lambda p: timing_of(res, mode == "exact"),
                                built_.program)
        return Measurement({"method": method_of(res, mode == "exact"), **case_row(figures)}, res, figures)
    return build, measure


PROBE = WorkloadKind("probe", "one case of the probe catalogue (kbfast probe --list)",
                     {"case": "SAME_CUBE_PE_LOCAL", "size": "16KiB", "method": "fluid"},
                     *_measurer(_prepare_probe), prepare=_prepare_probe, columns=("case",), ignores=("ipcq.",),
                     checks=(("method", check_method),),
                     size_label="bytes per issuer")
TRAFFIC = WorkloadKind("traffic", "random PE-to-HBM flows",
                       {"pattern": "random", "n_flows": 64, "flow_seed": 0, "size": "16KiB", "method": "fluid"},
                       *_measurer(_prepare_traffic), prepare=_prepare_traffic, ignores=("ipcq.",),
                       checks=(("pattern", _check_pattern), ("method", check_method)),
                       size_label="bytes per flow")
