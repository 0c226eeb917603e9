"""ring_pipe: the pipelined ring, for all-reduce (reduce-scatter then all-gather), reduce-scatter and
all-gather.  Each of the n chunks goes as :func:`pieces` messages, and a rank forwards piece j of a step as
soon as it has reduced (or received) it, while piece j+1 is still on the wire: bandwidth optimal, like
NCCL's ring, on a ring whose hops are short (:func:`~kbfast.workloads.collectives.placement.ring_order`).

Per rank, with chunk ``C = size / n`` and ``P`` pieces of ``C / P``: each reduce-scatter step receives, adds
and forwards P pieces, each all-gather step receives and forwards P pieces; an all-reduce sends
``2 (n-1) C`` bytes per rank, the bandwidth-optimal volume, and its pipeline fills in one piece per step,
not one chunk.  α–β cost (docs/collectives.md): ``(s + P - 1) (α + C/(P β))`` for ``s`` steps, against
rs_ag's ``s (α + C/β)``.

Its payloads carry (chunk, piece) tags, so it runs one generator per rank (``run_kernels``) and is limited to
:data:`~kbfast.workloads.collectives.rs_ag.MAX_RANKS` ranks.
"""

from __future__ import annotations

from kbfast.workloads.collectives.algorithm import Algorithm
from kbfast.workloads.collectives.placement import ring_order
from kbfast.workloads.collectives.rs_ag import check_ranks
from kbfast.workloads.install import Install, install
from kbfast.workloads.kernels import ScheduleError, Tl

PIECE_BYTES = 16 * 1024      # the smallest piece worth its message overhead
MAX_PIECES = 4               # pieces per chunk at most: on 32 cube pe0s of ahbm_2sip at 8 MiB, 1 / 2 / 4 / 8 / 16
                             # pieces take 301 / 198 / 200 / 205 / 216 us (2 ahead, 4 slots)
LOOKAHEAD = 2                # messages a rank sends ahead of its receives (needs ipcq.n_slots >= it); 3 ahead
                             # gains 3 % at 8 MiB, and would need 3 slots


