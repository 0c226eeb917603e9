"""Batched isolated transfers: many configuration points in one jitted call (design §6 "batched").

Points share one set of routes (a topology shape; resolved by
:func:`kbfast.sim.lowering.transfer_routes`) and may differ in size, address, route and parameter set.  A parameter set is one row of the per-edge
(bandwidth, propagation) and per-node (overhead) tables plus the HBM
constants, so a sweep over bandwidths or overheads is a stack of rows, not a
Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from kbfast.config.schema import SystemSpec
from kbfast.fast.closed_form import D2H, H2D, PE_READ, PE_REQ, new_buf, new_pcs, transfer_end
from kbfast.sim.lowering import TransferRoutes, hbm_constants, ns_per_byte
from kbfast.topology.builder import Tables

KINDS = {"pe_dma": PE_REQ, "pe_read": PE_READ, "h2d": H2D, "d2h": D2H}


@njit(cache=True)
def isolated_batch(kind, nbytes, addr, fwd, rev, pset, order, r_ptr, r_edges, e_src, e_dst, n_flit, e_c, e_bw,
                   e_prop, n_ovh, F, burst, pc_shift, n_pcs, commit, burst_commit,
                   max_route):  # pragma: no cover - jitted
    """Latency of every point: ``transfer_end`` with the point's route and parameter-set row.

    Points run in ``order`` (by parameter set, then route), so that consecutive points share the
    size-independent part of the closed form (``_prepare``'s memo, named by the parameter set).
    """
    out = np.empty(len(nbytes))
    _batch_loop(out, new_buf(max_route), new_pcs(64), kind, nbytes, addr, fwd, rev, pset, order, r_ptr, r_edges,
                e_src, e_dst, n_flit, e_c, e_bw, e_prop, n_ovh, F, burst, pc_shift, n_pcs, commit, burst_commit)
    return out


# No NRT: the loop allocates nothing, and without it the per-point row views and the calls pay no
# atomic reference counting (as in kbfast.fast.schedule._run).
@njit(cache=True, _nrt=False)
def _batch_loop(out, buf, pcs, kind, nbytes, addr, fwd, rev, pset, order, r_ptr, r_edges, e_src, e_dst, n_flit, e_c,
                e_bw, e_prop, n_ovh, F, burst, pc_shift, n_pcs, commit, burst_commit):  # pragma: no cover - jitted
    for i in order:
        s = pset[i]
        f, r = fwd[i], rev[i]
        out[i] = transfer_end(kind[i], 0.0, nbytes[i], addr[i], r_edges, r_ptr[f], r_ptr[f + 1], r_edges,
                              r_ptr[r], r_ptr[r + 1], e_src, e_dst, e_c[s], e_bw[s], e_prop[s], n_ovh[s], n_flit,
                              F[s], burst[s], pc_shift[s], n_pcs[s], commit[s], burst_commit[s], pcs, buf, s)


@dataclass(frozen=True)
class ParamRows:
    """Per-parameter-set rows of the kernel's attribute tables (over compact edges/nodes)."""

    e_c: np.ndarray
    e_bw: np.ndarray
    e_prop: np.ndarray
    n_ovh: np.ndarray
    F: np.ndarray
    burst: np.ndarray
    pc_shift: np.ndarray
    n_pcs: np.ndarray
    commit: np.ndarray
    burst_commit: np.ndarray


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
    return isolated_batch(
        (np.full(len(src), KINDS[kind], np.int64) if isinstance(kind, str) else
         np.array([KINDS[k] for k in kind], np.int64)), nbytes, addr, inv, k + inv, pset, _by_set_and_route(pset, inv, k),
        r_ptr, routes.r_edges, routes.e_src, routes.e_dst,
        t.node_flit_aware[nodes], rows.e_c, rows.e_bw, rows.e_prop, rows.n_ovh, rows.F, rows.burst, rows.pc_shift,
        rows.n_pcs, rows.commit, rows.burst_commit, int(np.diff(r_ptr).max()))
