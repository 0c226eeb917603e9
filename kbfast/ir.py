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
* ``COMPUTE``    busy for ``op_arg`` ns.

Generators build Programs through :class:`ProgramBuilder`, never by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from kbfast.errors import KbfastError
from kbfast.topology.builder import Tables, reverse_edges
from kbfast.topology.kinds import NodeKind
from kbfast.topology.names import node_name
from kbfast.topology.routing import Router


class Op(IntEnum):
    START = 0
    DMA_WRITE = 1
    DMA_READ = 2
    WAIT = 3
    COMPUTE = 4


class AgentKind(IntEnum):
    PE = 0
    HOST = 1


WAIT_ALL = -1


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
    launch_ns: float = 0.0     # target_start_ns of the launch barrier (0 when there is no launch)

    @property
    def n_agents(self) -> int:
        return len(self.agent_node)

    @property
    def n_ops(self) -> int:
        return len(self.op_code)

    @property
    def op_agent(self) -> np.ndarray:
        out = np.empty(self.n_ops, np.int32)
        out[self.agent_ops] = np.repeat(np.arange(self.n_agents, dtype=np.int32), np.diff(self.op_ptr))
        return out

    def ops_of(self, a: int) -> np.ndarray:
        """Op ids of agent ``a`` in program order."""
        return self.agent_ops[self.op_ptr[a]:self.op_ptr[a + 1]]

    def agent_name(self, a: int) -> str:
        name = node_name(self.tables, int(self.agent_node[a]))
        return name.rsplit(".", 1)[0] if self.agent_kind[a] == AgentKind.PE else f"host@{name}"

    def route(self, r: int) -> np.ndarray:
        return self.route_edges[self.route_ptr[r]:self.route_ptr[r + 1]]


@dataclass
class _AgentOps:
    node: int
    kind: AgentKind
    start_ns: float = 0.0
    ops: list[int] = field(default_factory=list)   # op ids, in program order


