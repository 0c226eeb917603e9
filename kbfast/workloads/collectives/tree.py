"""tree: binary-tree reduce to rank 0, then broadcast (spec_ccl §5.4), over the ``tree_binary`` install."""

from __future__ import annotations

import numpy as np

from kbfast.workloads.install import tree_peers, wire
from kbfast.workloads.kernels import Tl
from kbfast.workloads.collectives.algorithm import Algorithm, role_rows


def kernel(tl: Tl):
    """Binary tree: reduce children into parent up to rank 0, then broadcast down (spec_ccl §5.4)."""
    acc = tl.contribution()
    r, n = tl.rank, tl.n_ranks
    children = [d for d, c in (("child_left", 2 * r + 1), ("child_right", 2 * r + 2)) if c < n]
    yield tl.phase("reduce")
    for d in children:
        acc = tl.add(acc, (yield tl.recv(d)))
        yield tl.math()
    if r > 0:
        yield tl.send("parent", acc)
        yield tl.phase("broadcast")
        acc = yield tl.recv("parent")
    else:
        yield tl.phase("broadcast")
    for d in children:
        yield tl.send(d, acc)
    return acc


def roles(n: int, info: dict) -> np.ndarray:
    """A rank's role: has it a parent, a left child, a right child."""
    r = np.arange(n)
    return role_rows([r > 0, 2 * r + 1 < n, 2 * r + 2 < n])


TREE = Algorithm(kernel, lambda t, n, info: wire(*tree_peers(n)), roles)
