"""Evaluate sweep points in batches that share a topology (design §6 "batched", §8 outputs, §10).

Every point is measured through the registry (kbfast.measure.registry): its kind's ``measure``, or, for
the points of a batched kind (one with ``measure_batch``) whose system differs only in the kind's
``batch_system_keys`` and whose workload differs only in its ``batch_fields`` (and size), the kind's
``measure_batch`` over the whole batch (an all-reduce batch of fluid points in one jitted call, a GEMM
batch's max-plus shapes in one call, a model batch sharing its GEMM command timings: kbfast.measure).  Other
workloads share the tables of their batch and are measured point by point.  A point that raises is recorded
with its error; if a batched call fails, its points are retried one at a time so that only the bad ones
fail.  A point's result never depends on which batch it was in, so results are
the same whatever the number of jobs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pandas as pd

from kbfast import __version__
from kbfast.config.loader import FileCaches, load_raw, resolve
from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.measure.rows import in_bounds, rel_error
from kbfast.sweep.spec import Point, overrides_key
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.routing import Router
from kbfast.measure.registry import WORKLOADS, measure, occupancy

METRICS = ("latency_ns", "latency_lo_ns", "latency_hi_ns", "busbw_gbps", "effective_bw_gbps", "contention",
           "contention_ns", "n_ranks")
CHECK_COLUMNS = ("exact_latency_ns", "rel_error", "exact_in_bounds")


@dataclass(frozen=True)
class Batch:
    """Points evaluated together; ``check`` holds the indices of points to replay exactly as well."""

    id: int
    points: tuple[Point, ...]
    mode: str
    check: frozenset[int] = frozenset()
    links: bool = False
    pcs: bool = False


@dataclass
class BatchResult:
    """A batch's rows, its per-link and per-PC tables when asked for, and its time in the evaluators."""

    batch_id: int
    rows: pd.DataFrame
    links: pd.DataFrame | None = None
    pcs: pd.DataFrame | None = None
    eval_s: float = 0.0          # time inside the evaluators (the kernels), for the overhead figure


def _shared_key(p: Point, mode: str) -> str:
    """Points with the same key share a batch: same base, same overrides and workload up to the batched keys."""
    kind = WORKLOADS[p.workload["kind"]]
    batched = mode == "fast" and kind.batches(p.workload)
    over = {k: v for k, v in p.overrides.items() if not (batched and k in kind.batch_system_keys)}
    work = {k: v for k, v in p.workload.items() if k != "size" and not (batched and k in kind.batch_fields)}
    return repr([p.topology, sorted(over.items()), sorted(work.items())])


def make_batches(points: list[Point], mode: str, check: set[int] | None = None, max_points: int = 4096,
                 links: bool = False, pcs: bool = False) -> list[Batch]:
    """Group points by shared topology and workload (in order of first appearance), split at ``max_points``."""
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(_shared_key(p, mode), []).append(p)
    check = check or set()
    batches: list[Batch] = []
    for members in groups.values():
        size = min(max_points, WORKLOADS[members[0].workload["kind"]].max_batch or max_points)
        for i in range(0, len(members), size):
            chunk = tuple(members[i:i + size])
            batches.append(Batch(len(batches), chunk, mode, frozenset(p.index for p in chunk if p.index in check),
                                 links, pcs))
    return batches


@lru_cache(maxsize=16)
def _raw(topology: str) -> tuple[str, dict]:
    return load_raw(topology)


_OVERRIDES: dict[str, dict[str, Any]] = {}   # the overrides behind each system key


@lru_cache(maxsize=256)
def _system(topology: str, overrides_key: str) -> SystemSpec:
    label, data = _raw(topology)
    return resolve(label, data, _OVERRIDES[overrides_key], override_label=f"{label} (sweep axis)")


def _system_key(p: Point) -> tuple[str, str]:
    """(topology, a text key of the overrides): cheap to build for every point, equal for equal overrides."""
    key = p.overrides_key or overrides_key(p.overrides)
    _OVERRIDES.setdefault(key, p.overrides)
    return p.topology, key


def system_of(p: Point) -> SystemSpec:
    """The validated system of a point (ConfigError names the topology file and the key); cached, as a
    batch holds few distinct systems."""
    return _system(*_system_key(p))


@lru_cache(maxsize=4)
def _tables(topology: str, overrides_key: str) -> tuple[Tables, Router]:
    t = build_tables(_system(topology, overrides_key))
    return t, Router(t)


def tables_of(p: Point) -> tuple[Tables, Router]:
    """Tables and router of a point's system, cached per process for the few systems a batch touches."""
    return _tables(*_system_key(p))


def evaluate_point(p: Point, exact: bool) -> dict[str, Any]:
    """The metric row of one point on one evaluator (its kind's ``measure``, kbfast.measure.registry)."""
    return measure(*tables_of(p), p.workload, "exact" if exact else "fast").row


