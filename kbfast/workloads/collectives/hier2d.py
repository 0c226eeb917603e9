"""hier2d: the hierarchical all-reduce of the tray's three levels, each a pipelined ring
(:func:`~kbfast.workloads.collectives.ring_pipe.ring_level`): within a cube, across the cube mesh, then
across SIPs, every level moving only its share of the buffer.

On every PE (``all_pes``; ``cube_pe0`` skips the cube level), with ``n₁`` PEs per cube, ``n₂`` cubes per SIP and
``n₃`` SIPs, and S bytes per rank:

1. reduce-scatter over the cube's PEs (``pe_E`` / ``pe_W``): each PE ends with its chunk, S/n₁, summed over
   the cube;
2. reduce-scatter of that chunk over the same PE of every cube of the SIP, around the cube mesh's cycle
   (``mesh_E`` / ``mesh_W``, :func:`~kbfast.workloads.collectives.placement.mesh_cycle`): S/(n₁n₂) summed over
   the SIP;
3. all-reduce of that over the same PE and cube of every SIP (``sip_E`` / ``sip_W``: reduce-scatter, then
   all-gather);
4. all-gather back around the cube mesh, then within the cube.

Each PE sends ``2 S (n₁-1)/n₁`` over the cube's mesh, ``2 S/n₁ (n₂-1)/n₂`` over the UCIe connections and
``2 S/(n₁n₂) (n₃-1)/n₃`` between SIPs (docs/collectives.md).  Payloads carry (chunk, piece) tags at every
level; it runs one generator per rank and is limited to
:data:`~kbfast.workloads.collectives.rs_ag.MAX_RANKS` ranks.
"""

from __future__ import annotations

import numpy as np

from kbfast.errors import KbfastError
from kbfast.workloads.collectives.algorithm import Algorithm
from kbfast.workloads.collectives.placement import mesh_cycle
from kbfast.workloads.collectives.ring_pipe import LOOKAHEAD, chunks, gathered, ring_level, settled
from kbfast.workloads.collectives.rs_ag import check_ranks
from kbfast.workloads.install import Install, install_peers
from kbfast.workloads.kernels import Tl

LEVELS = (("pe_E", "pe_W"), ("mesh_E", "mesh_W"), ("sip_E", "sip_W"))


def levels(info: dict, n: int) -> tuple[int, int, int]:
    """(PEs per cube, cubes per SIP, SIPs) of the rank set: ``all_pes`` or ``cube_pe0`` (numbered SIP, cube,
    PE); any other is refused."""
    if info.get("ranks") not in ("all_pes", "cube_pe0"):
        raise KbfastError(f"hier2d runs on every PE (ranks=all_pes) or on pe0 of every cube (ranks=cube_pe0), "
                          f"not on ranks={info.get('ranks')}")
    n_sips, n_cubes = info["n_sips"], info["n_cubes"]
    return n // (n_sips * n_cubes), n_cubes, n_sips


