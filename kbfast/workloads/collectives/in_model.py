"""The all-reduce a model's kernels run, by algorithm: the directions each needs and its traced body.

A model's all-reduce sums a buffer over every working PE of a piece (kbfast.workloads.model): ranks numbered
SIP, cube, PE, with ``n_pe`` working PEs per cube.  Its kernels are traced once per role
(kbfast.workloads.templates), so a body here depends on the rank's role only, and its payloads are opaque
values: the pipelined rings check their pieces with ``tl.same`` where the collective library tags them.

========== =========================================================================================
lrab       the reference's (spec_ccl §5.7): a chain to pe0 in each cube, lrab over cubes and SIPs, a
           chain back; latency-optimal, every hop carries the whole buffer
ring_pipe  the pipelined ring over every working PE, in
           :func:`~kbfast.workloads.collectives.placement.ring_order` (``ring_E`` / ``ring_W``):
           reduce-scatter then all-gather, bandwidth-optimal
hier2d     a pipelined ring per level: the cube's PEs, the cube mesh, the SIPs
           (kbfast.workloads.collectives.hier2d)
========== =========================================================================================

``auto`` (kbfast.measure.model) times each of them (:func:`candidates`) on the fast path for the message's
size and ranks, and takes the fastest (docs/models.md, "Collectives in models").
"""

from __future__ import annotations

import numpy as np

from kbfast.errors import KbfastError, did_you_mean
from kbfast.workloads.collectives import hier2d, lrab
from kbfast.workloads.collectives.ring_pipe import chunks, gathered, ring_level, ring_peers_in_order, settled
from kbfast.workloads.collectives.steps import converge, spread
from kbfast.workloads.kernels import Tl

ALGORITHMS = ("lrab", "ring_pipe", "hier2d")      # auto's candidates, in the order a tie goes
FLAT_RING_MAX = 64     # auto leaves the flat ring out above this many ranks: its 2 (P - 1) steps lose to hier2d,
                       # which sends the same bytes per PE in fewer steps (256 PEs of ahbm_2sip: 46.3 us against
                       # 8.3 us at 16 KiB, 1.307 ms against 1.248 ms at 32 MiB), and timing it costs 3 s
AUTO = "auto"
SCATTERING = ("ring_pipe", "hier2d")              # the algorithms with a reduce-scatter and an all-gather
CHOICES = (AUTO,) + ALGORITHMS
RING = ("ring_E", "ring_W")


def candidates(n_ranks: int, scattering: bool = False) -> tuple[str, ...]:
    """The algorithms ``auto`` times for an all-reduce over ``n_ranks`` working PEs (:data:`FLAT_RING_MAX`);
    ``scattering``: only those with a reduce-scatter and an all-gather (sequence parallelism)."""
    return tuple(a for a in ALGORITHMS if (a != "ring_pipe" or n_ranks <= FLAT_RING_MAX)
                 and (not scattering or a in SCATTERING))


def check_choice(collective: str) -> str:
    """Refuse a collective a model cannot run, naming the choices."""
    if collective not in CHOICES:
        close = did_you_mean(str(collective), CHOICES, "choices")
        raise KbfastError(f"unknown model collective {collective!r}: {close}")
    return collective


def peers(info: dict, n_pe: int) -> tuple[list[str], np.ndarray]:
    """The directions ring_pipe and hier2d need over every working PE (``n_pe`` per cube; ``info``:
    :func:`~kbfast.workloads.collectives.placement.kernel_info`): the ring of ring_order behind ``ring_``,
    hier2d's levels."""
    sizes = (n_pe, info["n_cubes"], info["n_sips"])
    ranks = "all_pes" if n_pe > 1 else "cube_pe0"
    ring_l, ring = ring_peers_in_order(dict(info, ranks=ranks), int(np.prod(sizes)), "ring_")
    lev_l, lev = hier2d.peers(sizes, info["cube_w"], info["cube_h"])
    return ring_l + lev_l, np.concatenate([ring, lev], axis=1)


def _sizes(tl: Tl, n_pe: int) -> tuple[int, int, int]:
    return n_pe, tl.info["n_cubes"], tl.info["n_sips"]


def reduce_scatter(tl: Tl, acc: int, algorithm: str, n_pe: int):
    """The reduce-scatter of ``acc`` (``tl.nbytes``) by ``algorithm`` (one of :data:`SCATTERING`): every rank
    ends with its chunk, ``1 / P`` of the buffer, summed over every rank; returns that chunk's contributors."""
    sizes = _sizes(tl, n_pe)
    if algorithm == "hier2d":
        return (yield from hier2d.body(tl, acc, sizes, (0, 0, 0), tl.nbytes, phases=False, gather=False))
    n = int(np.prod(sizes))
    have = chunks(n, tl.nbytes, acc)
    if n > 1:
        yield from ring_level(tl, have, 0, n, RING, tl.nbytes, n - 1, 0, -1, gather_phase=False)
    return settled(tl, have[0])


def all_gather(tl: Tl, acc: int, algorithm: str, n_pe: int):
    """The all-gather of every rank's chunk (``acc``, ``1 / P`` of ``tl.nbytes``) by ``algorithm`` (one of
    :data:`SCATTERING`); returns the union of the chunks' contributors (each once)."""
    sizes = _sizes(tl, n_pe)
    if algorithm == "hier2d":
        return (yield from hier2d.body(tl, acc, sizes, (0, 0, 0), tl.nbytes, phases=False, reduce=False))
    n = int(np.prod(sizes))
    have = chunks(n, tl.nbytes, 0)
    have[0] = [acc] * len(have[0])
    if n > 1:
        yield from ring_level(tl, have, 0, n, RING, tl.nbytes, 0, n - 1, 0, 0, gather_phase=False)
    return gathered(tl, have)


def body(tl: Tl, acc: int, algorithm: str, pe: int, n_pe: int, cube_rank: int):
    """The all-reduce of ``acc`` (``tl.nbytes``) by ``algorithm`` on PE ``pe`` of cube ``cube_rank`` (SIP x
    cubes + cube); returns the result.  The caller's phase stays in place."""
    if algorithm == "lrab":
        acc = yield from converge(tl, acc, pe, 0, n_pe, "intra_W", "intra_E")
        if pe == 0:
            acc = yield from lrab.body(tl, acc, cube_rank, tag=False)
        return (yield from spread(tl, acc, pe, 0, n_pe, "intra_W", "intra_E"))
    sizes = _sizes(tl, n_pe)
    if algorithm == "hier2d":
        return (yield from hier2d.body(tl, acc, sizes, (0, 0, 0), tl.nbytes, phases=False))
    if algorithm == "ring_pipe":
        n = int(np.prod(sizes))
        if n == 1:
            return acc
        have = chunks(n, tl.nbytes, acc)
        yield from ring_level(tl, have, 0, n, RING, tl.nbytes, n - 1, n - 1, 0, gather_phase=False)
        return settled(tl, [x for row in have for x in row])
    raise KbfastError(f"a model's all-reduce has no algorithm {algorithm!r} (resolve auto first)")
