"""chain: broadcast and reduce as a pipelined chain along the ring of
:func:`~kbfast.workloads.collectives.placement.ring_order`, rooted at its first rank.

The buffer goes as :func:`pieces` messages.  Broadcast: the root sends them east, and each rank forwards a
piece as soon as it has it.  Reduce: the last rank of the chain sends its pieces west, each rank adds its own
to a piece and forwards it, and the root adds the last.  α–β cost (docs/collectives.md):
``(n - 1 + P - 1) (α + S/(P β))`` (plus, for reduce, one add per piece and stage).  A chain has no cycle, so
no ring depth can deadlock it.
"""

from __future__ import annotations

from kbfast.workloads.collectives.algorithm import Algorithm
from kbfast.workloads.collectives.placement import ring_order
from kbfast.workloads.collectives.ring_pipe import PIECE_BYTES, ring_wiring
from kbfast.workloads.collectives.rs_ag import check_ranks
from kbfast.workloads.kernels import ScheduleError, Tl

MAX_PIECES = 64              # a chain of n ranks fills in n - 1 pieces: many small pieces keep it full


def pieces(nbytes: int) -> int:
    """Pieces of the buffer: ``ceil(nbytes / PIECE_BYTES)``, between 1 and :data:`MAX_PIECES`."""
    return max(1, min(MAX_PIECES, -(-nbytes // PIECE_BYTES)))


def _split(tl: Tl) -> tuple[int, list[int], list[int], int, int]:
    """(ring position, piece sizes, piece elements, tag bits, root rank) of the rank's chain."""
    order = ring_order(tl.info, tl.n_ranks)
    p = pieces(tl.nbytes)
    size = [tl.nbytes // p + (1 if j < tl.nbytes % p else 0) for j in range(p)]
    elem = [max(s * tl.n_elem // max(tl.nbytes, 1), 1) for s in size]
    return order.index(tl.rank), size, elem, p.bit_length(), order[0]


def _checked(tl: Tl, got: int, j: int, tb: int) -> int:
    if got & ((1 << tb) - 1) != j:
        raise ScheduleError(f"rank {tl.rank} receives piece {got & ((1 << tb) - 1)} in the place of piece {j}")
    return got >> tb


def broadcast(tl: Tl):
    """The root's buffer to every rank: returns the contributors of what the rank ends with (every piece the
    root's alone)."""
    i, size, _, tb, root = _split(tl)
    n = tl.n_ranks
    yield tl.phase("broadcast")
    held = []
    for j, s in enumerate(size):
        got = tl.contribution() if i == 0 else _checked(tl, (yield tl.recv("W", s)), j, tb)
        if i < n - 1:
            yield tl.send("E", got << tb | j, s)
        held.append(got)
    if any(x != 1 << root for x in held):
        raise ScheduleError(f"rank {tl.rank} ends with pieces from ranks {sorted(set(held))}, not the root's")
    return held[0]


def reduce(tl: Tl):
    """Every rank's buffer summed onto the root: returns the contributors of what the rank sends on (the
    root: of the result), every piece alike."""
    i, size, elem, tb, _ = _split(tl)
    n = tl.n_ranks
    yield tl.phase("reduce")
    held = []
    for j, s in enumerate(size):
        acc = tl.contribution()
        if i < n - 1:
            acc = tl.add(acc, _checked(tl, (yield tl.recv("E", s)), j, tb))
            yield tl.math(elem[j])
        if i > 0:
            yield tl.send("W", acc << tb | j, s)
        held.append(acc)
    if any(x != held[0] for x in held):
        raise ScheduleError(f"rank {tl.rank} ends with pieces of different contributors")
    return held[0]


def reduce_expect(n: int, info: dict):
    """What each rank of a chain reduce ends with: the contributions of its place and every place after it."""
    order = ring_order(info, n)
    place = {rank: i for i, rank in enumerate(order)}
    return lambda rank: sum(1 << order[k] for k in range(place[rank], n))


def broadcast_expect(n: int, info: dict):
    """What each rank of a broadcast ends with: the root's buffer."""
    root = ring_order(info, n)[0]
    return lambda rank: 1 << root


BROADCAST = Algorithm(broadcast, ring_wiring, None, check=check_ranks, expect=broadcast_expect)
REDUCE = Algorithm(reduce, ring_wiring, None, check=check_ranks, expect=reduce_expect)
