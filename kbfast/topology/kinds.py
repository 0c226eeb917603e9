"""Node and edge kinds of the system graph (spec_fabric §2–§3).

Kinds are small integers so that tables stay flat numpy arrays.
"""

from __future__ import annotations

from enum import IntEnum

from kbfast.config.schema import EDGE_KINDS


class NodeKind(IntEnum):
    """Kinds of node in the system graph (spec_fabric §2): switch, IO chiplet, cube and PE blocks."""

    SWITCH = 0
    PCIE_EP = 1
    IO_CPU = 2
    IO_NOC = 3
    IO_UCIE = 4
    IO_CONN = 5
    ROUTER = 6
    UCIE = 7
    UCIE_CONN = 8
    M_CPU = 9
    SRAM = 10
    HBM_CTRL = 11
    PE_DMA = 12
    PE_CPU = 13
    PE_SCHEDULER = 14
    PE_FETCH_STORE = 15
    PE_GEMM = 16
    PE_MATH = 17
    PE_TCM = 18
    PE_MMU = 19
    PE_IPCQ = 20


# Flit-aware nodes pass flits through one serial worker; the rest reassemble
# the whole transaction (store-and-forward).  spec_fabric §2, §5.3.
FLIT_AWARE = frozenset({NodeKind.SWITCH, NodeKind.IO_NOC, NodeKind.IO_UCIE, NodeKind.IO_CONN,
                        NodeKind.ROUTER, NodeKind.UCIE, NodeKind.UCIE_CONN, NodeKind.HBM_CTRL})

# The overhead_ns key of each node kind in the system description.
OVERHEAD_KEY = {
    NodeKind.SWITCH: "switch", NodeKind.PCIE_EP: "pcie_ep", NodeKind.IO_CPU: "io_cpu",
    NodeKind.IO_NOC: "io_noc", NodeKind.IO_UCIE: "io_ucie", NodeKind.IO_CONN: "io_conn",
    NodeKind.ROUTER: "router", NodeKind.UCIE: "ucie", NodeKind.UCIE_CONN: "ucie_conn",
    NodeKind.M_CPU: "m_cpu", NodeKind.SRAM: "sram", NodeKind.HBM_CTRL: "hbm_ctrl",
}

PE_BLOCKS = ("pe_dma", "pe_cpu", "pe_scheduler", "pe_fetch_store", "pe_gemm", "pe_math",
             "pe_tcm", "pe_mmu", "pe_ipcq")
PE_BLOCK_KINDS = tuple(NodeKind[b.upper()] for b in PE_BLOCKS)


EdgeKind = IntEnum("EdgeKind", [(name.upper(), i) for i, name in enumerate(EDGE_KINDS)], module=__name__)
EdgeKind.__doc__ = """Kinds of edge in the system graph; names and ids come from ``kbfast.config.schema.EDGE_KINDS``
(the keys of ``routing.weight_mm``): PE_TO_ROUTER = 0, ROUTER_TO_PE, COMMAND, ROUTER_MESH, ROUTER_TO_HBM,
HBM_TO_ROUTER, ROUTER_TO_SRAM, SRAM_TO_ROUTER, ROUTER_TO_UCIE_CONN, UCIE_CONN_TO_ROUTER, UCIE_INTERNAL, UCIE_MESH,
IO_INTERNAL, IO_TO_CUBE, CUBE_TO_IO, PCIE, PE_INTERNAL = 16."""


# Edge kinds that the same-cube graph excludes (spec_fabric §4.2 `_adj_local`).
UCIE_IO_KINDS = frozenset({EdgeKind.UCIE_INTERNAL, EdgeKind.ROUTER_TO_UCIE_CONN, EdgeKind.UCIE_CONN_TO_ROUTER,
                           EdgeKind.UCIE_MESH, EdgeKind.IO_TO_CUBE, EdgeKind.CUBE_TO_IO})


class Graph(IntEnum):
    """The four adjacency graphs of the original PathRouter (spec_fabric §4.2), plus LOCAL_DATA.

    LOCAL_DATA = DATA and LOCAL together, for same-cube PE DMA: with LOCAL alone a
    route to a PE whose attach edge is longer than 0 mm slips in through the
    0 mm ``router -> pe_cpu`` command edge and the one-way intra-PE chain, so it
    uses command edges and cannot be retraced by its response.
    """

    ALL = 0         # _adj_all: command legs (IO_CPU, M_CPU)
    DATA = 1        # _adj: PE DMA and general data paths (no command edges)
    MEMORY = 2      # _adj_mcpu_dma: host memory and M_CPU DMA (never enters PE pipelines)
    LOCAL = 3       # _adj_local: same-cube routes (no UCIe / IO edges); same-cube M_CPU DMA
    LOCAL_DATA = 4  # same-cube PE DMA: no UCIe / IO edges and no command edges


EXCLUDED_KINDS = {
    Graph.ALL: frozenset(),
    Graph.DATA: frozenset({EdgeKind.COMMAND}),
    Graph.MEMORY: frozenset({EdgeKind.PE_INTERNAL, EdgeKind.PE_TO_ROUTER}),
    Graph.LOCAL: UCIE_IO_KINDS,
    Graph.LOCAL_DATA: UCIE_IO_KINDS | {EdgeKind.COMMAND},
}
