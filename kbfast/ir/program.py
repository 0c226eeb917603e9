"""The Program IR: a workload as flat numpy arrays (design §4).

A Program has *agents* (PEs, or the host at a SIP's ``pcie_ep``), each with a
sequential op list in program order, plus the routes its transfers take, all
resolved from the shared :class:`~kbfast.topology.routing.Router`.  Both
evaluators read the same Program; neither owns routing or workload logic.

Ops (``op_code``):

* ``START``      the kernel body starts (at the launch barrier, spec_pe §3.3);
* ``DMA_WRITE`` / ``DMA_READ`` (``op_target`` = destination node, ``op_nbytes``,
  ``op_addr`` = HBM byte offset of the first byte, which selects the PCs);
  blocking, or asynchronous (``op_async``) with a later ``WAIT``;
* ``WAIT``       waits for op ``op_target`` (a global op index), or for every
  outstanding asynchronous op of the agent when ``op_target = -1``;
* ``COMPUTE``    busy for ``op_arg`` ns;
* ``SEND``       posts ``op_nbytes`` on IPCQ channel ``op_target`` (blocks only while the ring is full);
* ``RECV``       takes the next message of channel ``op_target`` (``-1``: any inbound channel of the
  agent, round robin); ``op_arg`` = 1 consumes the slot (slot read charged), 0 is ``recv_no_consume``;
  asynchronous with ``op_async`` (then a later ``WAIT`` on it);
* ``MATH``       PE_MATH over ``op_nbytes`` elements for ``op_arg`` ns (``max(overhead, n * ns_per_elem)``).

Channels (IPCQ queue pairs, spec_ccl §1.2) carry sender and receiver agents, the
data route, ring depth and slot size, the slot tier and the credit latency.

Generators build Programs through :class:`~kbfast.ir.builder.ProgramBuilder`, never by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from kbfast.topology.builder import Tables
from kbfast.topology.names import node_name


class Op(IntEnum):
    """Op codes of a Program (``op_code``); the module docstring says what each does."""

    START = 0
    DMA_WRITE = 1
    DMA_READ = 2
    WAIT = 3
    COMPUTE = 4
    SEND = 5
    RECV = 6
    MATH = 7
    FETCH = 8
    STORE = 9
    GEMM = 10


RECV_ANY = -1                          # RECV's channel: any inbound channel of the agent, round robin
BUFFER_KINDS = ("tcm", "sram", "hbm")  # IPCQ slot tiers; a channel's ``kind`` indexes this tuple


class AgentKind(IntEnum):
    """What issues an agent's ops: a PE (from its ``pe_dma``) or the host (at a SIP's ``pcie_ep``)."""

    PE = 0
    HOST = 1


WAIT_ALL = -1   # WAIT's target: every outstanding asynchronous op of the agent


@dataclass(frozen=True)
class Program:
    """A compiled workload.  Route ``r`` has edges ``route_edges[route_ptr[r]:route_ptr[r+1]]``."""

    tables: Tables
    name: str
    agent_node: np.ndarray     # int32 [A]: pe_dma node (PE) or pcie_ep node (host)
    agent_kind: np.ndarray     # int8 [A]
    agent_start_ns: np.ndarray  # float64 [A]: when the agent's first op may run
    op_ptr: np.ndarray         # int64 [A+1]: agent a runs agent_ops[op_ptr[a]:op_ptr[a+1]] in order
    agent_ops: np.ndarray      # int64 [O]: op ids grouped by agent, in program order
    op_code: np.ndarray        # int8 [O]
    op_target: np.ndarray      # int32 [O]
    op_nbytes: np.ndarray      # int64 [O]
    op_addr: np.ndarray        # int64 [O]
    op_async: np.ndarray       # bool [O]
    op_arg: np.ndarray         # float64 [O]
    op_route: np.ndarray       # int32 [O]: forward route (-1: none)
    op_rroute: np.ndarray      # int32 [O]: reverse route, taken by the response
    route_ptr: np.ndarray      # int64 [R+1]
    route_edges: np.ndarray    # int32: global edge ids
    channels: "Channels"
    launch_ns: float = 0.0     # target_start_ns of the launch barrier (0 when there is no launch)
    op_phase: np.ndarray | None = None   # int16 [O]: index into phase_names (-1: none)
    phase_names: tuple[str, ...] = ()

    @property
    def n_agents(self) -> int:
        """Number of agents (PEs, GEMM helper agents and hosts)."""
        return len(self.agent_node)

    @property
    def n_ops(self) -> int:
        """Number of ops over all agents."""
        return len(self.op_code)

    @property
    def op_agent(self) -> np.ndarray:
        """int32 [O]: the agent of each op."""
        out = np.empty(self.n_ops, np.int32)
        out[self.agent_ops] = np.repeat(np.arange(self.n_agents, dtype=np.int32), np.diff(self.op_ptr))
        return out

    def ops_of(self, a: int) -> np.ndarray:
        """Op ids of agent ``a`` in program order."""
        return self.agent_ops[self.op_ptr[a]:self.op_ptr[a + 1]]

    def agent_name(self, a: int) -> str:
        """A PE agent's PE name (``sip0.cube0.pe0``), or ``host@`` and the host's ``pcie_ep`` node name."""
        name = node_name(self.tables, int(self.agent_node[a]))
        return name.rsplit(".", 1)[0] if self.agent_kind[a] == AgentKind.PE else f"host@{name}"

    def route(self, r: int) -> np.ndarray:
        """The global edge ids of route ``r``, in order."""
        return self.route_edges[self.route_ptr[r]:self.route_ptr[r + 1]]


@dataclass(frozen=True)
class Channels:
    """IPCQ channels (queue pairs), one row per channel; see spec_ccl §1–§2."""

    src: np.ndarray            # int64: sending agent
    dst: np.ndarray            # int64: receiving agent
    route: np.ndarray          # int64: data route (sender pe_dma -> receiver pe_dma)
    n_slots: np.ndarray        # int64
    slot_size: np.ndarray      # int64 (grown to fit the largest message)
    kind: np.ndarray           # int8: 0 tcm, 1 sram, 2 hbm
    setup_ns: np.ndarray       # float64: slot tier setup, charged at slot write and slot read
    tier_bw: np.ndarray        # float64: slot tier bandwidth
    hop_bw: np.ndarray         # float64: PE <-> bank hop bottleneck (inf for tcm)
    credit_ns: np.ndarray      # float64: credit latency (blocking: path latency of the credit bytes)
    in_ptr: np.ndarray         # int64 [A+1]: inbound channels of agent a = in_list[in_ptr[a]:in_ptr[a+1]]
    in_list: np.ndarray        # int64, in install order
    credit_blocking: bool = True
    poll_ns: float = 0.0       # 0: backpressure sleep; else the poll interval

    def __len__(self) -> int:
        return len(self.src)

