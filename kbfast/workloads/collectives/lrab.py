"""lrab: ``lrab_hierarchical_allreduce`` on pe0 of every cube (spec_ccl §5.6–§5.9).

Centre root (or the SE corner: ``lrab_corner``, §5.6), bidirectional row then column reduce, the inter-SIP
exchange on the root cube (:mod:`~kbfast.workloads.collectives.inter_sip`, over ``global_*``), column
then row broadcast; a single cube skips the mesh phases (§5.8).
"""

from __future__ import annotations

import numpy as np

from kbfast.errors import KbfastError
from kbfast.topology.builder import Tables
from kbfast.workloads.install import Wiring, grid_peers, neighbor_fn, wire
from kbfast.workloads.kernels import Tl
from kbfast.workloads.collectives.algorithm import Algorithm, role_rows
from kbfast.workloads.collectives.inter_sip import INTER_SIP
from kbfast.workloads.collectives.placement import sip_grid
from kbfast.workloads.collectives.steps import converge, spread


def intercube_wiring(t: Tables) -> Wiring:
    """pe0 of every cube: N/S/E/W on the cube mesh (no wrap) and ``global_*`` to the same cube of the
    neighbouring SIPs per ``sips.topology`` (spec_ccl §5.10), as arrays."""
    return wire(*intercube_peers(t))


def intercube_peers(t: Tables) -> tuple[list[str], np.ndarray]:
    """:func:`intercube_wiring`'s labels and neighbour table (rank = SIP * cubes + cube), before the install."""
    lay = t.layout
    nc = lay.n_cubes_per_sip
    neighbor_fn("mesh_2d_no_wrap", nc, lay.cube_w, lay.cube_h)     # the same checks as the install
    kind, w, h = sip_grid(t)
    if kind not in INTER_SIP:
        *most, last = INTER_SIP
        raise KbfastError(f"lrab's inter-SIP exchange supports {', '.join(most)} and {last}, "
                          f"not sips.topology={kind!r}")
    neighbor_fn(kind, lay.n_sips, w, h, prefix="global_")
    intra_l, intra = grid_peers(lay.cube_w, lay.cube_h, wrap=False)
    inter_l, inter = INTER_SIP[kind].peers(lay.n_sips, w, h)
    sip, cube = np.divmod(np.arange(lay.n_sips * nc), nc)
    a = np.where(intra[cube] >= 0, sip[:, None] * nc + intra[cube], -1)
    b = np.where(inter[sip] >= 0, inter[sip] * nc + cube[:, None], -1)
    return intra_l + inter_l, np.concatenate([a, b], axis=1)


def roles(n: int, info: dict) -> np.ndarray:
    """A cube rank's role: its cube, and its SIP's position where the inter-SIP exchange depends on it."""
    sip, cube = np.divmod(np.arange(n), info["cube_w"] * info["cube_h"])
    return role_rows([cube] + INTER_SIP[info["sip_kind"]].roles(sip, info["sip_w"], info["sip_h"]))


def _tag(tl: Tl, tag: bool, name: str):
    if tag:
        yield tl.phase(name)


def kernel(tl: Tl):
    """``lrab_hierarchical_allreduce`` on pe0 of every cube (spec_ccl §5.7)."""
    return (yield from body(tl, tl.contribution(), tl.rank))


def body(tl: Tl, acc: int, rank: int, tag: bool = True):
    """lrab's phases P1-P5 for value ``acc`` on cube rank ``rank`` (SIP * cubes + cube); returns the result.
    ``tag=False`` leaves the caller's phase in place (no P1-P5 phase tags)."""
    cw, ch, rc, rr = tl.info["cube_w"], tl.info["cube_h"], tl.info["root_col"], tl.info["root_row"]
    nc = cw * ch
    sip, cube = divmod(rank, nc)
    row, col = divmod(cube, cw)
    kind, n_sips, w, h = tl.info["sip_kind"], tl.info["n_sips"], tl.info["sip_w"], tl.info["sip_h"]
    if nc > 1:
        yield from _tag(tl, tag, "P1 row reduce")
        acc = yield from converge(tl, acc, col, rc, cw, "W", "E")
        if col == rc:
            yield from _tag(tl, tag, "P2 column reduce")
            acc = yield from converge(tl, acc, row, rr, ch, "N", "S")
    if cube == rr * cw + rc:
        yield from _tag(tl, tag, "P3 inter-SIP")
        if n_sips > 1:
            acc = yield from INTER_SIP[kind].exchange(tl, acc, sip, n_sips, w, h)
    if nc > 1:
        if col == rc:
            yield from _tag(tl, tag, "P4 column broadcast")
            acc = yield from spread(tl, acc, row, rr, ch, "N", "S")
        yield from _tag(tl, tag, "P5 row broadcast")
        acc = yield from spread(tl, acc, col, rc, cw, "W", "E")
    return acc


_ONLY = "lrab runs on pe0 of every cube (ranks=cube_pe0)"
LRAB = Algorithm(kernel, lambda t, n, info: intercube_wiring(t), roles, ranks="cube_pe0", only_ranks=_ONLY)
LRAB_CORNER = Algorithm(kernel, lambda t, n, info: intercube_wiring(t), roles, ranks="cube_pe0", only_ranks=_ONLY,
                        corner_root=True)
