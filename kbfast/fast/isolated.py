"""Batched isolated transfers: many configuration points in one jitted call (design §6 "batched").

Points share one set of routes (a topology shape; resolved by
:func:`kbfast.sim.lowering.transfer_routes`) and may differ in size, address, route and parameter set.  A parameter set is one row of the per-edge
(bandwidth, propagation) and per-node (overhead) tables plus the HBM
constants, so a sweep over bandwidths or overheads is a stack of rows, not a
Python loop.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from kbfast.config.schema import SystemSpec
from kbfast.fast.closed_form import D2H, H2D, PE_READ, PE_REQ, new_buf, new_pcs, transfer_end
from kbfast.sim.lowering import Fabric, Hbm, TransferRoutes, hbm_constants, ns_per_byte
from kbfast.topology.builder import Tables

KINDS = {"pe_dma": PE_REQ, "pe_read": PE_READ, "h2d": H2D, "d2h": D2H}


# The points of a batch, in the order they run (by parameter set, then route): per point its kind (KINDS),
# bytes, HBM address, forward and reverse route ids and parameter set.
IsoPoints = namedtuple("IsoPoints", ["kind", "nbytes", "addr", "fwd", "rev", "pset"])

# Per parameter set (row), the kernel's attribute tables over the compact edges / nodes, and the HBM constants.
ParamRows = namedtuple("ParamRows", [
    "e_c",           # float64 [S, E]  ns per byte
    "e_bw",          # float64 [S, E]  bandwidth, GB/s
    "e_prop",        # float64 [S, E]  propagation, ns
    "n_ovh",         # float64 [S, N]  node overhead, ns
    "F", "burst", "pc_shift", "n_pcs",   # int64 [S]  flit and burst bytes, PC address shift, PCs
    "commit", "burst_commit",            # float64 [S]  one flit's and one burst's commit, ns
])


@njit(cache=True)
def isolated_batch(points, fabric, rows, max_route):  # pragma: no cover - jitted
    """Latency of every point of ``points`` (:data:`IsoPoints`): :func:`~kbfast.fast.closed_form.transfer_end`
    with the point's routes in ``fabric`` (a :data:`~kbfast.sim.lowering.Fabric`, whose attribute tables
    ``rows`` replaces per parameter set) and its parameter-set row of ``rows`` (:data:`ParamRows`);
    ``max_route``: the longest route, in edges.

    Points come by parameter set, then route, so that consecutive points share the size-independent part of
    the closed form (``_prepare``'s memo, named by the parameter set), and are read one after another.
    """
    out = np.empty(len(points.nbytes))
    _batch_loop(out, new_buf(max_route), new_pcs(64), points, fabric, rows)
    return out


# No NRT: the loop allocates nothing, and without it the per-point row views and the calls pay no
# atomic reference counting (as in kbfast.fast.schedule._run).
@njit(cache=True, _nrt=False)
def _batch_loop(out, buf, pcs, points, fabric, rows):  # pragma: no cover - jitted
    """The loop of :func:`isolated_batch` (same bundles; ``buf`` and ``pcs`` the closed form's scratch)."""
    for i in range(len(out)):
        s = points.pset[i]
        fab = Fabric(rows.n_ovh[s], fabric.n_flit, fabric.n_hbm, fabric.e_src, fabric.e_dst, rows.e_bw[s], rows.e_c[s],
                     rows.e_prop[s], fabric.r_ptr, fabric.r_edges)
        hbm = Hbm(n_pcs=rows.n_pcs[s], pc_shift=rows.pc_shift[s], burst_bytes=rows.burst[s], flit_bytes=rows.F[s],
                  commit_ns=rows.commit[s], burst_commit_ns=rows.burst_commit[s], switch_penalty_ns=0.0,
                  read_accept=False)
        out[i] = transfer_end(points.kind[i], 0.0, points.nbytes[i], points.addr[i], points.fwd[i], points.rev[i],
                              fab, hbm, pcs, buf, s)


def param_rows(tables_list: list[Tables], edges: np.ndarray, nodes: np.ndarray) -> ParamRows:
    """Stack the attributes of topologies of the same shape (same ids) into parameter-set rows."""
    bw = np.stack([t.edge_bw_gbs[edges] for t in tables_list])
    specs: list[SystemSpec] = [t.spec for t in tables_list]
    for s in specs:
        if s.fabric.flit_bytes != s.hbm.burst_bytes:
            raise ValueError("the fast path needs fabric.flit_bytes == hbm.burst_bytes")
    hbm = [hbm_constants(s) for s in specs]
    return ParamRows(
        e_c=ns_per_byte(bw), e_bw=bw,
        e_prop=np.stack([t.edge_prop_ns[edges] for t in tables_list]),
        n_ovh=np.stack([t.node_overhead_ns[nodes] for t in tables_list]),
        F=np.array([h.flit_bytes for h in hbm], np.int64),
        burst=np.array([h.burst_bytes for h in hbm], np.int64),
        pc_shift=np.array([h.pc_shift for h in hbm], np.int64),
        n_pcs=np.array([h.n_pcs for h in hbm], np.int64),
        commit=np.array([h.commit_ns for h in hbm]),
        burst_commit=np.array([h.burst_commit_ns for h in hbm]),
    )


def _by_set_and_route(pset: np.ndarray, route: np.ndarray, n_routes: int) -> np.ndarray:
    """Point order by (parameter set, route); a stable argsort of the smallest key type (numpy radix-sorts
    16-bit keys: 20 ms instead of 0.2 s for 10^6 points)."""
    key = pset * n_routes + route
    return np.argsort(key.astype(np.min_scalar_type(int(key.max()))), kind="stable")


def isolated_latencies(routes: TransferRoutes, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                       addr: np.ndarray | None = None, kind: str | list[str] = "pe_dma",
                       variants: list[Tables] | None = None, pset: np.ndarray | None = None) -> np.ndarray:
    """Isolated latency of each (src, dst, nbytes) point over ``routes`` (every pair's routes, from
    :func:`kbfast.sim.lowering.transfer_routes`); ``variants`` are same-shape parameter sets.

    ``kind``: ``pe_dma`` (src = a pe_dma node; a write, or a read that waits for its last commit), ``pe_read``
    (a PE read whose response leaves when the controller took its last flit), ``h2d`` or ``d2h`` (src = a
    pcie_ep node, over host routes); one for every point, or one per point (PE kinds only).
    """
    t = routes.tables
    src = np.asarray(src, np.int64)
    nbytes = np.broadcast_to(np.asarray(nbytes, np.int64), src.shape).copy()
    addr = np.zeros_like(nbytes) if addr is None else np.broadcast_to(np.asarray(addr, np.int64), src.shape).copy()
    inv = routes.pair_index(src, dst).ravel()
    k = len(routes.keys)
    edges, nodes, r_ptr = routes.edges, routes.nodes, routes.r_ptr
    rows = param_rows(variants or [t], edges, nodes)
    pset = np.zeros(len(src), np.int64) if pset is None else np.broadcast_to(np.asarray(pset, np.int64),
                                                                              src.shape).copy()
    kinds = (np.full(len(src), KINDS[kind], np.int64) if isinstance(kind, str) else
             np.array([KINDS[k] for k in kind], np.int64))
    # gathered in run order: the kernel then reads each array straight through (in input order, its random
    # reads missed the cache: a third of 10^6 random flows' time)
    order = _by_set_and_route(pset, inv, k)
    fwd = inv[order]
    points = IsoPoints(kind=kinds[order], nbytes=nbytes[order], addr=addr[order], fwd=fwd, rev=k + fwd,
                       pset=pset[order])
    fabric = Fabric(n_ovh=rows.n_ovh[0], n_flit=t.node_flit_aware[nodes], n_hbm=np.empty(0, np.int32),
                    e_src=routes.e_src, e_dst=routes.e_dst, e_bw=rows.e_bw[0], e_c=rows.e_c[0],
                    e_prop=rows.e_prop[0], r_ptr=r_ptr, r_edges=routes.r_edges)
    out = np.empty(len(order))
    out[order] = isolated_batch(points, fabric, rows, int(np.diff(r_ptr).max()))
    return out
