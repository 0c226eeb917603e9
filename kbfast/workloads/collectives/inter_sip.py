"""lrab's inter-SIP exchange, one entry per SIP topology (spec_ccl §5.9): ring_1d, torus_2d, mesh_2d_no_wrap.

The exchange runs on the root cube's pe0 of every SIP over the ``global_*`` directions; each entry gives
the SIPs' neighbour table, the exchange itself and the SIP-position features its control flow depends on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbfast.workloads.install import grid_peers, ring_peers
from kbfast.workloads.kernels import Tl
from kbfast.workloads.collectives.steps import chain, ring_circulate


@dataclass(frozen=True)
class InterSip:
    """One SIP topology's exchange: ``peers(n_sips, w, h)`` -> (labels, neighbour table) over the SIP grid;
    ``exchange(tl, acc, sip, n_sips, w, h)`` reduces and broadcasts ``acc`` over the SIPs (a generator);
    ``roles(sip, w, h)`` the per-SIP feature columns the exchange's ops depend on."""

    peers: Callable[[int, int, int], tuple[list[str], np.ndarray]]
    exchange: Callable
    roles: Callable[[np.ndarray, int, int], list]


def _ring(tl: Tl, acc: int, sip: int, n_sips: int, w: int, h: int):
    """Ring over all SIPs: n_sips - 1 circulation rounds (spec_ccl §5.2)."""
    return (yield from ring_circulate(tl, acc, "global_E", "global_W", n_sips))


def _torus(tl: Tl, acc: int, sip: int, n_sips: int, w: int, h: int):
    """A ring along each SIP row, then along each SIP column."""
    if w > 1:
        acc = yield from ring_circulate(tl, acc, "global_E", "global_W", w)
    if h > 1:
        acc = yield from ring_circulate(tl, acc, "global_S", "global_N", h)
    return acc


def _mesh(tl: Tl, acc: int, sip: int, n_sips: int, w: int, h: int):
    """A chain reduce and broadcast along each SIP row, then along each SIP column."""
    row, col = divmod(sip, w)
    acc = yield from chain(tl, acc, col, w, "global_W", "global_E")
    acc = yield from chain(tl, acc, row, h, "global_N", "global_S")
    return acc


def _mesh_roles(sip: np.ndarray, w: int, h: int) -> list:
    """The chains depend on the SIP's position on the grid's edges."""
    srow, scol = np.divmod(sip, w)
    return [scol == 0, scol == w - 1, srow == 0, srow == h - 1]


INTER_SIP = {
    "ring_1d": InterSip(lambda n, w, h: ring_peers(n, "global_"), _ring, lambda sip, w, h: []),
    "torus_2d": InterSip(lambda n, w, h: grid_peers(w, h, wrap=True, prefix="global_"), _torus,
                         lambda sip, w, h: []),
    "mesh_2d_no_wrap": InterSip(lambda n, w, h: grid_peers(w, h, wrap=False, prefix="global_"), _mesh,
                                _mesh_roles),
}
