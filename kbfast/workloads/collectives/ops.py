"""The collective operations: what each computes, what its bus bandwidth counts, and what its tile load and
store move (nccl-tests' definitions, docs/collectives.md).

``size`` is each rank's whole buffer: the all-reduce tile; the reduce-scatter's input (each rank ends with
``size / n``); the all-gather's output (each rank gives ``size / n``); the broadcast's and the reduce's
buffer; the all-to-all's send buffer (``size / n`` to each rank).  Algorithm bandwidth is ``size / latency``;
bus bandwidth multiplies it by :attr:`Op.bus_factor`, the share of the buffer each rank must move over its
busiest link, so that an algorithm at the link's speed shows the link's bandwidth at any rank count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kbfast.workloads.kernels import Tl


@dataclass(frozen=True)
class Op:
    """One collective operation: its bus-bandwidth factor (of n ranks) and the bytes each rank's tile load
    and tile store move (0: none), given its kernel's view (rank, ranks, buffer) and whether it is the root."""

    name: str
    description: str
    bus_factor: Callable[[int], float]
    load: Callable[[Tl, bool], int]
    store: Callable[[Tl, bool], int]


def _whole(tl: Tl, root: bool) -> int:
    return tl.nbytes


def _chunk(tl: Tl, root: bool) -> int:
    return max(tl.nbytes // tl.n_ranks, 1)


OPS: dict[str, Op] = {op.name: op for op in (
    Op("all_reduce", "every rank ends with the sum of every rank's buffer",
       lambda n: 2 * (n - 1) / n, _whole, _whole),
    Op("reduce_scatter", "every rank ends with its chunk (size / n) of the sum",
       lambda n: (n - 1) / n, _whole, _chunk),
    Op("all_gather", "every rank ends with every rank's chunk (size / n each)",
       lambda n: (n - 1) / n, _chunk, _whole),
    Op("broadcast", "every rank ends with the root's buffer",
       lambda n: 1.0, lambda tl, root: tl.nbytes if root else 0, _whole),
    Op("reduce", "the root ends with the sum of every rank's buffer",
       lambda n: 1.0, _whole, lambda tl, root: tl.nbytes if root else 0),
    Op("all_to_all", "every rank sends chunk d of its buffer to rank d",
       lambda n: (n - 1) / n, _whole, _whole),
)}