def _place(info: dict, n: int, rank: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(position at each level, ranks at each level) of ``rank``: its PE in the cube, its cube's place on the
    mesh cycle, its SIP."""
    n1, n2, n3 = levels(info, n)
    sip, rest = divmod(rank, n1 * n2)
    cube, pe = divmod(rest, n1)
    return (pe, mesh_cycle(info["cube_w"], info["cube_h"]).index(cube), sip), (n1, n2, n3)


def body(tl: Tl, acc: int, sizes: tuple[int, int, int], places: tuple[int, int, int], nbytes: int,
         dirs: tuple = LEVELS, phases: bool = True, reduce: bool = True, gather: bool = True):
    """The passes (module docstring) of a buffer of ``nbytes`` holding ``acc``, over levels of ``sizes``
    ranks (this one at ``places``, for the tags only), on directions ``dirs``; ``phases``: tag each pass with a
    phase of its own.  Every rank runs the same ops.  An all-reduce (``reduce`` and ``gather``) returns the
    contributor set every piece ends with; a reduce-scatter (``gather=False``), that of the rank's chunk
    (``nbytes / (n₁n₂n₃)``, summed over every rank); an all-gather (``reduce=False``) gathers every rank's
    chunk, ``acc``, and returns the union of the chunks' contributors."""
    (i1, i2, i3), (n1, n2, n3) = places, sizes
    s1, s2 = nbytes, max(nbytes // n1, 1)
    s3 = max(s2 // n2, 1)
    start = acc if reduce else 0                 # a gather's other chunks are received before they are sent
    have1, have2, have3 = chunks(n1, s1, start), chunks(n2, s2, start), chunks(n3, s3, start)
    mine1 = mine2 = 0
    if reduce:
        if n1 > 1:
            if phases:
                yield tl.phase("cube reduce-scatter")
            mine1 = yield from ring_level(tl, have1, i1, n1, dirs[0], s1, n1 - 1, 0, -1, gather_phase=False)
        have2 = chunks(n2, s2, settled(tl, have1[mine1]))
        if n2 > 1:
            if phases:
                yield tl.phase("mesh reduce-scatter")
            mine2 = yield from ring_level(tl, have2, i2, n2, dirs[1], s2, n2 - 1, 0, -1, gather_phase=False)
        have3 = chunks(n3, s3, settled(tl, have2[mine2]))
    else:
        have3[0] = [acc] * len(have3[0])
    if n3 > 1:
        if phases:
            yield tl.phase("sip " + ("all-reduce" if reduce and gather else "reduce-scatter" if reduce else
                                     "all-gather"))
        steps = (n3 - 1 if reduce else 0, n3 - 1 if gather else 0)
        mine3 = yield from ring_level(tl, have3, i3, n3, dirs[2], s3, *steps, 0 if gather else -1,
                                      None if reduce else 0, gather_phase=phases)
        if not gather:
            return settled(tl, have3[mine3])
    elif not gather:
        return settled(tl, have3[0])

    def merge(have: list[list[int]]) -> int:
        """A level's buffer as the next level's chunk: one reduced set, or the gathered chunks' union."""
        return settled(tl, [x for row in have for x in row]) if reduce else gathered(tl, have)

    have2[mine2] = [merge(have3)] * len(have2[mine2])
    if n2 > 1:
        if phases:
            yield tl.phase("mesh all-gather")
        yield from ring_level(tl, have2, i2, n2, dirs[1], s2, 0, n2 - 1, 0, mine2)
    have1[mine1] = [merge(have2)] * len(have1[mine1])
    if n1 > 1:
        if phases:
            yield tl.phase("cube all-gather")
        yield from ring_level(tl, have1, i1, n1, dirs[0], s1, 0, n1 - 1, 0, mine1)
    return merge(have1)


def kernel(tl: Tl):
    """:func:`body` over the rank set's levels; returns the contributor set every piece ends with."""
    places, sizes = _place(tl.info, tl.n_ranks, tl.rank)
    return (yield from body(tl, tl.contribution(), sizes, places, tl.nbytes))


def peers(sizes: tuple[int, int, int], cube_w: int, cube_h: int) -> tuple[list[str], np.ndarray]:
    """The directions of a ring at each level (:data:`LEVELS`) and the neighbour table of ranks numbered SIP,
    cube, PE, with ``sizes`` = (PEs per cube, cubes per SIP, SIPs): the cube's PEs in order, the same PE of
    the SIP's cubes around :func:`~kbfast.workloads.collectives.placement.mesh_cycle`, the same PE and cube of
    every SIP; a level of one rank has no directions."""
    n1, n2, n3 = sizes
    cycle = np.array(mesh_cycle(cube_w, cube_h), np.int64)
    place_of = np.argsort(cycle)
    rank = np.arange(n1 * n2 * n3)
    sip, rest = np.divmod(rank, n1 * n2)
    cube, pe = np.divmod(rest, n1)
    place = place_of[cube]
    labels, cols = [], []
    for (east, west), m, step in zip(LEVELS, sizes, (
            lambda d: (sip * n2 + cube) * n1 + (pe + d) % n1,
            lambda d: (sip * n2 + cycle[(place + d) % n2]) * n1 + pe,
            lambda d: (((sip + d) % n3) * n2 + cube) * n1 + pe)):
        if m > 1:
            labels += [east, west]
            cols += [step(1), step(-1)]
    return labels, np.stack(cols, axis=1) if cols else np.zeros((len(rank), 0), np.int64)


def _wiring(t, n: int, info: dict) -> Install:
    """:func:`peers` of the rank set's levels, installed."""
    return install_peers(*peers(levels(info, n), info["cube_w"], info["cube_h"]))


HIER2D = Algorithm(kernel, _wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