class ProgramBuilder:
    """Collects agents and ops, then resolves every route in one batch."""

    def __init__(self, tables: Tables, router: Router | None = None, name: str = "program"):
        self.t = tables
        self.router = router or Router(tables)
        self.name = name
        self._agents: list[_AgentOps] = []
        self._ops: list[tuple] = []   # (agent, code, target, nbytes, addr, async, arg), op id = position

    # -- agents ---------------------------------------------------------------------
    def pe_agent(self, node: int, start_ns: float = 0.0) -> int:
        """An agent for the PE owning ``node`` (its ``pe_dma``)."""
        _check_start(start_ns)
        if self.t.node_kind[node] != NodeKind.PE_DMA:
            raise KbfastError(f"{node_name(self.t, node)} is not a pe_dma node; PE agents issue from pe_dma")
        self._agents.append(_AgentOps(node, AgentKind.PE, start_ns))
        return len(self._agents) - 1

    def host_agent(self, sip: int, start_ns: float = 0.0) -> int:
        """The host, injecting at SIP ``sip``'s ``pcie_ep`` (spec_fabric §10: no host->switch hop)."""
        _check_start(start_ns)
        chip = self.t.spec.sip.io_chiplets[0].id
        node = self.t.layout.sip_node_base(sip) + self.t.io_names.index(f"{chip}.pcie_ep")
        self._agents.append(_AgentOps(node, AgentKind.HOST, start_ns))
        return len(self._agents) - 1

    # -- ops ------------------------------------------------------------------------
    def _add(self, agent: int, code: Op, target: int = -1, nbytes: int = 0, addr: int = 0,
             is_async: bool = False, arg: float = 0.0) -> int:
        self._ops.append((agent, int(code), int(target), int(nbytes), int(addr), bool(is_async), float(arg)))
        self._agents[agent].ops.append(len(self._ops) - 1)
        return len(self._ops) - 1

    def start(self, agent: int) -> int:
        return self._add(agent, Op.START)

    def dma(self, agent: int, dst: int, nbytes: int, addr: int = 0, *, write: bool = True,
            is_async: bool = False) -> int:
        """A DMA of ``nbytes`` to HBM controller ``dst`` (PE DMA, or host H2D/D2H)."""
        if self.t.node_kind[dst] != NodeKind.HBM_CTRL:
            raise KbfastError(f"DMA destination {node_name(self.t, dst)} is not an HBM controller")
        if nbytes < 0 or addr < 0:
            raise KbfastError(f"DMA needs nbytes >= 0 and addr >= 0 (got {nbytes}, {addr})")
        return self._add(agent, Op.DMA_WRITE if write else Op.DMA_READ, dst, nbytes, addr, is_async)

    def wait(self, agent: int, op: int = WAIT_ALL) -> int:
        return self._add(agent, Op.WAIT, op)

    def compute(self, agent: int, ns: float) -> int:
        if ns < 0:
            raise KbfastError(f"COMPUTE needs ns >= 0 (got {ns})")
        return self._add(agent, Op.COMPUTE, arg=ns)

    # -- build ----------------------------------------------------------------------
    def build(self, launch_ns: float | None = None) -> Program:
        """Resolve routes (PE DMA: ``pe_dma`` kind; host: ``memory`` kind) and freeze the arrays.

        ``launch_ns`` sets every agent's start to the launch barrier.
        """
        rows = self._ops
        n = len(rows)
        code = np.array([op[1] for op in rows], np.int8)
        target = np.array([op[2] for op in rows], np.int32)
        nbytes = np.array([op[3] for op in rows], np.int64)
        addr = np.array([op[4] for op in rows], np.int64)
        is_async = np.array([op[5] for op in rows], bool)
        arg = np.array([op[6] for op in rows], np.float64)
        agent_of = np.array([op[0] for op in rows], np.int64)
        agent_node = np.array([ag.node for ag in self._agents], np.int32)
        agent_kind = np.array([int(ag.kind) for ag in self._agents], np.int8)

        waits = (code == Op.WAIT) & (target != WAIT_ALL)
        if np.any((target[waits] < 0) | (target[waits] >= n)):
            raise KbfastError("a WAIT names an op that does not exist")
        if np.any(agent_of[target[waits]] != agent_of[waits]):
            raise KbfastError("a WAIT may only wait for an op of its own agent")

        route = np.full(n, -1, np.int32)
        rroute = np.full(n, -1, np.int32)
        ptr_parts: list[np.ndarray] = []
        edge_parts: list[np.ndarray] = []
        n_routes = 0
        dma = np.flatnonzero((code == Op.DMA_WRITE) | (code == Op.DMA_READ))
        for kind, agent_k in (("pe_dma", AgentKind.PE), ("memory", AgentKind.HOST)):
            sel = dma[agent_kind[agent_of[dma]] == agent_k]
            if len(sel) == 0:
                continue
            pairs, inverse = np.unique(np.stack([agent_node[agent_of[sel]], target[sel]]), axis=1,
                                       return_inverse=True)
            rs = self.router.routes(pairs[0], pairs[1], kind)
            fwd_ptr, fwd_edges = rs.ptr, rs.edges
            rev_edges = reverse_route_edges(self.t, fwd_ptr, fwd_edges)
            k = len(pairs[0])
            route[sel] = n_routes + inverse.ravel()
            rroute[sel] = n_routes + k + inverse.ravel()
            base = sum(len(e) for e in edge_parts)
            ptr_parts.append(base + fwd_ptr[:-1])
            ptr_parts.append(base + len(fwd_edges) + fwd_ptr[:-1])
            edge_parts += [fwd_edges, rev_edges]
            n_routes += 2 * k
        route_edges = np.concatenate(edge_parts).astype(np.int32) if edge_parts else np.zeros(0, np.int32)
        route_ptr = np.append(np.concatenate(ptr_parts) if ptr_parts else np.zeros(0, np.int64),
                              len(route_edges)).astype(np.int64)
        counts = np.array([len(ag.ops) for ag in self._agents], np.int64)
        start = np.array([ag.start_ns for ag in self._agents], np.float64)
        if launch_ns is not None:
            start[:] = launch_ns
        return Program(tables=self.t, name=self.name, agent_node=agent_node, agent_kind=agent_kind,
                       agent_start_ns=start, op_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                       agent_ops=np.array([o for ag in self._agents for o in ag.ops], np.int64),
                       op_code=code, op_target=target, op_nbytes=nbytes, op_addr=addr, op_async=is_async,
                       op_arg=arg, op_route=route, op_rroute=rroute, route_ptr=route_ptr,
                       route_edges=route_edges, launch_ns=float(launch_ns or 0.0))


def _check_start(start_ns: float) -> None:
    if not start_ns >= 0.0:
        raise KbfastError(f"an agent's start time must be >= 0 ns (got {start_ns}); all resources start idle at 0")


def reverse_route_edges(t: Tables, ptr: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """For each route, the edges of the reversed path (responses retrace the route, spec_fabric §4.2)."""
    rev = reverse_edges(t, edges)
    lens = np.diff(ptr)
    route = np.repeat(np.arange(len(lens)), lens)
    pos = np.arange(len(edges)) - ptr[route]
    out = np.empty_like(rev)
    out[ptr[route] + lens[route] - 1 - pos] = rev
    return out
