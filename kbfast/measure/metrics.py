"""Metrics shared by both evaluators: utilisation and the latency breakdown.

Definitions follow kernbench's PE-DMA tooling (spec_memory §10.1, spec_fabric §5.4–§5.5):

* ``effective_bw = n_issuers * nbytes / makespan``;
* ``util_single = effective_bw / min bw on the first issuer's route``;
* ``util_aggregate = effective_bw / sum over routes of min_e (bw_e / usage_count_e)``,
  the max-min fair-share aggregate peak (``usage_count_e`` = routes using edge e).

The breakdown splits a single transfer into kernbench's categories:
``pe_setup`` (DMA channel wait), ``noc_mesh``, ``ucie``, ``fabric`` (IO chiplet,
PCIe, switch, store-and-forward re-streams), ``wire_transfer``
(``(n_flits-1) * flit / bottleneck``), ``hbm_ctrl`` (final PC commit) and
``contention``, the residual against the measured latency.
"""

from __future__ import annotations

import numpy as np

from kbfast.topology.builder import Tables
from kbfast.topology.kinds import EdgeKind, NodeKind

BREAKDOWN = ("pe_setup", "noc_mesh", "ucie", "fabric", "wire_transfer", "hbm_ctrl", "contention")

_UCIE_NODES = {NodeKind.UCIE, NodeKind.UCIE_CONN}
_FABRIC_NODES = {NodeKind.SWITCH, NodeKind.PCIE_EP, NodeKind.IO_CPU, NodeKind.IO_NOC, NodeKind.IO_UCIE,
                 NodeKind.IO_CONN}
_UCIE_EDGES = {EdgeKind.UCIE_INTERNAL, EdgeKind.UCIE_MESH}
_FABRIC_EDGES = {EdgeKind.IO_INTERNAL, EdgeKind.IO_TO_CUBE, EdgeKind.CUBE_TO_IO, EdgeKind.PCIE}
_HBM_EDGES = (EdgeKind.ROUTER_TO_HBM, EdgeKind.HBM_TO_ROUTER)


def bottleneck_gbs(t: Tables, edges: np.ndarray) -> float:
    """The slowest bandwidth along ``edges`` (GB/s); infinite for an empty route."""
    return float(t.edge_bw_gbs[edges].min()) if len(edges) else float("inf")


def utilization(t: Tables, routes: list[np.ndarray], nbytes: int, makespan_ns: float) -> tuple[float, float, float]:
    """(effective_bw_gbps, util_single, util_aggregate) for equal-size transfers on ``routes``."""
    if makespan_ns <= 0 or not routes:
        return 0.0, 0.0, 0.0
    eff = len(routes) * nbytes / makespan_ns
    single = eff / bottleneck_gbs(t, routes[0])
    usage = np.bincount(np.concatenate(routes), minlength=t.n_edges) if routes else None
    fair = sum(float((t.edge_bw_gbs[r] / usage[r]).min()) for r in routes)
    return eff, single, eff / fair


def _category(kind_node: int | None, kind_edge: int | None) -> str:
    if kind_node is not None:
        if kind_node in _UCIE_NODES:
            return "ucie"
        if kind_node in _FABRIC_NODES:
            return "fabric"
        if kind_node == NodeKind.HBM_CTRL:
            return "hbm_ctrl"
        return "noc_mesh"
    if kind_edge in _UCIE_EDGES:
        return "ucie"
    if kind_edge in _FABRIC_EDGES:
        return "fabric"
    return "noc_mesh"


def breakdown(t: Tables, fwd: np.ndarray, rev: np.ndarray | None, nbytes: int, latency_ns: float,
              pe_setup_ns: float = 0.0, commit_ns: float | None = None) -> dict[str, float]:
    """Split one transfer's latency into kernbench's categories (residual = ``contention``).

    Forward: the first flit's node overheads, flit times and propagation; the
    ``(n_flits-1)`` streaming term of every store-and-forward segment (the
    last segment's is ``wire_transfer``, earlier ones count as ``fabric``);
    the final PC commit.  Reverse (``rev``, zero-byte response): propagation
    and intermediate-node overheads.
    """
    flit = t.spec.fabric.flit_bytes
    out = dict.fromkeys(BREAKDOWN, 0.0)
    out["pe_setup"] = pe_setup_ns
    n_flits = -(-nbytes // flit)
    first = min(flit, nbytes)
    src = int(t.edge_src[fwd[0]])
    out[_category(int(t.node_kind[src]), None)] += float(t.node_overhead_ns[src])
    seg_bn = float("inf")
    for k, e in enumerate(fwd):
        cat = _category(None, int(t.edge_kind[e]))
        out[cat] += first / float(t.edge_bw_gbs[e]) + float(t.edge_prop_ns[e])
        seg_bn = min(seg_bn, float(t.edge_bw_gbs[e]))
        v = int(t.edge_dst[e])
        out[_category(int(t.node_kind[v]), None)] += float(t.node_overhead_ns[v])
        if k < len(fwd) - 1 and not t.node_flit_aware[v] and n_flits > 1:
            out["fabric"] += (nbytes - first) / seg_bn
            seg_bn = float("inf")
    if n_flits > 1:
        out["wire_transfer"] += (nbytes - first) / seg_bn
    if commit_ns is not None:
        out["hbm_ctrl"] += commit_ns
    if rev is not None:
        for k, e in enumerate(rev):
            out[_category(None, int(t.edge_kind[e]))] += float(t.edge_prop_ns[e])
            v = int(t.edge_dst[e])
            if k < len(rev) - 1:
                out[_category(int(t.node_kind[v]), None)] += float(t.node_overhead_ns[v])
    out["contention"] = latency_ns - sum(v for k, v in out.items() if k != "contention")
    return out


def last_stretch(t: Tables, fwd: np.ndarray) -> np.ndarray:
    """The edges of route ``fwd`` after its last store-and-forward node: the stretch whose streaming
    :func:`breakdown` counts as ``wire_transfer``."""
    stores = np.flatnonzero(~t.node_flit_aware[t.edge_dst[fwd[:-1]]])
    return fwd[stores[-1] + 1:] if len(stores) else fwd


def streams_at_hbm_rate(t: Tables, fwd: np.ndarray) -> bool:
    """Whether the last stretch of route ``fwd`` (:func:`last_stretch`) streams at an HBM link's rate: an
    edge to or from an HBM controller is among its slowest, so a faster fabric would not stream it faster."""
    seg = last_stretch(t, fwd)
    bw = t.edge_bw_gbs[seg]
    hbm = np.isin(t.edge_kind[seg], _HBM_EDGES)
    return bool(hbm.any() and bw[hbm].min() <= bw.min())


def phase_ends(program, op_end_ns: np.ndarray, start_ns: float) -> dict[str, float]:
    """Per phase, the time from the start barrier until its last op ended, in order of those ends."""
    out: dict[str, float] = {}
    if program.op_phase is None:
        return out
    for i, name in enumerate(program.phase_names):
        sel = program.op_phase == i
        if sel.any():
            out[name] = float(op_end_ns[sel].max() - start_ns)
    return dict(sorted(out.items(), key=lambda kv: kv[1]))
