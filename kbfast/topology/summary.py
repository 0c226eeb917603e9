"""Readable summaries of a compiled topology and of single routes (for ``kbfast topo``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kbfast.config.validation import lookup
from kbfast.topology.builder import Tables
from kbfast.topology.kinds import EdgeKind, NodeKind
from kbfast.topology.names import node_name


def _bw(x: float) -> float | None:
    return None if np.isinf(x) else float(x)


def summarize(t: Tables) -> dict[str, Any]:
    """Counts by kind, bandwidths by edge kind, the uncalibrated parameters (with values)."""
    spec, lay = t.spec, t.layout
    node_counts = np.bincount(t.node_kind, minlength=len(NodeKind))
    edge_counts = np.bincount(t.edge_kind, minlength=len(EdgeKind))
    edges_bw: dict[str, list[float | None]] = {}
    for k in EdgeKind:
        if edge_counts[k]:
            edges_bw[k.name.lower()] = sorted({_bw(b) for b in np.unique(t.edge_bw_gbs[t.edge_kind == k])},
                                              key=lambda b: (b is None, b or 0))
    return {
        "name": spec.name,
        "description": spec.description,
        "param_set": spec.param_set,
        "n_sips": lay.n_sips,
        "sip_topology": spec.sips.topology,
        "sip_grid": list(spec.sip_grid()),
        "cube_mesh": [lay.cube_w, lay.cube_h],
        "n_cubes": lay.n_sips * lay.n_cubes_per_sip,
        "n_pes": int(node_counts[NodeKind.PE_DMA]),
        "n_nodes": t.n_nodes,
        "n_edges": t.n_edges,
        "nodes_by_kind": {k.name.lower(): int(node_counts[k]) for k in NodeKind if node_counts[k]},
        "edges_by_kind": {k.name.lower(): int(edge_counts[k]) for k in EdgeKind if edge_counts[k]},
        "edge_bw_gbs_by_kind": edges_bw,
        "per_cube": {"routers": t.plan.n_routers, "pes": len(t.plan.pe_router),
                     "hbm_ctrls": len(t.plan.pe_router),
                     "ucie_ports": 4, "ucie_conns_per_port": len(t.plan.conn_router["N"])},
        "routing_policy": spec.routing.policy,
        "uncalibrated": {key: lookup(spec, key) for key in spec.uncalibrated},
        "table_bytes": t.nbytes(),
    }


def describe_route(t: Tables, src: int, edges: np.ndarray) -> dict[str, Any]:
    """Hops of a route with per-edge bandwidth; totals of node overhead and propagation; the bottleneck."""
    nodes = [src] + [int(t.edge_dst[e]) for e in edges]
    prop = t.edge_prop_ns
    hops = [{"src": node_name(t, int(t.edge_src[e])), "dst": node_name(t, int(t.edge_dst[e])),
             "kind": EdgeKind(int(t.edge_kind[e])).name.lower(), "bw_gbs": _bw(t.edge_bw_gbs[e]),
             "mm": float(t.edge_mm[e]), "prop_ns": float(prop[e])} for e in edges]
    bws = t.edge_bw_gbs[edges] if len(edges) else np.array([np.inf])
    # Intermediate nodes pay their overhead (the endpoints are source and sink).
    overhead = float(t.node_overhead_ns[nodes[1:-1]].sum()) if len(nodes) > 2 else 0.0
    return {
        "nodes": [node_name(t, n) for n in nodes],
        "hops": hops,
        "n_edges": len(edges),
        "node_overhead_ns": [None if i in (0, len(nodes) - 1) else float(t.node_overhead_ns[n])
                             for i, n in enumerate(nodes)],        # what a transfer pays at each node
        "transit_overhead_ns": overhead,
        "total_mm": float(t.edge_mm[edges].sum()),
        "propagation_ns": float(prop[edges].sum()),
        "bottleneck_bw_gbs": _bw(float(bws.min())),
        "store_and_forward": [node_name(t, n) for n in nodes[1:-1] if not t.node_flit_aware[n]],
    }