def pieces(chunk: int) -> int:
    """Pieces per chunk: ``ceil(chunk / PIECE_BYTES)``, between 1 and :data:`MAX_PIECES`."""
    return max(1, min(MAX_PIECES, -(-chunk // PIECE_BYTES)))


TAG_BITS = 32               # a message's tag (chunk * P + piece) in the low bits, its contributors above


def ring_level(tl: Tl, have: list[list[int]], i: int, n: int, dirs: tuple[str, str], nbytes: int,
               reduce_steps: int, gather_steps: int, shift: int, first: int | None = None):
    """The pipelined ring over ``n`` ranks (this one at position ``i``, sending on ``dirs[0]`` and receiving on
    ``dirs[1]``) of a buffer of ``nbytes`` in ``n`` chunks: ``have[c][j]``, the contributor set of piece ``j``
    of chunk ``c``, updated in place.  One stream of ``(reduce_steps + gather_steps) P`` messages: message ``k``
    is piece ``k % P`` of step ``k // P``; a reduce step adds what it receives, a gather step keeps it.  Reduce
    step ``s`` sends chunk ``i + shift - s`` and receives the one before it; the first gather step sends
    ``first`` (default: the chunk the reduce steps completed), each later one the chunk it received.  Sending
    message ``k >= P`` needs message ``k - P`` received: a rank runs ``LOOKAHEAD`` messages ahead of its
    receives at most, so an IPCQ ring of ``ipcq.n_slots >= LOOKAHEAD`` slots never fills all the way round,
    and the schedule cannot deadlock.

    A payload is ``(contributors << TAG_BITS) | tag``, ``tag = chunk * P + piece``: a piece received into the
    wrong slot is caught as well as a contribution counted twice (the symbolic check).  Returns the chunk the
    reduce steps completed."""
    chunk = max(nbytes // n, 1)
    p = len(have[0])
    size = [chunk // p + (1 if j < chunk % p else 0) for j in range(p)]
    elem = [max(s * tl.n_elem // max(tl.nbytes, 1), 1) for s in size]
    reduced = (i + shift - reduce_steps) % n
    first = reduced if first is None else first

    def chunk_of(step: int, received: bool) -> int:
        """The chunk step ``step`` sends (or receives)."""
        if step < reduce_steps:
            return (i + shift - step - received) % n
        return (first - (step - reduce_steps) - received) % n

    total, ahead = (reduce_steps + gather_steps) * p, min(p, LOOKAHEAD)

    def send(k: int):
        c, j = chunk_of(k // p, False), k % p
        return tl.send(dirs[0], have[c][j] << TAG_BITS | (c * p + j), size[j])

    for k in range(min(ahead, total)):
        yield send(k)
    for k in range(total):
        step, j = k // p, k % p
        if step == reduce_steps and j == 0 and reduce_steps:
            yield tl.phase("all-gather")
        c = chunk_of(step, True)
        got = yield tl.recv(dirs[1], size[j])
        if got & ((1 << TAG_BITS) - 1) != c * p + j:
            raise ScheduleError(f"rank {tl.rank} receives piece {got & ((1 << TAG_BITS) - 1)} into the slot of chunk "
                                f"{c} piece {j}")
        have[c][j] = tl.add(have[c][j], got >> TAG_BITS) if step < reduce_steps else got >> TAG_BITS
        if step < reduce_steps:
            yield tl.math(elem[j])
        if k + ahead < total:
            yield send(k + ahead)
    return reduced


def chunks(n: int, nbytes: int, value: int) -> list[list[int]]:
    """A buffer of ``nbytes`` in ``n`` chunks of :func:`pieces` pieces, every piece holding ``value``."""
    return [[value] * pieces(max(nbytes // n, 1)) for _ in range(n)]


def ring_stream(tl: Tl, reduce_steps: int, gather_steps: int, shift: int):
    """:func:`ring_level` over the whole rank set, on the ring of
    :func:`~kbfast.workloads.collectives.placement.ring_order` (``E`` / ``W``), of the rank's whole buffer; each
    chunk starts with the rank's own contribution (an all-gather: its own chunk only).  Returns the chunks'
    contributor sets and the chunk the reduce steps completed."""
    n = tl.n_ranks
    i = ring_order(tl.info, n).index(tl.rank)              # the rank's place on the ring
    have = chunks(n, tl.nbytes, tl.contribution())
    if not reduce_steps:
        have = [[x if c == i else 0 for x in row] for c, row in enumerate(have)]
    yield tl.phase("reduce-scatter" if reduce_steps else "all-gather")
    reduced = yield from ring_level(tl, have, i, n, ("E", "W"), tl.nbytes, reduce_steps, gather_steps, shift,
                                    None if reduce_steps else i)
    return have, reduced


def all_reduce(tl: Tl):
    """Reduce-scatter then all-gather: every piece of every chunk ends with every contribution."""
    have, _ = yield from ring_stream(tl, tl.n_ranks - 1, tl.n_ranks - 1, 0)
    out = (1 << tl.n_ranks) - 1
    for row in have:
        for x in row:
            out &= x                                       # the ranks present in every piece
    return out


def reduce_scatter(tl: Tl):
    """The reduce-scatter half, shifted so that the rank at ring position ``i`` ends with chunk ``i`` (every
    contribution in each of its pieces); returns that chunk's contributors."""
    have, reduced = yield from ring_stream(tl, tl.n_ranks - 1, 0, -1)
    out = (1 << tl.n_ranks) - 1
    for x in have[reduced]:
        out &= x
    return out


def all_gather(tl: Tl):
    """The all-gather half from each rank's own chunk: returns the ranks whose chunk arrived whole (every
    piece, one contributor each)."""
    have, _ = yield from ring_stream(tl, 0, tl.n_ranks - 1, 0)
    out = 0
    for row in have:
        got = row[0]
        if any(x != got for x in row) or got & (got - 1):
            raise ScheduleError(f"rank {tl.rank} ends with a chunk whose pieces come from {sorted(set(row))}")
        out |= got
    return out


def ring_wiring(t, n: int, info: dict) -> Install:
    """E to the next rank on the ring (:func:`~kbfast.workloads.collectives.placement.ring_order`), W to the
    previous."""
    order = ring_order(info, n)
    place = {rank: i for i, rank in enumerate(order)}
    return install(n, lambda rank, n: {} if n < 2 else {"E": order[(place[rank] + 1) % n],
                                                         "W": order[(place[rank] - 1) % n]})


RING_PIPE = Algorithm(all_reduce, ring_wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
REDUCE_SCATTER = Algorithm(reduce_scatter, ring_wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
ALL_GATHER = Algorithm(all_gather, ring_wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
