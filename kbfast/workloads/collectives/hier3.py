"""hier3: 3-level hierarchical all-reduce on every PE (spec_ccl §5.5).

A PE line in each cube, a pe0 line across each SIP's cubes, a line across the SIPs' cube 0, each a
bidirectional reduce onto its first member, then the broadcasts back down.
"""

from __future__ import annotations

import numpy as np

from kbfast.workloads.install import Wiring, wire
from kbfast.workloads.kernels import Tl
from kbfast.workloads.collectives.algorithm import Algorithm, role_rows
from kbfast.workloads.collectives.steps import converge, spread


def wiring(n_pe: int, n_cubes: int, n_sips: int) -> Wiring:
    """hier3's install (spec_ccl §5.5): a PE line per cube, pe0 lines N/S across a SIP's cubes, cube 0's
    pe0 lines ``global_*`` across SIPs, as arrays."""
    sip, rest = np.divmod(np.arange(n_pe * n_cubes * n_sips), n_cubes * n_pe)
    cube, pe = np.divmod(rest, n_pe)
    rank = np.arange(len(sip))
    rep = pe == 0
    sip0 = sip * n_cubes * n_pe
    cols = [np.where(pe > 0, rank - 1, -1), np.where(pe < n_pe - 1, rank + 1, -1),
            np.where(rep & (cube > 0), sip0 + (cube - 1) * n_pe, -1),
            np.where(rep & (cube < n_cubes - 1), sip0 + (cube + 1) * n_pe, -1),
            np.where(rep & (cube == 0) & (sip > 0), (sip - 1) * n_cubes * n_pe, -1),
            np.where(rep & (cube == 0) & (sip < n_sips - 1), (sip + 1) * n_cubes * n_pe, -1)]
    return wire(["intra_W", "intra_E", "N", "S", "global_W", "global_E"], np.stack(cols, axis=1))


def roles(n: int, info: dict) -> np.ndarray:
    """A rank's role: whether it ends its PE line, its cube line and its SIP line."""
    n_pe, nc = info["n_pe"], info["n_cubes"]
    sip, rest = np.divmod(np.arange(n), nc * n_pe)
    cube, pe = np.divmod(rest, n_pe)
    return role_rows([pe == 0, pe == n_pe - 1, cube == 0, cube == nc - 1, sip == 0, sip == info["n_sips"] - 1])


def kernel(tl: Tl):
    """3-level hierarchical (spec_ccl §5.5): PE line -> pe0, pe0 line over cubes -> cube 0, SIP line -> SIP 0."""
    n_pe, nc, n_sips = tl.info["n_pe"], tl.info["n_cubes"], tl.info["n_sips"]
    sip, rest = divmod(tl.rank, nc * n_pe)
    cube, pe = divmod(rest, n_pe)
    acc = tl.contribution()
    levels = [(pe, n_pe, "intra_W", "intra_E", True), (cube, nc, "N", "S", pe == 0),
              (sip, n_sips, "global_W", "global_E", pe == 0 and cube == 0)]
    for i, (pos, n, lo, hi, member) in enumerate(levels):
        if member and n > 1:
            yield tl.phase(f"L{i + 1} reduce")
            acc = yield from converge(tl, acc, pos, 0, n, lo, hi)
    for i, (pos, n, lo, hi, member) in reversed(list(enumerate(levels))):
        if member and n > 1:
            yield tl.phase(f"L{i + 1} broadcast")
            acc = yield from spread(tl, acc, pos, 0, n, lo, hi)
    return acc


HIER3 = Algorithm(kernel, lambda t, n, info: wiring(info["n_pe"], info["n_cubes"], info["n_sips"]), roles,
                  only_ranks="hier3 runs on every PE (ranks=all_pes)")
