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
* :mod:`.ring_pipe`: the same, pipelined: each chunk in pieces, forwarded as each is reduced, on a ring
  whose hops are short (:func:`.placement.ring_order`).
* :mod:`.hier2d`: pipelined rings at the tray's three levels: in the cube, around the cube mesh, across SIPs.

Shared: :mod:`.steps` (ring circulation, chain, converge, spread), :mod:`.placement` (rank nodes and what
the kernels read of the system), :mod:`.generate` (``allreduce``: the Program, the symbolic check and the
launch barrier), :mod:`.hops` (``pe2pe``, a point-to-point probe without tile I/O).

Operations (:mod:`.ops`): all-reduce, reduce-scatter, all-gather, broadcast, reduce, all-to-all;
``collective`` builds any of them with an algorithm of ``OP_TABLE``: :mod:`.ring_pipe` (the pipelined
ring: all-reduce, reduce-scatter, all-gather), :mod:`.chain` (broadcast, reduce), :mod:`.all_to_all`.

Ranks: ``cube_pe0`` (pe0 of every cube of every SIP), ``all_pes``, ``sip_pe0`` (one PE per SIP) or a list
of PEs.
"""

from kbfast.workloads.collectives.algorithm import check_slots
from kbfast.workloads.collectives.generate import (Collective, allreduce, busbw_gbps, check_names, check_tile_fits,
                                                   collective)
from kbfast.workloads.collectives.ops import OPS
from kbfast.workloads.collectives.hops import HOPS, check_hop, hop_endpoints, pe2pe
from kbfast.workloads.collectives.lrab import intercube_peers, intercube_wiring
from kbfast.workloads.collectives.placement import RANKS, kernel_info
from kbfast.workloads.collectives.rs_ag import MAX_RANKS as RS_AG_MAX_RANKS
from kbfast.workloads.collectives.rs_ag import kernel as rs_ag_kernel
from kbfast.workloads.collectives.table import ALGORITHMS, KERNELS, OP_TABLE, TABLE

__all__ = ["ALGORITHMS", "HOPS", "KERNELS", "OPS", "OP_TABLE", "RANKS", "RS_AG_MAX_RANKS", "TABLE", "Collective",
           "allreduce", "busbw_gbps", "check_hop", "check_names", "check_slots", "check_tile_fits", "collective",
           "hop_endpoints", "intercube_peers", "intercube_wiring", "kernel_info", "pe2pe", "rs_ag_kernel"]
