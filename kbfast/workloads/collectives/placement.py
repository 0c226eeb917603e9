"""Where a collective's ranks sit and what its kernels read of the system.

Rank sets: ``cube_pe0`` (pe0 of every cube of every SIP), ``all_pes`` (every PE), ``sip_pe0`` (pe0 of cube 0
of every SIP), numbered SIP, then cube, then PE; or an explicit list of PEs, ``sipS.cubeC.peP`` names
separated by commas, numbered in the list's order.
"""

from __future__ import annotations

import numpy as np

from kbfast.errors import KbfastError, UnknownNodeError, shown
from kbfast.topology.builder import Tables
from kbfast.topology.names import node_id

RANKS = ("cube_pe0", "all_pes", "sip_pe0")     # the named rank sets (or an explicit list of PEs)


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
    """The PE nodes of a rank set (one of :data:`RANKS`, or an explicit list: :func:`listed_nodes`), in rank
    order."""
    if ranks == "sip_pe0":
        return pe_nodes(t, 1)[:: t.layout.n_cubes_per_sip].copy()
    if ranks in RANKS:
        return pe_nodes(t, 1 if ranks == "cube_pe0" else len(t.plan.pe_router))
    return listed_nodes(t, ranks)


def is_listed(ranks: str | None) -> bool:
    """Whether ``ranks`` is an explicit list of PEs (it names a PE: ``sip...``), not a named rank set."""
    return ranks is not None and ranks not in RANKS and str(ranks).strip().startswith("sip")


def listed_nodes(t: Tables, ranks: str) -> np.ndarray:
    """The pe_dma nodes of an explicit rank list, ``sipS.cubeC.peP`` names separated by commas, in its order;
    a name that is no PE, a PE named twice or a list of fewer than two PEs is refused, by name."""
    names = [n.strip() for n in str(ranks).split(",") if n.strip()]
    out = []
    for name in names:
        try:
            out.append(node_id(t, f"{name}.pe_dma"))
        except UnknownNodeError:
            lay = t.layout
            raise KbfastError(f"ranks: {shown(name)} is not a PE of this system\n  hint: a PE is sipS.cubeC.peP "
                              f"with S < {lay.n_sips}, C < {lay.n_cubes_per_sip}, P < {len(t.plan.pe_router)}; "
                              "list two or more, separated by commas") from None
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise KbfastError(f"ranks: {', '.join(dup)} listed twice; each PE is one rank")
    if len(out) < 2:
        raise KbfastError(f"ranks {shown(ranks)}: a collective needs two or more PEs")
    return np.array(out, np.int64)


def kernel_info(t: Tables, corner_root: bool = False, ranks: str | None = None) -> dict:
    """What the collective kernels read of the system: the cube mesh, the SIP grid and its kind, PEs per cube,
    cubes per SIP, lrab's root cube (the centre, or the SE corner, spec_ccl §5.6-§5.7), and (``ranks``) the
    rank set, for :func:`ring_order`."""
    lay = t.layout
    kind, w, h = sip_grid(t)
    info = {"cube_w": lay.cube_w, "cube_h": lay.cube_h, "n_sips": lay.n_sips, "sip_kind": kind, "sip_w": w,
            "sip_h": h, "n_pe": len(t.plan.pe_router), "n_cubes": lay.n_cubes_per_sip,
            "root_col": lay.cube_w - 1 if corner_root else lay.cube_w // 2,
            "root_row": lay.cube_h - 1 if corner_root else lay.cube_h // 2}
    if ranks is not None:
        info["ranks"] = ranks
    return info


def mesh_cycle(w: int, h: int) -> list[int]:
    """The cubes of a ``w x h`` row-major mesh in an order where consecutive cubes are neighbours, and the
    last is a neighbour of the first when ``w`` or ``h`` is even (a Hamiltonian cycle: row 0 left to right,
    the other rows snaking over columns ``1 .. w-1``, then up column 0).  Both odd: the snake alone (its
    closing hop crosses the mesh)."""
    if w * h <= 2 or h == 1 or w == 1:
        return list(range(w * h))
    if h % 2 and not w % 2:                                  # snake the other way round: transpose
        return [(i % h) * w + i // h for i in mesh_cycle(h, w)]
    if h % 2:
        return [row * w + (col if row % 2 == 0 else w - 1 - col) for row in range(h) for col in range(w)]
    out = list(range(w))
    for row in range(1, h):
        cols = range(w - 1, 0, -1) if row % 2 else range(1, w)
        out += [row * w + c for c in cols]
    return out + [row * w for row in range(h - 1, 0, -1)]


def ring_order(info: dict, n: int) -> list[int]:
    """The ranks of ``cube_pe0`` or ``all_pes`` (numbered SIP, cube, PE) in a ring whose hops are short: a
    cube's PEs in turn, the cubes of a SIP along :func:`mesh_cycle`, the SIPs one after another.  A ring in
    rank order would send a row's last cube back across the row to the next row's first, so that several ring
    hops share one UCIe connection; in this order each connection carries one hop (the ring's bandwidth is
    the link's).  Any other rank set (``sip_pe0``, a list) keeps its rank order."""
    per_sip = info["n_cubes"]
    if info.get("ranks") not in ("cube_pe0", "all_pes", None):
        return list(range(n))
    per_cube = n // (info["n_sips"] * per_sip)
    if per_cube * info["n_sips"] * per_sip != n:
        return list(range(n))
    cubes = mesh_cycle(info["cube_w"], info["cube_h"])
    return [(s * per_sip + c) * per_cube + p for s in range(info["n_sips"]) for c in cubes for p in range(per_cube)]
