"""Fast-path points of a batched workload: one Program, many (size, buffer kind, n_slots) points in one
jitted call (``kbfast.fast.rescale``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kbfast.errors import KbfastError
from kbfast.fast.rescale import evaluate_points
from kbfast.sim.lowering import channel_hop_bws
from kbfast.ir import BUFFER_KINDS
from kbfast.results import contended
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import busbw_gbps
from kbfast.workloads.registry import WORKLOADS, build


def batched_points(t: Tables, router: Router, workload: dict[str, Any], sizes, buffer_kinds,
                   n_slots) -> pd.DataFrame:
    """Fast-path latencies of ``workload`` (a registry kind with ``batched``, every field given; its
    ``size`` is ignored) for every (size, buffer kind, n_slots) triple, one jitted call.

    The Program is built once, at the largest size.  The upper bound is the first (window-free) pass of
    ``kbfast.fast.bounds``: valid, looser than ``run_fast``'s.  ``ring_peak`` is the deepest ring
    occupancy a SEND met (``head - tail_cache``, over the three runs): the point saw backpressure iff
    ``n_slots <= ring_peak``.  ``contention``: kbfast.results.contended (latency above the lower bound).
    """
    kind = WORKLOADS[workload["kind"]]
    sizes = np.asarray(sizes, np.int64)
    kinds = np.array([BUFFER_KINDS.index(k) for k in np.broadcast_to(np.asarray(buffer_kinds), sizes.shape)])
    slots = np.broadcast_to(np.asarray(n_slots, np.int64), sizes.shape).copy()
    if np.any(sizes <= 0) or np.any(slots <= 0):
        raise KbfastError("sizes and n_slots must be > 0")
    c = build(t, router, {**workload, "size": int(sizes.max())}).collective
    out = evaluate_points(c.program, channel_hop_bws(c.program, router), c.launch_ns, sizes, kinds, slots)
    busbw = ([busbw_gbps(int(s), c.n_ranks, float(x)) for s, x in zip(sizes, out[:, 0])] if kind.bus_bandwidth
             else np.nan)
    return pd.DataFrame({
        **{f: workload[f] for f in kind.columns}, "size": sizes,
        "buffer_kind": [BUFFER_KINDS[k] for k in kinds], "n_slots": slots,
        "n_ranks": c.n_ranks, "latency_ns": out[:, 0], "latency_lo_ns": out[:, 1], "latency_hi_ns": out[:, 2],
        "busbw_gbps": busbw, "contention_ns": np.maximum(out[:, 0] - out[:, 1], 0.0),
        "contention": [contended(x, lo) for x, lo in zip(out[:, 0], out[:, 1])], "ring_peak": out[:, 4].astype(np.int64),
    })


def allreduce_points(t: Tables, router: Router, sizes, buffer_kinds, n_slots, algorithm: str = "lrab",
                     ranks: str | None = None, tile_io: bool = True) -> pd.DataFrame:
    """:func:`batched_points` of one all-reduce (``tile_io``: every rank's tile load and store, whose
    bytes scale with the size like the messages')."""
    workload = {"kind": "allreduce", "algorithm": algorithm, "ranks": ranks, "tile_io": tile_io}
    return batched_points(t, router, workload, sizes, buffer_kinds, n_slots)
