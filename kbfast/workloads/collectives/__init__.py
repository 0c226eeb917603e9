"""Collective generators: each emits Program IR through kernel-style rank programs (spec_ccl §5).

One module per all-reduce algorithm, each building an
:class:`~kbfast.workloads.collectives.algorithm.Algorithm` (kernel, IPCQ install, rank roles, ranks), and
one line per algorithm in :mod:`~kbfast.workloads.collectives.table`:

* :mod:`.lrab`: ``lrab`` and ``lrab_corner``, ``lrab_hierarchical_allreduce`` on pe0 of every cube
  (§5.6–§5.9); its inter-SIP exchange per SIP topology (ring_1d, torus_2d, mesh_2d_no_wrap) in
  :mod:`.inter_sip`.
* :mod:`.ring`: flat ring over PEs, every rank circulating the whole tile (§5.2).
* :mod:`.tree`: binary-tree reduce to rank 0, then broadcast (§5.4).
* :mod:`.hier3`: 3-level hierarchical (§5.5): PE line in a cube, pe0 line over cubes, line over SIPs.
* :mod:`.rs_ag`: chunked ring reduce-scatter then all-gather (bandwidth optimal).

Shared: :mod:`.steps` (ring circulation, chain, converge, spread), :mod:`.placement` (rank nodes and what
the kernels read of the system), :mod:`.generate` (``allreduce``: the Program, the symbolic check and the
launch barrier), :mod:`.hops` (``pe2pe``, a point-to-point probe without tile I/O).

Ranks: ``cube_pe0`` (pe0 of every cube of every SIP) or ``all_pes``.
"""

from kbfast.workloads.collectives.generate import Collective, allreduce, busbw_gbps, check_tile_fits
from kbfast.workloads.collectives.hops import HOPS, hop_endpoints, pe2pe
from kbfast.workloads.collectives.lrab import intercube_peers, intercube_wiring
from kbfast.workloads.collectives.placement import RANKS, kernel_info
from kbfast.workloads.collectives.rs_ag import MAX_RANKS as RS_AG_MAX_RANKS
from kbfast.workloads.collectives.rs_ag import kernel as rs_ag_kernel
from kbfast.workloads.collectives.table import ALGORITHMS, KERNELS, TABLE

__all__ = ["ALGORITHMS", "HOPS", "KERNELS", "RANKS", "RS_AG_MAX_RANKS", "TABLE", "Collective", "allreduce",
           "busbw_gbps", "check_tile_fits", "hop_endpoints", "intercube_peers", "intercube_wiring", "kernel_info",
           "pe2pe", "rs_ag_kernel"]
