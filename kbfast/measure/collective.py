"""The collective kinds, ``allreduce`` and ``pe2pe``: their Programs, one point's metric row, and batches of
all-reduce points in one jitted call (``kbfast.fast.rescale``).

A collective's latency counts from its launch barrier to the last PE's finish (spec_pe §3.6).  Its metric
row (:func:`collective_row`) is built here only: ``kbfast run allreduce|pe2pe`` shows it, sweeps store it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.fast.rescale import evaluate_points
from kbfast.sim.lowering import channel_hop_bws
from kbfast.ir import BUFFER_KINDS
from kbfast.measure.bottleneck import (bottleneck, bottleneck_fields, bound_fields, busy_ns, critical_fields,
                                       critical_path_by_category, link_load_arrays, node_load_arrays,
                                       scaled_bottlenecks)
from kbfast.measure.hybrid import method_of, run_hybrid, run_network
from kbfast.measure.kind import Built, Measurement, Prepared, WorkloadKind
from kbfast.measure.methods import CLOSED_FORM, FLUID, check_method
from kbfast.measure.metrics import phase_ends
from kbfast.measure.rows import contended, contention_ns
from kbfast.sim.result import Result
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import (TABLE, Collective, allreduce, busbw_gbps, check_hop, check_names, check_slots,
                                          collective, pe2pe)


# A collective point's exact replay under ``method: hybrid`` (kbfast.measure.hybrid): at most this many events,
# about 2.5 s at the measured 20 M events/s.  One point is worth a replay of seconds; a model's pieces and the
# probe catalogue keep the hybrid's default budget.
POINT_BUDGET_EVENTS = 50_000_000


def _build_allreduce(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    """One all-reduce of ``size`` bytes per rank."""
    c = allreduce(t, router, int(w["size"]), w["algorithm"], w["ranks"], tile_io=bool(w["tile_io"]))
    return Built(c.program, collective=c)


def _build_collective(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    """One collective operation of ``size`` bytes per rank (each rank's whole buffer)."""
    c = collective(t, router, int(w["size"]), w["op"], w["algorithm"], w["ranks"], tile_io=bool(w["tile_io"]))
    return Built(c.program, collective=c)


def _build_pe2pe(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    """One PE-to-PE transfer of a hop class."""
    c = pe2pe(t, router, w["hop"], int(w["size"]), raw_dma=bool(w["raw_dma"]), consume=bool(w["consume"]),
              load=bool(w["load"]))
    return Built(c.program, collective=c)


def collective_row(c: Collective, res: Result, exact: bool, bus_bandwidth: bool) -> dict[str, Any]:
    """The metric row of one collective point: how it was made (kbfast.measure.methods), latency from the
    launch (with the fast path's bounds and contention, kbfast.measure.rows; NaN in exact mode), bus bandwidth
    (a collective, not a point-to-point transfer), effective bandwidth, the busiest resource, the critical path
    by category and what bounds it (kbfast.measure.bottleneck)."""
    p = c.program
    lat, lo, hi = res.latency_ns(c.launch_ns)
    out = {"method": method_of(res, exact), "latency_ns": lat, "latency_lo_ns": np.nan, "latency_hi_ns": np.nan,
           "busbw_gbps": busbw_gbps(c.nbytes, c.n_ranks, lat, c.op) if bus_bandwidth else np.nan,
           "effective_bw_gbps": c.nbytes / lat if lat > 0 else 0.0, "contention": np.nan, "n_ranks": c.n_ranks}
    if not exact:
        out.update(latency_lo_ns=lo, latency_hi_ns=hi, contention_ns=contention_ns(lat, lo), contention=contended(lat, lo))
    out.update(bottleneck(p, lat))
    out.update(critical_fields(critical_path_by_category(p, res, c.launch_ns)))
    out.update(bound_fields(out))
    return out


def _measure(c: Collective, mode: str, method: str, bus_bandwidth: bool, prepared: Prepared) -> Measurement:
    """One collective on ``mode``'s evaluator (the fast path's by the fast-path choice ``method``): the metric
    row, the result, and the details a command shows (its name, bytes per rank and tile I/O, the Program's
    size, the launch, the evaluator's wall time and the per-phase ends).  A hybrid replay is kept in
    ``prepared`` for the point's exact mode, which is that replay."""
    exact = mode == "exact"
    not_replayed = ""                 # why no replay made a point whose flows met (kbfast.measure.hybrid)
    if exact:
        res = prepared.replay if prepared.replay is not None else run_exact(c.program)
    elif method == "hybrid":
        res = run_hybrid(c.program, POINT_BUDGET_EVENTS)
        prepared.replay, not_replayed = res.replay, res.not_replayed
    elif method == "network":
        res = run_network(c.program)
        not_replayed = res.not_replayed
    else:
        res = run_fast(c.program)
    details = {"workload": c.algorithm, "nbytes": c.nbytes, "tile_io": c.tile_io, "n_ops": c.program.n_ops,
               "launch_ns": c.launch_ns, "wall_s": res.wall_s,
               "phase_ends": phase_ends(c.program, res.op_end_ns, c.launch_ns), "not_replayed": not_replayed}
    return Measurement(collective_row(c, res, exact, bus_bandwidth), res, details)


def _measure_allreduce(t: Tables, router: Router, w: dict[str, Any], mode: str, prepared: Prepared) -> Measurement:
    return _measure(ALLREDUCE.built(t, router, w, prepared).collective, mode, str(w["method"]), True, prepared)


def _measure_collective(t: Tables, router: Router, w: dict[str, Any], mode: str, prepared: Prepared) -> Measurement:
    got = _measure(COLLECTIVE.built(t, router, w, prepared).collective, mode, str(w["method"]), True, prepared)
    got.row["algbw_gbps"] = got.row["effective_bw_gbps"]        # nccl-tests' name: size / latency
    got.details["workload"] = f"{w['op']} {got.details['workload']}"
    return got


def _measure_pe2pe(t: Tables, router: Router, w: dict[str, Any], mode: str, prepared: Prepared) -> Measurement:
    return _measure(PE2PE.built(t, router, w, prepared).collective, mode, str(w["method"]), False, prepared)


def batched_points(t: Tables, router: Router, workload: dict[str, Any], sizes, buffer_kinds,
                   n_slots) -> pd.DataFrame:
    """Fast-path latencies of an all-reduce ``workload`` (every field given; its ``size`` is ignored) for
    every (size, buffer kind, n_slots) triple, one jitted call.

    The Program is built once, at the largest size.  The upper bound is the first (window-free) pass of
    ``kbfast.fast.bounds``: valid, looser than ``run_fast``'s.  ``ring_peak`` is the deepest ring
    occupancy a SEND met (``head - tail_cache``, over the three runs): the point saw backpressure iff
    ``n_slots <= ring_peak``.  ``contention``: kbfast.measure.rows.contended (latency above the lower bound).
    ``method``: fluid where flows met in the point's schedule, else closed form (kbfast.measure.methods).
    """
    sizes = np.asarray(sizes, np.int64)
    kinds = np.array([BUFFER_KINDS.index(k) for k in np.broadcast_to(np.asarray(buffer_kinds), sizes.shape)])
    slots = np.broadcast_to(np.asarray(n_slots, np.int64), sizes.shape).copy()
    if np.any(sizes <= 0) or np.any(slots <= 0):
        raise KbfastError("sizes and n_slots must be > 0")
    check_slots(workload["algorithm"], TABLE[workload["algorithm"]], int(slots.min()))   # a pipelined schedule
    c = _build_allreduce(t, router, {**workload, "size": int(sizes.max())}).collective
    out = evaluate_points(c.program, channel_hop_bws(c.program, router), c.launch_ns, sizes, kinds, slots)
    busbw = [busbw_gbps(int(s), c.n_ranks, float(x)) for s, x in zip(sizes, out[:, 0])]
    return pd.DataFrame({
        **{f: workload[f] for f in ALLREDUCE.columns}, "size": sizes,
        "buffer_kind": [BUFFER_KINDS[k] for k in kinds], "n_slots": slots,
        "n_ranks": c.n_ranks, "method": np.where(out[:, 3] > 0, FLUID, CLOSED_FORM),
        "latency_ns": out[:, 0], "latency_lo_ns": out[:, 1], "latency_hi_ns": out[:, 2],
        "busbw_gbps": busbw, "contention_ns": np.maximum(out[:, 0] - out[:, 1], 0.0),
        "contention": [contended(x, lo) for x, lo in zip(out[:, 0], out[:, 1])], "ring_peak": out[:, 4].astype(np.int64),
    })


def allreduce_points(t: Tables, router: Router, sizes, buffer_kinds, n_slots, algorithm: str = "lrab",
                     ranks: str | None = None, tile_io: bool = True) -> pd.DataFrame:
    """:func:`batched_points` of one all-reduce (``tile_io``: every rank's tile load and store, whose
    bytes scale with the size like the messages')."""
    workload = {"kind": "allreduce", "algorithm": algorithm, "ranks": ranks, "tile_io": tile_io}
    return batched_points(t, router, workload, sizes, buffer_kinds, n_slots)


def _measure_allreduce_batch(t: Tables, router: Router, workloads: list[dict[str, Any]],
                             systems: list[SystemSpec]) -> list[dict[str, Any]]:
    """All-reduce points of one batch in one :func:`batched_points` call (they share everything but the
    size, the buffer kind and the ring depth): the metric rows, with the busiest resource (no per-op times,
    so no critical path) and what bounds each point.  Fluid points only (``batch_if``): the batched kernel is
    the fluid schedule."""
    df = batched_points(t, router, workloads[0], [int(w["size"]) for w in workloads],
                        [s.ipcq.buffer_kind for s in systems], [s.ipcq.n_slots for s in systems])
    out = []
    at, scaled = _link_loads(t, router, workloads)
    if scaled is None:
        busiest = [bottleneck_fields(t, *at(int(w["size"])), x) for w, x in zip(workloads, df["latency_ns"])]
    else:
        busiest = scaled_bottlenecks(t, *scaled(df["size"].to_numpy()), df["latency_ns"].to_numpy())
    for row, most in zip(df.itertuples(index=False), busiest):
        out.append({"method": row.method, "latency_ns": row.latency_ns, "latency_lo_ns": row.latency_lo_ns,
                    "latency_hi_ns": row.latency_hi_ns, "busbw_gbps": row.busbw_gbps,
                    "effective_bw_gbps": row.size / row.latency_ns if row.latency_ns > 0 else 0.0,
                    "contention_ns": row.contention_ns, "contention": bool(row.contention), "n_ranks": row.n_ranks,
                    **most})
        out[-1].update(bound_fields(out[-1]))
    return out


def _link_loads(t: Tables, router: Router, workloads: list[dict[str, Any]]):
    """(size -> (links, nodes) loads of the batch's workload (kbfast.measure.bottleneck), and when they scale
    (below) sizes -> (links, nodes, scales): the largest size's loads and each size's scale of its links).  When the link loads
    at the batch's smallest and largest sizes are proportional to the size and the node loads equal (every
    algorithm but ``rs_ag``, whose chunks round), every size's loads are the largest one's, links
    scaled: one Program per batch, not per point.  Otherwise each size's Program is built.  Proportional is
    judged on the bytes, whole numbers that scale exactly, not on the busy times, which a bandwidth such as
    313.962 GB/s rounds."""
    w = workloads[0]
    sizes = sorted({int(x["size"]) for x in workloads})

    def loads(size: int):
        prog = _build_allreduce(t, router, {**w, "size": size}).program
        return link_load_arrays(prog), node_load_arrays(prog)

    def with_busy(links, nodes, scale: float = 1.0):
        e, load, f = links
        return (e, busy_ns(t, e, load) * scale, f), nodes

    big = loads(sizes[-1])
    small = loads(sizes[0]) if len(sizes) > 1 else big
    same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(a, b))  # noqa: E731
    linear = (np.array_equal(small[0][0], big[0][0]) and np.array_equal(small[0][2], big[0][2])
              and np.array_equal(small[0][1] * sizes[-1], big[0][1] * sizes[0]) and same(small[1], big[1]))

    def at(size: int):
        return with_busy(*big, size / sizes[-1]) if linear else with_busy(*loads(size))

    def scaled(sizes_: np.ndarray):
        """The largest size's loads and each size's scale of its links' busy times."""
        return (*with_busy(*big), np.asarray(sizes_, np.int64) / sizes[-1])
    return at, scaled if linear else None


# The fast path's choice (kbfast.measure.methods.FAST_CHOICES): fluid in sweeps (an all-reduce sweep batches its
# points on it), hybrid in ``kbfast run``, as in kbfast probe.
_METHOD_CHECK = ("method", check_method)

ALLREDUCE = WorkloadKind(
    "allreduce", "one all-reduce of `size` bytes per rank (kbfast run allreduce)",
    {"algorithm": "lrab", "size": "96KiB", "ranks": None, "tile_io": True, "method": "fluid"}, _build_allreduce,
    _measure_allreduce, _measure_allreduce_batch, bool_fields=("tile_io",), columns=("algorithm", "tile_io"),
    kernels=("collectives",), fast_kernels=("runs", "points"),   # a sweep batches every fluid point
    batch_if=lambda w: w["method"] == "fluid",
    ignores_if=(("algorithm", "lrab", ("ipcq.n_slots",)),),     # one message in flight per channel
    checks=(("algorithm", lambda w: check_names("all_reduce", w["algorithm"], None)),
            ("ranks", lambda w: check_names("all_reduce", None, w["ranks"])), _METHOD_CHECK),
    size_label="message size per rank (bytes)")

COLLECTIVE = WorkloadKind(
    "collective", "one collective operation of `size` bytes per rank: all_reduce, reduce_scatter, all_gather, "
                  "broadcast, reduce or all_to_all (kbfast run collective)",
    {"op": "all_reduce", "algorithm": None, "size": "1MiB", "ranks": None, "tile_io": True, "method": "fluid"},
    _build_collective, _measure_collective, bool_fields=("tile_io",), columns=("op", "algorithm", "ranks", "tile_io"),
    checks=(("op", lambda w: check_names(w["op"], None, None)),
            ("algorithm", lambda w: check_names(w["op"], w["algorithm"], None)),
            ("ranks", lambda w: check_names(w["op"], None, w["ranks"])), _METHOD_CHECK),
    kernels=("collectives",), size_label="buffer size per rank (bytes)")

PE2PE = WorkloadKind(
    "pe2pe", "one PE-to-PE transfer of a hop class, IPCQ or raw DMA (load then store; with load false the "
             "store alone) (kbfast run pe2pe)",
    {"hop": "h3", "size": "4KiB", "raw_dma": False, "consume": True, "load": True, "method": "fluid"}, _build_pe2pe,
    _measure_pe2pe, bool_fields=("raw_dma", "consume", "load"), columns=("hop",),
    checks=(("hop", lambda w: check_hop(w["hop"])), _METHOD_CHECK),
    ignores_if=(("raw_dma", True, ("ipcq.", "workload.consume")), ("raw_dma", False, ("workload.load",))),
    size_label="transfer size (bytes)")
