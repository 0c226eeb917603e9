"""The all-reduce algorithms by name: the one table ``allreduce``, the CLI's ``--algorithm`` and sweeps read.

A new algorithm is its own module (building an :class:`~kbfast.workloads.collectives.algorithm.Algorithm`)
plus one line here.
"""

from __future__ import annotations

from kbfast.workloads.collectives import hier3, lrab, ring, rs_ag, tree
from kbfast.workloads.collectives.algorithm import Algorithm

TABLE: dict[str, Algorithm] = {
    "lrab": lrab.LRAB,
    "lrab_corner": lrab.LRAB_CORNER,
    "ring": ring.RING,
    "tree": tree.TREE,
    "hier3": hier3.HIER3,
    "rs_ag": rs_ag.RS_AG,
}
ALGORITHMS = tuple(TABLE)
KERNELS = {name: alg.kernel for name, alg in TABLE.items()}
