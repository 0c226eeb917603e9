"""Evaluate sweep points in batches that share a topology (design §6 "batched", §8 outputs, §10).

Points of a batched kind (the registry's ``batched``) whose system differs only in the kind's
``batch_system_keys`` and whose workload differs only in its ``batch_fields`` (and size) form one batch:
an all-reduce batch (buffer kind, ring depth, size) is planned once and evaluated in one jitted call; a GEMM
batch's max-plus shapes in one call; a model batch (one system, up to the kind's ``max_batch`` points of any
model fields) shares the tables and the GEMM command timings.  Other workloads share the tables of their batch and
are evaluated point by point.  A point that raises is recorded with its error; if a batched call fails, its
points are retried one at a time so that only the bad ones
fail.  A point's result never depends on which batch it was in, so results are
the same whatever the number of jobs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from kbfast import __version__
from kbfast.config.loader import FileCaches, load_raw, resolve
from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.bottleneck import (bottleneck, bottleneck_fields, bound_fields, busy_ns, critical_fields, critical_path,
                               link_load_arrays, link_table, node_load_arrays)
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.probe import evaluate_case, exact_evaluator, fluid_evaluator
from kbfast.results import contended, contention_ns, in_bounds, rel_error
from kbfast.sweep.points import batched_points
from kbfast.sweep.spec import Point, overrides_key
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import busbw_gbps
from kbfast.config.models import load_model
from kbfast.evaluate_gemm import evaluate_gemm, fast_method, maxplus_rows
from kbfast.evaluate_model import evaluate_step
from kbfast.workloads.gemm import GemmCase, gemm_case, parse_epilogues
from kbfast.workloads.registry import WORKLOADS, build, model_shape

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
    batch_id: int
    rows: pd.DataFrame
    links: pd.DataFrame | None = None
    pcs: pd.DataFrame | None = None
    eval_s: float = 0.0          # time inside the evaluators (the kernels), for the overhead figure


def _shared_key(p: Point, mode: str) -> str:
    """Points with the same key share a batch: same base, same overrides and workload up to the batched keys."""
    kind = WORKLOADS[p.workload["kind"]]
    batched = kind.batched and mode == "fast"
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
    """Metrics of one point on one evaluator."""
    t, router = tables_of(p)
    if p.workload["kind"] == "model":
        return _model_point(p.workload, t, router, exact)
    built = build(t, router, p.workload)
    prog, coll, case = built.program, built.collective, built.case
    if built.gemm is not None:
        return _gemm_point(built.gemm, t, router, exact)
    size = int(p.workload["size"])
    if case is not None:
        row = evaluate_case(t, router, case, size, exact_evaluator if exact else fluid_evaluator, prog)
        lat = row["makespan_ns"]
        out = {"latency_ns": lat, "latency_lo_ns": row.get("makespan_lo_ns", np.nan),
               "latency_hi_ns": row.get("makespan_hi_ns", np.nan), "busbw_gbps": np.nan,
               "effective_bw_gbps": row["effective_bw_gbps"], "contention": row.get("contention", np.nan),
               "contention_ns": row.get("contention_ns", np.nan),
               "n_ranks": case.n_issuers, "util_single": row["util_single"], "util_aggregate": row["util_aggregate"]}
        return out
    res = run_exact(prog) if exact else run_fast(prog)
    lat, lo, hi = res.latency_ns(coll.launch_ns)
    out = {"latency_ns": lat, "latency_lo_ns": np.nan, "latency_hi_ns": np.nan,
           "busbw_gbps": busbw_gbps(size, coll.n_ranks, lat) if WORKLOADS[p.workload["kind"]].bus_bandwidth else np.nan,
           "effective_bw_gbps": size / lat if lat > 0 else 0.0, "contention": np.nan, "n_ranks": coll.n_ranks}
    if not exact:
        out.update(latency_lo_ns=lo, latency_hi_ns=hi, contention_ns=contention_ns(lat, lo), contention=contended(lat, lo))
    out.update(bottleneck(prog, lat))
    out.update(critical_fields(critical_path(prog, res, coll.launch_ns)))
    out.update(bound_fields(out))
    return out


def _model_point(w: dict[str, Any], t: Tables, router: Router, exact: bool) -> dict[str, Any]:
    """A model step (kbfast.evaluate_model): latency with bounds, tokens/s or time to first token, MAC
    utilisation, the critical path by category (``critical_path_<category>_ns``) and the fast method."""
    model = load_model(str(w["model"]))
    layers = None if w["layers"] is None else int(w["layers"])
    step = evaluate_step(t, router, model, model_shape(model, w), str(w["layout"]), layers,
                         ("exact",) if exact else ("fast",), str(w["method"]))
    res = step.results[step.mode]
    lat = step.latency_ns()
    out = {"latency_ns": lat, "latency_lo_ns": sum(step.repeat(p) * r.lo_ns for p, r in zip(step.pieces, res)),
           "latency_hi_ns": sum(step.repeat(p) * r.hi_ns for p, r in zip(step.pieces, res)),
           "busbw_gbps": np.nan, "effective_bw_gbps": np.nan, "contention": np.nan,
           "n_ranks": len(step.pieces[0].nodes), "mac_util": step.mac_util(t),
           "method": ",".join(sorted({r.method for r in res}))}
    if step.shape is not None:
        out["tokens_per_s" if step.shape.phase == "decode" else "time_to_first_token_ns"] = \
            step.shape.batch / (lat * 1e-9) if step.shape.phase == "decode" else lat
    out.update({f"critical_path_{k}_ns": v for k, v in step.breakdown().items()})
    return out


def _model_batch(points: tuple[Point, ...]) -> list[dict[str, Any]]:
    """Model points of one system on the fast path: they share its tables and GEMM command timings."""
    t, router = tables_of(points[0])
    return [_model_point(p.workload, t, router, False) for p in points]


def _gemm_point(case: GemmCase, t: Tables, router: Router, exact: bool) -> dict[str, Any]:
    """A GEMM point (kbfast.evaluate_gemm): latency (with any up-front loads), bounds where the method has
    them, the GEMM figures and the method."""
    return _gemm_row(evaluate_gemm(t, router, case, exact), t)


def _gemm_row(g: dict[str, Any], t: Tables) -> dict[str, Any]:
    out = {k: v for k, v in g.items() if k not in ("m", "n", "k", "staging", "pe", "b_from")}
    pe, link = t.spec.pe, t.spec.link
    out.update(busbw_gbps=np.nan, effective_bw_gbps=np.nan, contention=np.nan, n_ranks=1,
               peak_macs_per_ns=pe.gemm_macs_per_ns, hbm_gbps=min(link.pe_to_router.bw_gbs, link.router_hbm.bw_gbs))
    return out


def _gemm_batch(points: tuple[Point, ...]) -> list[dict[str, Any]]:
    """GEMM points of one system on the fast path: the max-plus ones in one batched call, the others (the
    fluid schedule) one by one."""
    t, router = tables_of(points[0])
    cases = [gemm_case(t, router, int(p.workload["m"]), int(p.workload["n"]), int(p.workload["k"]),
                       str(p.workload["staging"]), str(p.workload["pe"]), p.workload["b_from"], program=False,
                       epilogues=parse_epilogues(t, p.workload["epilogues"]))
             for p in points]
    batch = [i for i, c in enumerate(cases) if fast_method(c) != "fluid"]
    out: list[dict[str, Any] | None] = [None] * len(points)
    for i, row in zip(batch, maxplus_rows(t, router, [cases[i] for i in batch])):
        out[i] = _gemm_row(row, t)
    for i, c in enumerate(cases):
        if out[i] is None:
            out[i] = _gemm_point(c, t, router, False)
    return out


def _batched_fast(points: tuple[Point, ...]) -> list[dict[str, Any]]:
    """All points of a batch in one ``batched_points`` call (they share everything but the batched keys)."""
    specs = [system_of(p) for p in points]
    t, router = tables_of(points[0])
    df = batched_points(t, router, points[0].workload, [int(p.workload["size"]) for p in points],
                        [s.ipcq.buffer_kind for s in specs], [s.ipcq.n_slots for s in specs])
    out = []
    links = _link_loads(t, router, points)
    for row, p in zip(df.itertuples(index=False), points):
        out.append({"latency_ns": row.latency_ns, "latency_lo_ns": row.latency_lo_ns,
                    "latency_hi_ns": row.latency_hi_ns, "busbw_gbps": row.busbw_gbps,
                    "effective_bw_gbps": row.size / row.latency_ns if row.latency_ns > 0 else 0.0,
                    "contention_ns": row.contention_ns, "contention": bool(row.contention), "n_ranks": row.n_ranks,
                    **bottleneck_fields(t, *links(int(p.workload["size"])), row.latency_ns)})
        out[-1].update(bound_fields(out[-1]))
    return out


def _link_loads(t: Tables, router: Router, points: tuple[Point, ...]):
    """size -> (links, nodes) loads of the batch's workload (kbfast.bottleneck).  When the link loads at the
    batch's smallest and largest sizes are proportional to the size and the node loads equal (every
    batched kind but ``rs_ag``, whose chunks round), every size's loads are the largest one's, links
    scaled: one Program per batch, not per point.  Otherwise each size's Program is built."""
    w = points[0].workload
    sizes = sorted({int(p.workload["size"]) for p in points})

    def loads(size: int):
        prog = build(t, router, {**w, "size": size}).program
        e, load, f = link_load_arrays(prog)
        return (e, busy_ns(t, e, load), f), node_load_arrays(prog)

    big = loads(sizes[-1])
    small = loads(sizes[0]) if len(sizes) > 1 else big
    same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(a, b))  # noqa: E731
    linear = (np.array_equal(small[0][0], big[0][0]) and np.array_equal(small[0][2], big[0][2])
              and np.array_equal(small[0][1] * sizes[-1], big[0][1] * sizes[0]) and same(small[1], big[1]))

    def at(size: int):
        if not linear:
            return loads(size)
        (e, busy, f), nodes = big
        return (e, busy * (size / sizes[-1]), f), nodes
    return at


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
    batched = batch.mode == "fast" and WORKLOADS[pts[0].workload["kind"]].batched
    fast_batch = {"gemm": _gemm_batch, "model": _model_batch}.get(pts[0].workload["kind"], _batched_fast)
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
        prog = build(*tables_of(p), p.workload).program
        res = run_exact(prog) if batch.mode == "exact" else run_fast(prog)
        tag = {"point": p.index, "config_hash": p.config_hash}
        if batch.links:
            links.append(link_table(res.edges, float(metrics[p.index]["latency_ns"])).assign(**tag))
        if batch.pcs:
            pcs.append(res.pcs.assign(**tag))
    cat = lambda parts: pd.concat(parts, ignore_index=True) if parts else None  # noqa: E731
    return cat(links), cat(pcs)
