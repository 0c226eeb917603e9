"""Small fabric formulas shared by both evaluators (Numba)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def pc_of(addr, pc_shift, n_pcs):  # pragma: no cover - jitted
    """The pseudo-channel a byte address commits to: its burst index ``addr >> pc_shift`` modulo ``n_pcs``
    (spec_memory §3.2, ADR-0034; ``n_pcs`` is a power of two, which the loader checks).  The one place
    both evaluators, and the PC tables, pick a PC."""
    return (addr >> pc_shift) & (n_pcs - 1)


@njit(cache=True, inline="always")
def ctrl_latency(edges, lo, hi, e_dst, e_prop, n_ovh):  # pragma: no cover - jitted
    """A zero-byte control message over edges[lo:hi]: every edge's propagation plus every
    intermediate node's overhead; it uses no bandwidth and no serial worker (spec_fabric §5.3)."""
    lat = 0.0
    for k in range(lo, hi):
        e = edges[k]
        lat += e_prop[e]
        if k < hi - 1:
            lat += n_ovh[e_dst[e]]
    return lat


@njit(cache=True, inline="always")
def bottleneck(edges, lo, hi, e_bw):  # pragma: no cover - jitted
    """Smallest bandwidth on edges[lo:hi] (inf when none serializes)."""
    bn = np.inf
    for k in range(lo, hi):
        bn = min(bn, e_bw[edges[k]])
    return bn


@njit(cache=True, inline="always")
def pc_table_size(n_hbm, n_pcs):  # pragma: no cover - jitted
    """Entries of a per-PC table over every HBM controller: (the largest controller id in ``n_hbm``, each node's
    controller or -1, plus 1) x ``n_pcs``; at least 1, so that an empty table still indexes."""
    n_ctrl = np.int64(0)
    for v in range(len(n_hbm)):
        n_ctrl = max(n_ctrl, n_hbm[v] + 1)
    return max(n_ctrl * n_pcs, 1)
