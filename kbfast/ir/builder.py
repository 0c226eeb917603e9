"""Build Programs: :class:`ProgramBuilder` collects agents, ops and IPCQ channels, then resolves every route
in one batch through the shared :class:`~kbfast.topology.routing.Router` and freezes the arrays of a
:class:`~kbfast.ir.program.Program` (design §4)."""

from __future__ import annotations

import numpy as np

from kbfast.errors import KbfastError, not_one_of
from kbfast.ir.gemm_pipeline import gemm_ops, prefetch_ops
from kbfast.ir.program import BUFFER_KINDS, RECV_ANY, WAIT_ALL, AgentKind, Channels, Op, Program
from kbfast.ir.tiling import GemmPlan, math_ns
from kbfast.topology.builder import Tables, reverse_route_edges
from kbfast.topology.kinds import NodeKind
from kbfast.topology.names import cube_locals, node_name
from kbfast.topology.routing import Router

# dtypes of an op row / block: agent, code, target, nbytes, addr, async, arg, phase
_OP_DTYPES = (np.int64, np.int8, np.int32, np.int64, np.int64, bool, np.float64, np.int16)


class ProgramBuilder:
    """Collects agents and ops, then resolves every route in one batch.

    Ops come one at a time (``start``, ``send``, ...) or in bulk (:meth:`add_ops`, used by the
    collective generators); op ids are positions in that one sequence either way.
    """

    def __init__(self, tables: Tables, router: Router | None = None, name: str = "program"):
        self.t = tables
        self.router = router or Router(tables)
        self.name = name
        self._agent_node: list[int] = []
        self._agent_kind: list[int] = []
        self._agent_start: list[float] = []
        self._rows: list[tuple] = []      # single ops not yet in a block: (agent, code, target, nbytes, addr, async, arg, phase)
        self._blocks: list[tuple[np.ndarray, ...]] = []   # op columns in op order, same fields as a row
        self._n_ops = 0
        self._ch_src: list[int] = []
        self._ch_dst: list[int] = []
        self._ch_kind: list[int] = []     # index into BUFFER_KINDS
        self._ch_slots: list[int] = []
        self._ch_size: list[int] = []
        self._phase_names: list[str] = []
        self._agent_phase: dict[int, int] = {}
        self._gemm_agents: dict[int, tuple[int, ...]] = {}   # pe_dma node -> its GEMM pipeline's helper agents

    def phase(self, agent: int, name: str) -> None:
        """Tag the agent's following ops with a phase (for per-phase breakdowns)."""
        self._agent_phase[agent] = self.phase_index(name)

    def phase_index(self, name: str) -> int:
        """Index of phase ``name`` in the Program's ``phase_names`` (registered on first use)."""
        if name not in self._phase_names:
            self._phase_names.append(name)
        return self._phase_names.index(name)

    def set_phases(self, agents: np.ndarray, phase: np.ndarray) -> None:
        """Set the current phase (a :meth:`phase_index`) of many agents at once."""
        self._agent_phase.update(zip(np.asarray(agents).tolist(), np.asarray(phase).tolist()))

    # -- agents ---------------------------------------------------------------------
    def pe_agent(self, node: int, start_ns: float = 0.0) -> int:
        """An agent for the PE owning ``node`` (its ``pe_dma``)."""
        _check_start(start_ns)
        if self.t.node_kind[node] != NodeKind.PE_DMA:
            raise KbfastError(f"{node_name(self.t, node)} is not a pe_dma node; PE agents issue from pe_dma")
        self._agent_node.append(int(node))
        self._agent_kind.append(int(AgentKind.PE))
        self._agent_start.append(float(start_ns))
        return len(self._agent_node) - 1

    def pe_agents(self, nodes: np.ndarray, start_ns: float = 0.0) -> np.ndarray:
        """One PE agent per ``pe_dma`` node of ``nodes``, in order; returns their agent ids."""
        _check_start(start_ns)
        nodes = np.asarray(nodes, np.int64)
        bad = np.flatnonzero(self.t.node_kind[nodes] != NodeKind.PE_DMA)
        if len(bad):
            raise KbfastError(f"{node_name(self.t, int(nodes[bad[0]]))} is not a pe_dma node; PE agents issue from pe_dma")
        first = len(self._agent_node)
        self._agent_node += nodes.tolist()
        self._agent_kind += [int(AgentKind.PE)] * len(nodes)
        self._agent_start += [float(start_ns)] * len(nodes)
        return np.arange(first, len(self._agent_node), dtype=np.int64)

    def agent_nodes(self, agents) -> np.ndarray:
        """The node of each of ``agents`` (a PE agent's ``pe_dma``, the host's ``pcie_ep``)."""
        return np.array(self._agent_node, np.int64)[np.asarray(agents, np.int64)]

    def host_agent(self, sip: int, start_ns: float = 0.0) -> int:
        """The host, injecting at SIP ``sip``'s ``pcie_ep`` (spec_fabric §10: no host->switch hop)."""
        _check_start(start_ns)
        chip = self.t.spec.sip.io_chiplets[0].id
        node = self.t.layout.sip_node_base(sip) + self.t.io_names.index(f"{chip}.pcie_ep")
        self._agent_node.append(node)
        self._agent_kind.append(int(AgentKind.HOST))
        self._agent_start.append(float(start_ns))
        return len(self._agent_node) - 1

    # -- ops ------------------------------------------------------------------------
    def _add(self, agent: int, code: Op, target: int = -1, nbytes: int = 0, addr: int = 0,
             is_async: bool = False, arg: float = 0.0) -> int:
        self._rows.append((agent, int(code), int(target), int(nbytes), int(addr), bool(is_async), float(arg),
                           self._agent_phase.get(agent, -1)))
        self._n_ops += 1
        return self._n_ops - 1

    def add_ops(self, agent: np.ndarray, code: np.ndarray, target: np.ndarray, nbytes: np.ndarray,
                arg: np.ndarray, phase: np.ndarray, addr: np.ndarray | None = None,
                is_async: np.ndarray | None = None) -> None:
        """Append ops in bulk (by default synchronous, ``addr`` 0), in the given order; ``phase`` indexes
        :meth:`phase_index`.  The caller has checked them as the one-op methods would."""
        self._flush()
        n = len(code)
        self._blocks.append((np.broadcast_to(np.asarray(agent, np.int64), n), np.asarray(code, np.int8),
                             np.asarray(target, np.int32), np.asarray(nbytes, np.int64),
                             np.zeros(n, np.int64) if addr is None else np.asarray(addr, np.int64),
                             np.zeros(n, bool) if is_async is None else np.asarray(is_async, bool),
                             np.asarray(arg, np.float64), np.broadcast_to(np.asarray(phase, np.int16), n)))
        self._n_ops += n

    @property
    def n_ops(self) -> int:
        """Ops added so far: the id the next op gets."""
        return self._n_ops

    def _flush(self) -> None:
        if self._rows:
            cols = list(zip(*self._rows))
            self._blocks.append(tuple(np.array(c, d) for c, d in zip(cols, _OP_DTYPES)))
            self._rows = []

    def start(self, agent: int) -> int:
        """START: the agent's kernel body starts (at the launch barrier)."""
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
        """WAIT for op id ``op`` (an op of an agent on the same PE), or for every outstanding asynchronous op."""
        return self._add(agent, Op.WAIT, op)

    def compute(self, agent: int, ns: float) -> int:
        """COMPUTE: the agent is busy for ``ns`` ns."""
        if ns < 0:
            raise KbfastError(f"COMPUTE needs ns >= 0 (got {ns})")
        return self._add(agent, Op.COMPUTE, arg=ns)

    def channel(self, src: int, dst: int, kind: str | None = None, n_slots: int | None = None,
                slot_size: int | None = None) -> int:
        """An IPCQ channel from PE agent ``src`` to PE agent ``dst`` (defaults from ``ipcq`` config)."""
        return int(self.channels(np.array([src]), np.array([dst]), kind, n_slots, slot_size)[0])

    def channels(self, src: np.ndarray, dst: np.ndarray, kind: str | None = None, n_slots: int | None = None,
                 slot_size: int | None = None) -> np.ndarray:
        """IPCQ channels ``src[i] -> dst[i]`` between PE agents, in order; returns their ids."""
        cfg = self.t.spec.ipcq
        kind = kind or cfg.buffer_kind
        if kind not in BUFFER_KINDS:
            raise not_one_of("buffer kind", kind, BUFFER_KINDS)
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        ends = np.concatenate([src, dst])
        kinds = [self._agent_kind[a] for a in ends.tolist()] if len(ends) <= 8 else \
            np.array(self._agent_kind, np.int8)[ends]
        if np.any(np.asarray(kinds) != AgentKind.PE):
            raise KbfastError("IPCQ channels connect PE agents")
        if np.any(src == dst):
            raise KbfastError("an IPCQ channel needs two different PEs")
        first, n = len(self._ch_src), len(src)
        self._ch_src += src.tolist()
        self._ch_dst += dst.tolist()
        self._ch_kind += [BUFFER_KINDS.index(kind)] * n
        self._ch_slots += [n_slots or cfg.n_slots] * n
        self._ch_size += [slot_size or cfg.slot_size] * n
        return np.arange(first, first + n, dtype=np.int64)

    def tcm_slot_bytes(self, channel: np.ndarray, nbytes: np.ndarray) -> int:
        """The most IPCQ slot bytes one agent holds in TCM: per inbound channel of the ``tcm`` tier, ``n_slots``
        x its slot size grown to its largest message, as :meth:`build` sizes them (``channel``, ``nbytes``:
        the sends still to be added; the ones added are counted too)."""
        if not self._ch_dst:
            return 0
        self._flush()
        size = np.array(self._ch_size, np.int64)
        for blk in self._blocks:
            sends = blk[1] == Op.SEND
            np.maximum.at(size, blk[2][sends].astype(np.int64), blk[3][sends])
        np.maximum.at(size, np.asarray(channel, np.int64), np.asarray(nbytes, np.int64))
        held = np.where(np.array(self._ch_kind) == BUFFER_KINDS.index("tcm"), np.array(self._ch_slots) * size, 0)
        return int(np.bincount(np.array(self._ch_dst, np.int64), weights=held.astype(np.float64)).max())

    def send(self, agent: int, channel: int, nbytes: int) -> int:
        """SEND ``nbytes`` on channel ``channel``, whose sender ``agent`` is."""
        self._check_channel(agent, channel, self._ch_src)
        return self._add(agent, Op.SEND, channel, nbytes)

    def recv(self, agent: int, channel: int, nbytes: int, *, consume: bool = True, is_async: bool = False) -> int:
        """RECV the next message of ``channel`` (``RECV_ANY``: any inbound channel); ``consume=False`` is
        ``recv_no_consume`` (no slot read charged)."""
        if channel != RECV_ANY:
            self._check_channel(agent, channel, self._ch_dst)
        return self._add(agent, Op.RECV, channel, nbytes, is_async=is_async, arg=1.0 if consume else 0.0)

    def gemm(self, agent: int, plan: GemmPlan, a: tuple[int, int], b: tuple[int, int], c: tuple[int, int],
             preloaded: int = 0, ready: np.ndarray | None = None) -> int:
        """A GEMM command of PE agent ``agent`` (kbfast.ir.tiling): ``a``, ``b``, ``c`` are each operand's
        (HBM controller node, byte address).  Returns the op that ends when the GEMM's last DMA_WRITE is done.

        The tile pipeline runs on five helper agents of the PE (reader, fetcher, compute, storer, writer),
        created on the PE's first GEMM and shared by its later ones; they take the PE's resources first in,
        first out and chain through WAITs on each other's ops (spec_pe §5.5: a tile's stages follow one
        another; tile t+D's reads wait for tile t's FETCH).  The agent itself marks the start (a COMPUTE of
        0 ns the helpers wait for) and waits for the last write: commands never interleave (spec_pe §4.6).
        The first ``preloaded`` tiles were prefetched (:meth:`prefetch`; ``ready``: their last reads' ops, or
        None when they are in TCM already, kbfast.ir.gemm_pipeline.gemm_ops).
        """
        if self._agent_kind[agent] != AgentKind.PE:
            raise KbfastError("a GEMM runs on a PE agent")
        for name, (node, addr) in (("A", a), ("B", b), ("C", c)):
            if self.t.node_kind[node] != NodeKind.HBM_CTRL:
                raise KbfastError(f"GEMM operand {name}: {node_name(self.t, node)} is not an HBM controller")
            if addr < 0:
                raise KbfastError(f"GEMM operand {name}: address must be >= 0 (got {addr})")
        reader, fetcher, comp, storer, writer = self.gemm_helpers(agent)
        phase = self.phase_index("gemm")
        marker = self.compute(agent, 0.0)
        for op_agent, cols in zip((reader, fetcher, comp, storer, writer),
                                  gemm_ops(plan, marker, a, b, c, preloaded=preloaded, ready=ready)):
            if len(cols[0]):
                self.add_ops(op_agent, *cols[:4], phase, addr=cols[4], is_async=cols[5])
        last_write = self._n_ops - 1
        return self.wait(agent, last_write)

    def prefetch(self, agent: int, plan: GemmPlan, a: tuple[int, int], b: tuple[int, int], tiles: int,
                 settle: bool = False) -> np.ndarray:
        """Prefetch the first ``tiles`` tiles of a GEMM command of PE agent ``agent`` into TCM from now on: a
        0 ns COMPUTE marker on the agent, then the reads on the PE's reader helper, after the reads it has
        already (kbfast.ir.gemm_pipeline.prefetch_ops); ``settle`` adds the reader's WAIT for them all.
        Returns per tile its last read's op, then (``settle``) that WAIT's; the command follows with
        ``gemm(..., preloaded=tiles, ready=...)``."""
        reader = self.gemm_helpers(agent)[0]
        marker = self.compute(agent, 0.0)
        first = self._n_ops
        cols = prefetch_ops(plan, marker, a, b, tiles, settle)
        self.add_ops(reader, *cols[:4], self.phase_index("gemm"), addr=cols[4], is_async=cols[5])
        r = (not plan.a_pinned) + (not plan.b_pinned)
        return np.concatenate([first + r * np.arange(1, tiles + 1), [self._n_ops - 1] if settle else []]).astype(np.int64)

    def gemm_helpers(self, agent: int) -> tuple[int, ...]:
        """The five helper agents of PE agent ``agent``'s GEMM pipeline (see :meth:`gemm`), created on first use."""
        node = self._agent_node[agent]
        if node not in self._gemm_agents:
            self._gemm_agents[node] = tuple(self.pe_agent(node, self._agent_start[agent]) for _ in range(5))
        return self._gemm_agents[node]

    def math(self, agent: int, n_elem: int, op: str = "add") -> int:
        """PE_MATH ``op`` over ``n_elem`` elements on the PE's compute slot (kbfast.ir.tiling.math_ns)."""
        return self._add(agent, Op.MATH, nbytes=n_elem, arg=self.math_ns(n_elem, op))

    def math_ns(self, n_elem: int, op: str = "add") -> float:
        """How long PE_MATH ``op`` over ``n_elem`` elements takes (kbfast.ir.tiling.math_ns)."""
        return math_ns(self.t.spec.pe, n_elem, op)

    def _check_channel(self, agent: int, channel: int, side: list[int]) -> None:
        if not 0 <= channel < len(self._ch_src):
            raise KbfastError(f"channel {channel} does not exist")
        if side[channel] != agent:
            role = "sender" if side is self._ch_src else "receiver"
            raise KbfastError(f"agent {agent} is not the {role} of channel {channel}")

    # -- build ----------------------------------------------------------------------
    def build(self, launch_ns: float | None = None) -> Program:
        """Resolve routes (PE DMA: ``pe_dma`` kind; host: ``memory`` kind) and freeze the arrays.

        ``launch_ns`` sets every agent's start to the launch barrier.
        """
        self._flush()
        cols = [np.concatenate([blk[i] for blk in self._blocks]) if self._blocks else np.zeros(0, d)
                for i, d in enumerate(_OP_DTYPES)]
        agent_of, code, target, nbytes, addr, is_async, arg, op_phase = cols
        n = len(code)
        agent_node = np.array(self._agent_node, np.int32)
        agent_kind = np.array(self._agent_kind, np.int8)

        waits = (code == Op.WAIT) & (target != WAIT_ALL)
        if np.any((target[waits] < 0) | (target[waits] >= n)):
            raise KbfastError("a WAIT names an op that does not exist")
        if np.any(agent_node[agent_of[target[waits]]] != agent_node[agent_of[waits]]):
            raise KbfastError("a WAIT may only wait for an op of an agent on the same PE")

        if np.any((code == Op.SEND) & (nbytes <= 0)):
            raise KbfastError("an IPCQ SEND needs nbytes > 0")
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
            # distinct (issuer node, target) pairs in lexicographic order, through one int64 key per op
            # (np.unique over columns sorts structured records: 40 ms for the 32 k tile DMAs of 1024 SIPs)
            n_nodes = np.int64(self.t.n_nodes)
            keys, inverse = np.unique(agent_node[agent_of[sel]].astype(np.int64) * n_nodes + target[sel],
                                      return_inverse=True)
            pairs = np.divmod(keys, n_nodes)
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
        channels, n_routes = self._build_channels(agent_node, code, target, nbytes, ptr_parts, edge_parts, n_routes)
        route_edges = np.concatenate(edge_parts).astype(np.int32) if edge_parts else np.zeros(0, np.int32)
        route_ptr = np.append(np.concatenate(ptr_parts) if ptr_parts else np.zeros(0, np.int64),
                              len(route_edges)).astype(np.int64)
        counts = np.bincount(agent_of, minlength=len(agent_node)).astype(np.int64)
        start = np.array(self._agent_start, np.float64)
        if launch_ns is not None:
            start[:] = launch_ns
        return Program(tables=self.t, name=self.name, agent_node=agent_node, agent_kind=agent_kind,
                       agent_start_ns=start, op_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                       agent_ops=np.argsort(agent_of, kind="stable").astype(np.int64),   # program order per agent
                       op_code=code, op_target=target, op_nbytes=nbytes, op_addr=addr, op_async=is_async,
                       op_arg=arg, op_route=route, op_rroute=rroute, route_ptr=route_ptr,
                       route_edges=route_edges, channels=channels, launch_ns=float(launch_ns or 0.0),
                       op_phase=op_phase, phase_names=tuple(self._phase_names))

    def _build_channels(self, agent_node: np.ndarray, code: np.ndarray, target: np.ndarray, nbytes: np.ndarray,
                        ptr_parts: list, edge_parts: list, n_routes: int) -> tuple[Channels, int]:
        """Routes, slot tiers and credit latencies of the channels (spec_ccl §2.1–§2.7)."""
        t, cfg = self.t, self.t.spec.ipcq
        n = len(self._ch_src)
        src = np.array(self._ch_src, np.int64)
        dst = np.array(self._ch_dst, np.int64)
        largest = np.zeros(n, np.int64)
        sends = code == Op.SEND
        np.maximum.at(largest, target[sends], nbytes[sends])
        n_agents = len(self._agent_node)
        in_list = np.argsort(dst, kind="stable")   # inbound channels per agent, in install order
        in_ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n_agents))]).astype(np.int64)
        empty = np.zeros(0, np.int64)
        if n == 0:
            return Channels(src=empty, dst=empty, route=empty, n_slots=empty, slot_size=empty,
                            kind=np.zeros(0, np.int8), setup_ns=np.zeros(0), tier_bw=np.zeros(0), hop_bw=np.zeros(0),
                            credit_ns=np.zeros(0), in_ptr=np.zeros(n_agents + 1, np.int64), in_list=empty,
                            credit_blocking=cfg.credit_mode == "blocking",
                            poll_ns=cfg.poll_interval_ns if cfg.backpressure == "poll" else 0.0), n_routes
        data = self.router.routes(agent_node[src], agent_node[dst], "pe_dma")
        credit = self.router.routes(agent_node[dst], agent_node[src], "pe_dma")
        base = sum(len(e) for e in edge_parts)
        ptr_parts.append(base + data.ptr[:-1])
        edge_parts.append(data.edges)
        kinds = np.array(self._ch_kind, np.int8)
        tiers = [getattr(cfg.tiers, k) for k in BUFFER_KINDS]
        hop_bw = self.hop_bws(agent_node[dst], kinds)
        # Credit latency per channel, over the credit route's CSR (spec_ccl §2.4).
        starts = credit.ptr[:-1]
        bn = np.minimum.reduceat(t.edge_bw_gbs[credit.edges], starts)
        if cfg.credit_mode == "blocking":
            hops = np.add.reduceat(t.node_overhead_ns[t.edge_dst[credit.edges]] + t.edge_prop_ns[credit.edges], starts)
            credit_ns = t.node_overhead_ns[credit.src] + hops + cfg.credit_bytes / bn
        else:
            credit_ns = cfg.credit_bytes / bn
        channels = Channels(
            src=src, dst=dst, route=n_routes + np.arange(n, dtype=np.int64),
            n_slots=np.array(self._ch_slots, np.int64),
            slot_size=np.maximum(np.array(self._ch_size, np.int64), largest),
            kind=kinds, setup_ns=np.array([tr.setup_ns for tr in tiers])[kinds],
            tier_bw=np.array([tr.bw_gbs for tr in tiers])[kinds],
            hop_bw=hop_bw, credit_ns=credit_ns,
            in_ptr=in_ptr, in_list=in_list.astype(np.int64),
            credit_blocking=cfg.credit_mode == "blocking",
            poll_ns=cfg.poll_interval_ns if cfg.backpressure == "poll" else 0.0)
        return channels, n_routes + n

    def hop_bws(self, pe_dma: np.ndarray, kinds: np.ndarray) -> np.ndarray:
        """Bottleneck of the PE <-> slot bank path of each (pe_dma node, BUFFER_KINDS index): the cube SRAM,
        the PE's own HBM slice, inf for tcm (spec_ccl §2.7).  Every SIP is identical, so one route (all in
        one ``Router.routes`` call) per distinct (PE within its SIP, kind)."""
        t = self.t
        lay = t.layout
        cube, local = cube_locals(t, pe_dma)
        keys, inverse = np.unique((cube * lay.nodes_per_cube + local) * len(BUFFER_KINDS) + kinds,
                                  return_inverse=True)
        pe_local, kind = np.divmod(keys, len(BUFFER_KINDS))
        vals = np.full(len(keys), np.inf)
        banked = np.flatnonzero(kind != BUFFER_KINDS.index("tcm"))
        if len(banked):
            k_cube, k_local = np.divmod(pe_local[banked], lay.nodes_per_cube)
            names = t.cube_names
            bank = [names.index("sram" if BUFFER_KINDS[kd] == "sram" else "hbm_ctrl." + names[lo].split(".")[0])
                    for kd, lo in zip(kind[banked], k_local)]
            base = 1 + lay.io_nodes + k_cube * lay.nodes_per_cube          # SIP 0
            rs = self.router.routes(base + k_local, base + np.array(bank), "pe_dma")
            vals[banked] = np.minimum.reduceat(t.edge_bw_gbs[rs.edges], rs.ptr[:-1])
        return vals[inverse.ravel()]



def _check_start(start_ns: float) -> None:
    """Refuse a negative (or NaN) start time."""
    if not start_ns >= 0.0:
        raise KbfastError(f"an agent's start time must be >= 0 ns (got {start_ns}); all resources start idle at 0")