def _measure_together(points: tuple[Point, ...]) -> list[dict[str, Any]]:
    """The fast-path metric rows of points of one batch, measured together by their kind
    (``WorkloadKind.measure_points``): they share the first point's tables and differ only in the kind's
    batched keys."""
    kind = WORKLOADS[points[0].workload["kind"]]
    return kind.measure_points(*tables_of(points[0]), [p.workload for p in points], [system_of(p) for p in points])


def _describe(p: Point) -> dict[str, Any]:
    """The resolved, standard input columns of a point (whatever its axes were)."""
    w = p.workload
    out: dict[str, Any] = {"topology": p.topology, "workload": w["kind"]}
    if w.get("size") is not None:
        out["size"] = int(w["size"])
    out.update({k: w[k] for k in WORKLOADS[w["kind"]].columns})
    try:
        s = system_of(p)
    except KbfastError:
        return out
    out.update(sip_topology=s.sips.topology, n_sips=s.sips.count, buffer_kind=s.ipcq.buffer_kind,
               n_slots=s.ipcq.n_slots)
    return out


def _error_text(err: Exception) -> str:
    return str(err) if isinstance(err, KbfastError) else f"{type(err).__name__}: {err}"


_SYSTEM_CACHES = FileCaches(_raw, _system, _tables)


def evaluate_batch(batch: Batch) -> BatchResult:
    """Evaluate every point of ``batch``; never raises for a point's own problem."""
    _SYSTEM_CACHES.refresh()
    metrics: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}
    kernel_s = 0.0
    pts = batch.points
    batched = batch.mode == "fast" and WORKLOADS[pts[0].workload["kind"]].batches(pts[0].workload)
    fast_batch = _measure_together
    if batched and len(pts) > 1:
        k0 = time.perf_counter()
        try:
            metrics.update(zip((p.index for p in pts), fast_batch(pts)))
        except Exception:   # noqa: BLE001 - retried point by point below, which records each point's own error
            pass
        kernel_s += time.perf_counter() - k0
    for p in pts:
        if p.index in metrics:
            continue
        k0 = time.perf_counter()
        try:
            if batched:
                metrics[p.index] = fast_batch((p,))[0]
            else:
                metrics[p.index] = evaluate_point(p, batch.mode == "exact")
        except Exception as err:   # noqa: BLE001 - a failing point is recorded, the sweep goes on (design §10)
            errors[p.index] = _error_text(err)
        kernel_s += time.perf_counter() - k0
    rows = []
    for p in pts:
        row: dict[str, Any] = {"point": p.index, **p.params, **_describe(p)}
        row.update(metrics.get(p.index, {}))
        row["error"] = errors.get(p.index)
        rows.append(row)
    checks, k_s = _cross_check(batch, metrics)
    kernel_s += k_s
    for row in rows:
        row.update(checks.get(row["point"], {}))
    for row, p in zip(rows, pts):
        row.update(kbfast_version=__version__, config_hash=p.config_hash, mode=batch.mode)
    links, pcs = _occupancy(batch, errors, metrics)
    df = pd.DataFrame(rows)
    return BatchResult(batch.id, df, links, pcs, kernel_s)


def _cross_check(batch: Batch, metrics: dict[int, dict[str, Any]]) -> tuple[dict[int, dict[str, Any]], float]:
    """Replay the batch's checked points exactly: the exact latency, the relative error and whether the
    fast bounds hold (design §7)."""
    out: dict[int, dict[str, Any]] = {}
    k0 = time.perf_counter()
    for p in batch.points:
        if p.index not in batch.check or p.index not in metrics or batch.mode == "exact":
            continue
        fast = metrics[p.index]
        try:
            ex = evaluate_point(p, exact=True)["latency_ns"]
        except Exception as err:   # noqa: BLE001 - recorded with the point
            out[p.index] = {"check_error": _error_text(err)}
            continue
        out[p.index] = {"exact_latency_ns": ex, "rel_error": rel_error(fast["latency_ns"], ex),
                        "exact_in_bounds": in_bounds(fast["latency_lo_ns"], ex, fast["latency_hi_ns"])}
    return out, time.perf_counter() - k0


def _occupancy(batch: Batch, errors: dict[int, str],
               metrics: dict[int, dict[str, Any]]) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """Per (point, edge) and per (point, controller, pc) tables, when asked for (one more evaluation per point);
    link utilisation over the point's latency, the span of its ``bottleneck_utilization``."""
    if not (batch.links or batch.pcs):
        return None, None
    links, pcs = [], []
    for p in batch.points:
        if p.index in errors:
            continue
        edges, pc_table = occupancy(*tables_of(p), p.workload, batch.mode, float(metrics[p.index]["latency_ns"]))
        tag = {"point": p.index, "config_hash": p.config_hash}
        if batch.links:
            links.append(edges.assign(**tag))
        if batch.pcs:
            pcs.append(pc_table.assign(**tag))
    cat = lambda parts: pd.concat(parts, ignore_index=True) if parts else None  # noqa: E731
    return cat(links), cat(pcs)
