"""ring: a flat ring over the ranks, every rank circulating its whole tile (spec_ccl §5.2)."""

from __future__ import annotations

from kbfast.workloads.install import ring_peers, wire
from kbfast.workloads.kernels import Tl
from kbfast.workloads.collectives.algorithm import Algorithm, same_role
from kbfast.workloads.collectives.steps import ring_circulate


def kernel(tl: Tl):
    """Flat ring: every rank circulates its whole tile ws-1 times (spec_ccl §5.2)."""
    tl_acc = tl.contribution()
    yield tl.phase("ring")
    return (yield from ring_circulate(tl, tl_acc, "E", "W", tl.n_ranks))


RING = Algorithm(kernel, lambda t, n, info: wire(*ring_peers(n)), same_role)
