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

from kbfast.errors import KbfastError
from kbfast.workloads.collectives.algorithm import Algorithm
from kbfast.workloads.collectives.placement import mesh_cycle
from kbfast.workloads.collectives.ring_pipe import LOOKAHEAD, chunks, ring_level
from kbfast.workloads.collectives.rs_ag import check_ranks
from kbfast.workloads.install import Install, install
from kbfast.workloads.kernels import ScheduleError, Tl

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


def _merge(tl: Tl, row: list[int]) -> int:
    """The contributor set of a chunk whose pieces must all hold the same one."""
    if any(x != row[0] for x in row):
        raise ScheduleError(f"rank {tl.rank} holds a chunk whose pieces have different contributors")
    return row[0]


def kernel(tl: Tl):
    """The five passes (module docstring); returns the ranks present in every piece of every chunk at the end."""
    (i1, i2, i3), (n1, n2, n3) = _place(tl.info, tl.n_ranks, tl.rank)
    s1, s2 = tl.nbytes, max(tl.nbytes // n1, 1)
    s3 = max(s2 // n2, 1)
    have1 = chunks(n1, s1, tl.contribution())
    mine1 = i1
    if n1 > 1:
        yield tl.phase("cube reduce-scatter")
        mine1 = yield from ring_level(tl, have1, i1, n1, LEVELS[0], s1, n1 - 1, 0, -1)
    have2 = chunks(n2, s2, _merge(tl, have1[mine1]))
    mine2 = i2
    if n2 > 1:
        yield tl.phase("mesh reduce-scatter")
        mine2 = yield from ring_level(tl, have2, i2, n2, LEVELS[1], s2, n2 - 1, 0, -1)
    have3 = chunks(n3, s3, _merge(tl, have2[mine2]))
    if n3 > 1:
        yield tl.phase("sip all-reduce")
        yield from ring_level(tl, have3, i3, n3, LEVELS[2], s3, n3 - 1, n3 - 1, 0)
    have2[mine2] = [_merge(tl, [x for row in have3 for x in row])] * len(have2[mine2])
    if n2 > 1:
        yield tl.phase("mesh all-gather")
        yield from ring_level(tl, have2, i2, n2, LEVELS[1], s2, 0, n2 - 1, 0, mine2)
    have1[mine1] = [_merge(tl, [x for row in have2 for x in row])] * len(have1[mine1])
    if n1 > 1:
        yield tl.phase("cube all-gather")
        yield from ring_level(tl, have1, i1, n1, LEVELS[0], s1, 0, n1 - 1, 0, mine1)
    out = (1 << tl.n_ranks) - 1
    for row in have1:
        for x in row:
            out &= x
    return out


def _wiring(t, n: int, info: dict) -> Install:
    """A ring at each level: the cube's PEs in order, the same PE of the SIP's cubes around the mesh cycle, the
    same PE and cube of every SIP; a level of one rank has no directions."""
    n1, n2, n3 = levels(info, n)
    cycle = mesh_cycle(info["cube_w"], info["cube_h"])

    def rank_of(pe: int, place: int, sip: int) -> int:
        return (sip * n2 + cycle[place % n2]) * n1 + pe % n1

    def table(rank: int, n: int) -> dict[str, int]:
        (pe, place, sip), _ = _place(info, n, rank)
        out = {}
        for (east, west), m, (e, w) in zip(LEVELS, (n1, n2, n3), (
                (rank_of(pe + 1, place, sip), rank_of(pe - 1, place, sip)),
                (rank_of(pe, place + 1, sip), rank_of(pe, place - 1, sip)),
                (rank_of(pe, place, (sip + 1) % n3), rank_of(pe, place, (sip - 1) % n3)))):
            if m > 1:
                out.update({east: e, west: w})
        return out

    return install(n, table)


HIER2D = Algorithm(kernel, _wiring, None, check=check_ranks, min_slots=LOOKAHEAD)
