"""Where a collective's ranks sit and what its kernels read of the system.

Ranks are ``cube_pe0`` (pe0 of every cube of every SIP) or ``all_pes`` (every PE), numbered SIP, then cube,
then PE.
"""

from __future__ import annotations

import numpy as np

from kbfast.topology.builder import Tables

RANKS = ("cube_pe0", "all_pes")


def sip_grid(t: Tables) -> tuple[str, int, int]:
    """The SIP topology's kind (``sips.topology``) and its grid's width and height."""
    spec = t.spec
    w, h = spec.sip_grid()
    return spec.sips.topology, w, h


def pe_nodes(t: Tables, per_cube: int) -> np.ndarray:
    """``pe_block(t, s, c, p)`` for every SIP s, cube c and PE p < ``per_cube``, in that order."""
    lay = t.layout
    local = np.array([t.cube_names.index(f"pe{p}.pe_dma") for p in range(per_cube)], np.int64)
    cube = (1 + lay.io_nodes + np.arange(lay.n_cubes_per_sip, dtype=np.int64) * lay.nodes_per_cube)[:, None]
    sip = (np.arange(lay.n_sips, dtype=np.int64) * lay.nodes_per_sip)[:, None]
    return (sip + (cube + local).ravel()).ravel()


def rank_nodes(t: Tables, ranks: str) -> np.ndarray:
    """The PE nodes of a rank set (one of :data:`RANKS`), in rank order."""
    return pe_nodes(t, 1 if ranks == "cube_pe0" else len(t.plan.pe_router))


def kernel_info(t: Tables, corner_root: bool = False) -> dict:
    """What the collective kernels read of the system: the cube mesh, the SIP grid and its kind, PEs per cube,
    cubes per SIP, and lrab's root cube (the centre, or the SE corner, spec_ccl §5.6-§5.7)."""
    lay = t.layout
    kind, w, h = sip_grid(t)
    return {"cube_w": lay.cube_w, "cube_h": lay.cube_h, "n_sips": lay.n_sips, "sip_kind": kind, "sip_w": w,
            "sip_h": h, "n_pe": len(t.plan.pe_router), "n_cubes": lay.n_cubes_per_sip,
            "root_col": lay.cube_w - 1 if corner_root else lay.cube_w // 2,
            "root_row": lay.cube_h - 1 if corner_root else lay.cube_h // 2}
