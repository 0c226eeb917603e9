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
:data:`~kbfast.workloads.collectives.rs_ag.MAX_RANKS` ranks; traced (a model's all-reduce,
kbfast.workloads.collectives.in_model), every rank runs the same ops and ``tl.same`` checks the pieces.
"""

from __future__ import annotations

import numpy as np

from kbfast.workloads.collectives.algorithm import Algorithm
from kbfast.workloads.collectives.placement import ring_order
from kbfast.workloads.collectives.rs_ag import check_ranks
from kbfast.workloads.install import Install, install_peers
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
               reduce_steps: int, gather_steps: int, shift: int, first: int | None = None,
               gather_phase: bool = True):
    """The pipelined ring over ``n`` ranks (this one at position ``i``, sending on ``dirs[0]`` and receiving on
    ``dirs[1]``) of a buffer of ``nbytes`` in ``n`` chunks: ``have[c][j]``, the contributor set of piece ``j``
    of chunk ``i + c`` (chunks counted from the rank's own, so that every rank of the ring runs the same ops),
    updated in place.  One stream of ``(reduce_steps + gather_steps) P`` messages: message ``k`` is piece
    ``k % P`` of step ``k // P``; a reduce step adds what it receives, a gather step keeps it.  Reduce step
    ``s`` sends chunk ``shift - s`` and receives the one before it; the first gather step sends ``first``
    (default: the chunk the reduce steps completed), each later one the chunk it received.  Sending message
    ``k >= P`` needs message ``k - P`` received: a rank runs ``LOOKAHEAD`` messages ahead of its receives at
    most, so an IPCQ ring of ``ipcq.n_slots >= LOOKAHEAD`` slots never fills all the way round, and the
    schedule cannot deadlock.  ``gather_phase``: tag the gather steps' ops with phase ``all-gather``.

    When ``tl.tagged`` a payload is ``(contributors << TAG_BITS) | tag``, ``tag = chunk * P + piece`` with the
    chunk's index in the buffer: a piece received into the wrong slot is caught as well as a contribution
    counted twice (the symbolic check); a traced kernel's payloads are opaque, and the check of every piece
    (``tl.same``) stands in.  Returns the chunk the reduce steps completed (counted from the rank's own)."""
    chunk = max(nbytes // n, 1)
    p = len(have[0])
    size = [chunk // p + (1 if j < chunk % p else 0) for j in range(p)]
    elem = [max(s * tl.n_elem // max(tl.nbytes, 1), 1) for s in size]
    reduced = (shift - reduce_steps) % n
    first = reduced if first is None else first

    def chunk_of(step: int, received: bool) -> int:
        """The chunk step ``step`` sends (or receives), counted from the rank's own."""
        if step < reduce_steps:
            return (shift - step - received) % n
        return (first - (step - reduce_steps) - received) % n

    def tag(c: int, j: int) -> int:
        return (c + i) % n * p + j

    total, ahead = (reduce_steps + gather_steps) * p, min(p, LOOKAHEAD)

    def send(k: int):
        c, j = chunk_of(k // p, False), k % p
        return tl.send(dirs[0], have[c][j] << TAG_BITS | tag(c, j) if tl.tagged else have[c][j], size[j])

    for k in range(min(ahead, total)):
        yield send(k)
    for k in range(total):
        step, j = k // p, k % p
        if step == reduce_steps and j == 0 and reduce_steps and gather_phase:
            yield tl.phase("all-gather")
        c = chunk_of(step, True)
        got = yield tl.recv(dirs[1], size[j])
        if tl.tagged:
            if got & ((1 << TAG_BITS) - 1) != tag(c, j):
                raise ScheduleError(f"rank {tl.rank} receives piece {got & ((1 << TAG_BITS) - 1)} into the slot of "
                                    f"chunk {(c + i) % n} piece {j}")
            got >>= TAG_BITS
        have[c][j] = tl.add(have[c][j], got) if step < reduce_steps else got
        if step < reduce_steps:
            yield tl.math(elem[j])
        if k + ahead < total:
            yield send(k + ahead)
    return reduced


def chunks(n: int, nbytes: int, value: int) -> list[list[int]]:
    """A buffer of ``nbytes`` in ``n`` chunks of :func:`pieces` pieces, every piece holding ``value``."""
    return [[value] * pieces(max(nbytes // n, 1)) for _ in range(n)]


def settled(tl: Tl, pieces_: list[int]) -> int:
    """The one contributor set that every piece of ``pieces_`` holds (``tl.same``: a difference is a schedule
    error)."""
    for x in pieces_[1:]:
        tl.same(x, pieces_[0])
    return pieces_[0]


def gathered(tl: Tl, have: list[list[int]]) -> int:
    """The contributors of a gathered buffer: every chunk's (each :func:`settled` over its pieces), added, so
    that a chunk gathered twice fails the symbolic check, and one not gathered leaves its contributor out."""
    out = settled(tl, have[0])
    for row in have[1:]:
        out = tl.add(out, settled(tl, row))
    return out


def ring_stream(tl: Tl, reduce_steps: int, gather_steps: int, shift: int):
    """:func:`ring_level` over the whole rank set, on the ring of
    :func:`~kbfast.workloads.collectives.placement.ring_order` (``E`` / ``W``), of the rank's whole buffer; each
    chunk starts with the rank's own contribution (an all-gather: its own chunk, 0, only).  Returns the
    chunks' contributor sets and the chunk the reduce steps completed."""
    n = tl.n_ranks
    i = ring_order(tl.info, n).index(tl.rank)              # the rank's place on the ring
    have = chunks(n, tl.nbytes, tl.contribution())
    if not reduce_steps:
        have = [[x if c == 0 else 0 for x in row] for c, row in enumerate(have)]
    yield tl.phase("reduce-scatter" if reduce_steps else "all-gather")
    reduced = yield from ring_level(tl, have, i, n, ("E", "W"), tl.nbytes, reduce_steps, gather_steps, shift,
                                    None if reduce_steps else 0)
    return have, reduced


def all_reduce(tl: Tl):
    """Reduce-scatter then all-gather: every piece of every chunk ends with every contribution."""
    have, _ = yield from ring_stream(tl, tl.n_ranks - 1, tl.n_ranks - 1, 0)
    return settled(tl, [x for row in have for x in row])


def reduce_scatter(tl: Tl):
    """The reduce-scatter half, shifted so that the rank at ring position ``i`` ends with chunk ``i`` (every
    contribution in each of its pieces); returns that chunk's contributors."""
    have, reduced = yield from ring_stream(tl, tl.n_ranks - 1, 0, -1)
    return settled(tl, have[reduced])


def all_gather(tl: Tl):
    """The all-gather half from each rank's own chunk: returns the ranks whose chunk arrived whole (every
    piece, one contributor each)."""
    have, _ = yield from ring_stream(tl, 0, tl.n_ranks - 1, 0)
    out = 0
    for row in have:
        got = settled(tl, row)
        if got & (got - 1):
            raise ScheduleError(f"rank {tl.rank} ends with a chunk of several contributors ({got:#x})")
        out |= got
    return out


def ring_peers_in_order(info: dict, n: int, prefix: str = "") -> tuple[list[str], np.ndarray]:
    """The directions and neighbour table of the ring of
    :func:`~kbfast.workloads.collectives.placement.ring_order`: ``E`` to the next rank, ``W`` to the previous
    (behind ``prefix``; none below two ranks)."""
    if n < 2:
        return [], np.zeros((n, 0), np.int64)
    order = np.array(ring_order(info, n), np.int64)
    place = np.argsort(order)
    return [prefix + "E", prefix + "W"], np.stack([order[(place + 1) % n], order[(place - 1) % n]], axis=1)


def ring_wiring(t, n: int, info: dict) -> Install:
    """:func:`ring_peers_in_order`, installed."""
    return install_peers(*ring_peers_in_order(info, n))


RING_PIPE = Algorithm(all_reduce, ring_wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
REDUCE_SCATTER = Algorithm(reduce_scatter, ring_wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
ALL_GATHER = Algorithm(all_gather, ring_wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
