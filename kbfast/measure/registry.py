"""The workload registry: one table from a workload kind's name to its :class:`WorkloadKind` (its fields
and defaults, its generator and its measurement).

The sweep spec (``workload: {kind: ..., field: value}``), the sweep's batches, ``kbfast run``, calibrate and
bench read it; a new workload kind is its own module in ``kbfast.measure`` (its ``WorkloadKind``) plus one
entry here.  ``build`` turns (tables, router, fields) into a Program and ``measure`` into a metric row; sizes
are in bytes by then (the spec parses suffixes).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.measure.bottleneck import link_table
from kbfast.measure.collective import ALLREDUCE, PE2PE
from kbfast.measure.gemm import GEMM
from kbfast.measure.kind import MODES, Built, Measurement, WorkloadKind
from kbfast.measure.model import MODEL
from kbfast.measure.probe import PROBE, TRAFFIC
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router

__all__ = ["MODES", "WORKLOADS", "Built", "Measurement", "WorkloadKind", "build", "measure", "occupancy"]

WORKLOADS: dict[str, WorkloadKind] = {k.name: k for k in (ALLREDUCE, PE2PE, PROBE, TRAFFIC, GEMM, MODEL)}


def build(t: Tables, router: Router, workload: dict[str, Any]) -> Built:
    """The Program of ``workload`` (a mapping with ``kind`` and every field of that kind)."""
    return WORKLOADS[workload["kind"]].build(t, router, workload)


def measure(t: Tables, router: Router, workload: dict[str, Any], mode: str) -> Measurement:
    """``workload`` (a mapping with ``kind`` and every field of that kind) measured on ``mode``'s evaluator."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    return WORKLOADS[workload["kind"]].measure(t, router, workload, mode)


def occupancy(t: Tables, router: Router, workload: dict[str, Any], mode: str,
              span_ns: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-edge link table (utilisation over ``span_ns``, kbfast.measure.bottleneck.link_table) and the
    per (controller, pc) table of ``workload``'s Program on ``mode``'s evaluator: one more evaluation."""
    prog = build(t, router, workload).program
    res = run_exact(prog) if mode == "exact" else run_fast(prog)
    return link_table(res.edges, span_ns), res.pcs
