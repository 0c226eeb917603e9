"""Fast-path all-reduce points: one collective, many (size, buffer kind, n_slots) points in one jitted call
(``kbfast.fast.points``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbfast.errors import KbfastError
from kbfast.fast.points import evaluate_points
from kbfast.ir import BUFFER_KINDS
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce, busbw_gbps


def allreduce_points(t: Tables, router: Router, sizes, buffer_kinds, n_slots, algorithm: str = "lrab",
                     ranks: str | None = None, tile_io: bool = True) -> pd.DataFrame:
    """Fast-path all-reduce latencies for every (size, buffer kind, n_slots) triple, one jitted call.
    ``tile_io``: the tile load and store of every rank (``allreduce``), whose bytes scale with the size
    like the messages'.

    The upper bound here is the first (window-free) pass of ``kbfast.fast.bounds``: valid, looser
    than ``run_fast``'s.  ``ring_peak`` is the deepest ring occupancy a SEND met (``head -
    tail_cache``, over the three runs): the point saw backpressure iff ``n_slots <= ring_peak``.
    """
    sizes = np.asarray(sizes, np.int64)
    kinds = np.array([BUFFER_KINDS.index(k) for k in np.broadcast_to(np.asarray(buffer_kinds), sizes.shape)])
    slots = np.broadcast_to(np.asarray(n_slots, np.int64), sizes.shape).copy()
    if np.any(sizes <= 0) or np.any(slots <= 0):
        raise KbfastError("sizes and n_slots must be > 0")
    coll = allreduce(t, router, int(sizes.max()), algorithm, ranks, tile_io=tile_io)
    out = evaluate_points(coll.program, router, coll.launch_ns, sizes, kinds, slots)
    return pd.DataFrame({
        "algorithm": algorithm, "tile_io": coll.tile_io, "size": sizes,
        "buffer_kind": [BUFFER_KINDS[k] for k in kinds], "n_slots": slots,
        "n_ranks": coll.n_ranks, "latency_ns": out[:, 0], "latency_lo_ns": out[:, 1], "latency_hi_ns": out[:, 2],
        "busbw_gbps": [busbw_gbps(int(s), coll.n_ranks, float(x)) for s, x in zip(sizes, out[:, 0])],
        "contention": out[:, 3] > 0, "ring_peak": out[:, 4].astype(np.int64),
    })
