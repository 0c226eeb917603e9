"""The collective algorithms by operation and name: the one table ``collective`` (and ``allreduce``), the
CLI's ``--op`` and ``--algorithm`` and sweeps read.

A new algorithm is its own module (building an :class:`~kbfast.workloads.collectives.algorithm.Algorithm`)
plus one line here; a new operation is one entry of kbfast.workloads.collectives.ops.OPS and one here.
"""

from __future__ import annotations

from kbfast.workloads.collectives import all_to_all, chain, hier2d, hier3, lrab, ring, ring_pipe, rs_ag, tree
from kbfast.workloads.collectives.algorithm import Algorithm

TABLE: dict[str, Algorithm] = {
    "lrab": lrab.LRAB,
    "lrab_corner": lrab.LRAB_CORNER,
    "ring": ring.RING,
    "tree": tree.TREE,
    "hier3": hier3.HIER3,
    "rs_ag": rs_ag.RS_AG,
    "ring_pipe": ring_pipe.RING_PIPE,
    "hier2d": hier2d.HIER2D,
}
ALGORITHMS = tuple(TABLE)

# operation -> its algorithms (the first is its default); all-reduce's are TABLE
OP_TABLE: dict[str, dict[str, Algorithm]] = {
    "all_reduce": TABLE,
    "reduce_scatter": {"ring_pipe": ring_pipe.REDUCE_SCATTER},
    "all_gather": {"ring_pipe": ring_pipe.ALL_GATHER},
    "broadcast": {"chain": chain.BROADCAST},
    "reduce": {"chain": chain.REDUCE},
    "all_to_all": {"direct": all_to_all.DIRECT},
}
KERNELS = {name: alg.kernel for name, alg in TABLE.items()}
