"""A new workload kind is its own module plus one registry entry: a toy kind registered in a fixture runs
through the registry's ``measure``, the sweep spec and the sweep's batch evaluator without other code."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from kbfast.measure.kind import Built, Measurement, WorkloadKind
from kbfast.measure.registry import WORKLOADS, measure
from kbfast.sweep.batches import evaluate_batch, make_batches
from kbfast.sweep.spec import parse_spec
from kbfast.workloads.collectives import pe2pe


def _build(t, router, w: dict[str, Any]) -> Built:
    return Built(pe2pe(t, router, "h1", int(w["size"])).program)


def _row(w: dict[str, Any], mode: str) -> dict[str, Any]:
    lat = float(w["size"]) * w["scale"] * (2.0 if mode == "exact" else 1.0)
    return {"latency_ns": lat, "latency_lo_ns": lat, "latency_hi_ns": lat, "busbw_gbps": np.nan,
            "effective_bw_gbps": np.nan, "contention": np.nan, "n_ranks": 1, "toy_metric": w["scale"]}


def _measure(t, router, w: dict[str, Any], mode: str, prepared) -> Measurement:
    return Measurement(_row(w, mode))


BATCHES: list[int] = []


def _measure_batch(t, router, workloads: list[dict[str, Any]], systems) -> list[dict[str, Any]]:
    BATCHES.append(len(workloads))
    return [_row(w, "fast") for w in workloads]


@pytest.fixture(params=[False, True], ids=["point_by_point", "batched"])
def toy(request, monkeypatch) -> WorkloadKind:
    kind = WorkloadKind("toy", "a toy kind", {"size": "1KiB", "scale": 1.0}, _build, _measure,
                        _measure_batch if request.param else None, columns=("scale",), batch_fields=("scale",),
                        size_label="toy bytes")
    monkeypatch.setitem(WORKLOADS, "toy", kind)
    BATCHES.clear()
    return kind


def test_a_toy_kind_runs_through_the_registry_and_the_sweep(toy: WorkloadKind) -> None:
    from kbfast.config import load_system
    from kbfast.topology.builder import build_tables
    from kbfast.topology.routing import Router

    t = build_tables(load_system())
    assert measure(t, Router(t), {"kind": "toy", "size": 64, "scale": 2.0}, "exact").row["latency_ns"] == 256.0
    spec = parse_spec({"name": "toy", "workload": {"kind": "toy"},
                       "axes": [{"grid": {"workload.size": ["1KiB", "2KiB"], "workload.scale": [1.0, 3.0]}}]},
                      "toy.yaml")
    points = spec.points()
    batches = make_batches(points, "fast", check={points[0].index})
    df = pd.concat([evaluate_batch(b).rows for b in batches]).sort_values("point", ignore_index=True)
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["latency_ns"]) == [w["size"] * w["scale"] for w in (p.workload for p in points)]
    assert list(df["scale"]) == [1.0, 3.0, 1.0, 3.0] and (df["workload"] == "toy").all()
    assert df.loc[0, "exact_latency_ns"] == 2 * df.loc[0, "latency_ns"]     # the check: measure in exact mode
    assert (sum(BATCHES), max(BATCHES, default=0) > 1) == ((4, True) if toy.batched else (0, False))


def test_every_report_a_kind_names_exists_and_is_the_one_its_results_get() -> None:
    """A kind's ``report`` names an entry of kbfast.report.kinds.REPORTS; results of that kind (carrying its
    figures) get it, mixed or common kinds none."""
    from kbfast.report.kinds import REPORTS, kind_report

    named = {k.name: k.report for k in WORKLOADS.values() if k.report is not None}
    assert named == {"gemm": "gemm", "model": "model"}
    for kind, report in named.items():
        rows = pd.DataFrame({"workload": [kind, kind], REPORTS[report].needs: [1.0, 2.0]})
        assert kind_report(rows) is REPORTS[report]
        assert kind_report(rows.drop(columns=REPORTS[report].needs)) is None
    assert kind_report(pd.DataFrame({"workload": ["gemm", "model"], "macs_per_ns": [1.0, 2.0]})) is None
    assert kind_report(pd.DataFrame({"workload": ["allreduce"], "latency_ns": [1.0]})) is None
