"""Kernel launch and the global start barrier (spec_pe §3.3, spec_fabric §5.9).

The host submits a zero-byte KernelLaunch at each SIP's ``pcie_ep``; it reaches
IO_CPU over ``pcie_ep -> io_noc -> io_cpu``.  IO_CPU stamps::

    target_start_ns = t_io + max over targeted PEs of
        path_latency(io_cpu -> m_cpu) + path_latency(m_cpu -> pe_cpu) - io_cpu.ovh - m_cpu.ovh

where ``path_latency(path, 0)`` sums the overhead of every node on the path,
both endpoints included, and the propagation of every edge.  The two legs are
computed separately (a single io_cpu -> pe_cpu walk may skip M_CPU).  Fan-out
messages carry no bytes, so each PE's command arrives at exactly
``t_io + its own leg sum``, never after the barrier.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbfast.errors import KbfastError
from kbfast.topology.builder import Tables
from kbfast.topology.names import cube_locals, io_node, node_id
from kbfast.topology.routing import Router


@dataclass(frozen=True)
class LaunchTiming:
    """A launch's barrier: the common start time, when IO_CPU is ready, and when each PE gets its command."""

    target_start_ns: float
    io_cpu_ready_ns: float          # IO_CPU has paid its overhead (per SIP; identical SIPs)
    pe_arrival_ns: np.ndarray       # when each targeted PE_CPU receives its launch command


def path_latency_ns(t: Tables, router: Router, src: int, dst: int, kind: str = "node") -> float:
    """``compute_path_latency_ns(path, 0)``: all node overheads (both endpoints) plus propagation."""
    edges = router.route(src, dst, kind)
    nodes = np.concatenate([[src], t.edge_dst[edges]])
    return float(t.node_overhead_ns[nodes].sum() + t.edge_prop_ns[edges].sum())


def path_latencies_ns(t: Tables, router: Router, src: np.ndarray, dst: np.ndarray, kind: str = "node") -> np.ndarray:
    """:func:`path_latency_ns` of many (src, dst) pairs, with one batched route call."""
    rs = router.routes(src, dst, kind)
    out = np.empty(len(rs))
    for i, s in enumerate(np.asarray(src, np.int64).tolist()):      # the same sums as path_latency_ns, bit for bit
        edges = rs.edges_of(i)
        out[i] = float(t.node_overhead_ns[np.concatenate([[s], t.edge_dst[edges]])].sum() + t.edge_prop_ns[edges].sum())
    return out


def launch_timing(t: Tables, router: Router, pe_dma_nodes: np.ndarray) -> LaunchTiming:
    """Barrier for a launch that targets the PEs owning ``pe_dma_nodes`` (any SIPs)."""
    if len(pe_dma_nodes) == 0:
        raise KbfastError("a kernel launch needs at least one target PE")
    # Every SIP is identical and launched at t = 0, so SIP 0's legs serve all.
    pcie, io_cpu = io_node(t, 0, "pcie_ep"), io_node(t, 0, "io_cpu")
    t_io = path_latency_ns(t, router, pcie, io_cpu)
    ovh_io = float(t.node_overhead_ns[io_cpu])
    # Latency per (cube, node within cube), computed on SIP 0 and shared by every SIP.
    cube, local = cube_locals(t, pe_dma_nodes)
    keys, inverse = np.unique(cube * t.layout.nodes_per_cube + local, return_inverse=True)
    if not all(t.cube_names[k % t.layout.nodes_per_cube + 1].endswith(".pe_cpu") for k in keys):
        raise AssertionError("node layout changed: pe_cpu no longer follows pe_dma")
    c, pe_dma = np.divmod(keys, t.layout.nodes_per_cube)
    pe_cpu = np.array([t.layout.cube_node_base(0, k) for k in c.tolist()], np.int64) + pe_dma + 1  # after pe_dma
    m_cpu = np.array([node_id(t, f"sip0.cube{k}.m_cpu") for k in c.tolist()], np.int64)
    leg1 = path_latencies_ns(t, router, np.full(len(keys), io_cpu), m_cpu)
    leg2 = path_latencies_ns(t, router, m_cpu, pe_cpu)
    lat_of_key = leg1 + leg2 - ovh_io - t.node_overhead_ns[m_cpu].astype(float)
    lats = lat_of_key[inverse.ravel()]
    return LaunchTiming(target_start_ns=t_io + float(lats.max()), io_cpu_ready_ns=t_io,
                        pe_arrival_ns=t_io + lats)
