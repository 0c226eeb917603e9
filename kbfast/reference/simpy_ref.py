"""A small SimPy reference of the exact-mode transfer semantics (design §5).

It mirrors :mod:`kbfast.exact.engine` in the style of the original simulator, so
that two independent implementations can be cross-checked on small Programs and
so that ``kbfast bench`` has a baseline:

* one process per directed edge takes flits from its ``simpy.Store`` FIFO,
  serializes them (``bytes/bw``) and delivers each after propagation, without
  blocking the wire meanwhile (spec_fabric §5.2);
* one serial worker per flit-aware node (router, UCIe endpoint/connection,
  io_noc, switch, HBM controller) consumes a shared inbox and pays the node
  overhead on a transaction's first flit (spec_fabric §5.3);
* non-flit-aware nodes (pcie_ep, io_cpu, m_cpu, sram, PE blocks) reassemble,
  pay their overhead and re-stream (store-and-forward, spec_fabric §5.3);
* zero-byte control messages are forked per message: propagation plus the
  overhead of every intermediate node, no bandwidth, no worker (spec_fabric §5.1);
* the HBM controller commits every flit to its PC (``pc_avail``, switch
  penalty) and finalizes asynchronously (spec_memory §3.4–§3.6); host reads
  run the command-only chunk loop (spec_memory §3.7) and stream the data back
  (§3.8); PE DMA channels are ``simpy.Resource(capacity=1)`` held through the
  round trip (spec_pe §4.3);
* IPCQ, the protocol of :mod:`kbfast.sim.agents` (spec_ccl §2, §4): a SEND parks
  while its ring is full (§2.2), then injects its data towards the receiver's
  ``pe_dma`` (a store-and-forward terminal); the slot write makes it visible at
  ``max(t_a + SLOT + HOP, previous visibility)`` (§2.3, §4.6).  One process per
  channel serves its RECVs in order (§2.4, §4.7): slot read (not with
  ``recv_no_consume``), then the credit, blocking or forked (§2.5).  Parked
  agents re-check on wake; poll mode wakes on the grid started when they
  parked (§2.6).  RECV on no channel is round robin from a cursor (§4.9).
* a PE's egress link serves its two virtual channels, DMA (``vc_compute``)
  and IPCQ (``vc_comm``), flit by flit in weighted round robin (spec_ccl §2.8).

Nodes and edges are created lazily, so the cost follows the Program, not the system.

Two differences from the engine are deliberate.  Simultaneous events run in
SimPy's scheduling order, not the engine's (time, insertion) order: when flits of
different transactions reach one node at exactly the same time (e.g. IPCQ trains
of several agents released at one instant), the two may serve them in a different
order (both read "FIFO in arrival order", spec_fabric §5.3), so cross-checks use
tie-free cases.  ``n_events`` counts SimPy events.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np
import simpy

from kbfast.exact.replay import ReplayTimes
from kbfast.ir import AgentKind, Op, Program
from kbfast.sim.diagnostics import ReplayDeadlock
from kbfast.sim.lowering import agent_pes
from kbfast.topology.kinds import NodeKind

PE_REQ, PE_RESP, H2D, D2H_CMD, D2H_DATA, IPCQ = range(6)   # transaction kinds
WRITE, READ = 0, 1                                   # PC directions (spec_memory §3.2)
DMA = (Op.DMA_WRITE, Op.DMA_READ)
TIMED = (Op.FETCH, Op.STORE, Op.GEMM, Op.MATH)     # hold a PE resource for op_arg ns
# op -> the PE resource it holds: DMA write, DMA read, TCM read, TCM write, compute slot
RESOURCE = {Op.DMA_WRITE: 0, Op.DMA_READ: 1, Op.FETCH: 2, Op.STORE: 3, Op.GEMM: 4, Op.MATH: 4}


SimpyResult = ReplayTimes   # per-op timestamps, with the meaning of ExactResult's


class _Txn:
    """One transfer along one route; ``nbytes = 0`` is a control message (spec_fabric §5.1)."""

    def __init__(self, kind: int, op: int, route: list[int], nbytes: int, addr: int, direction: int, flit: int):
        self.kind, self.op, self.route = kind, op, route
        self.nbytes, self.addr, self.dir = nbytes, addr, direction
        self.nflits = -(-nbytes // flit)
        self.reassembled = 0   # flits collected at the current store-and-forward node
        self.last = 0.0        # latest PC commit at the controller


class _Sim:
    def __init__(self, p: Program):
        t, spec = p.tables, p.tables.spec
        self.p, self.env = p, simpy.Environment(min(0.0, float(p.agent_start_ns.min(initial=0.0))))
        self.ovh, self.flit_aware = t.node_overhead_ns, t.node_flit_aware
        self.is_hbm = t.node_kind == NodeKind.HBM_CTRL
        self.e_src, self.e_dst, self.e_bw, self.e_prop = t.edge_src, t.edge_dst, t.edge_bw_gbs, t.edge_prop_ns
        self.flit = spec.fabric.flit_bytes
        self.burst, self.n_pcs = spec.hbm.burst_bytes, spec.hbm.pcs_per_pe
        self.pc_shift = int(self.burst).bit_length() - 1
        self.flit_commit_ns, self.burst_commit_ns = self.flit / spec.pc_bw_gbs, self.burst / spec.pc_bw_gbs
        self.penalty = spec.hbm.switch_penalty_ns
        self.routes = [p.route(r).tolist() for r in range(len(p.route_ptr) - 1)]
        self.wires: dict[int, simpy.Store] = {}
        self.is_pe_dma = t.node_kind == NodeKind.PE_DMA
        self.vc_w = (spec.pe.vc_weights.compute, spec.pe.vc_weights.comm)
        self.vc_queues: dict[int, tuple[deque, deque]] = {}
        self.vc_wake: dict[int, simpy.Event] = {}
        self.inboxes: dict[int, simpy.Store] = {}
        self.pc_avail: dict[tuple[int, int], float] = {}
        self.pc_dir: dict[tuple[int, int], int] = {}
        n = p.n_ops
        self.issue, self.begin, self.end = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.finish = np.full(p.n_agents, np.nan)
        self.done = [self.env.event() for _ in range(n)]   # triggered when op o completes
        # Per PE: DMA write, DMA read, TCM read, TCM write, compute slot (spec_pe §4.2–§4.4), shared by its agents.
        self.agent_pe = agent_pes(p)
        self.resources = [[simpy.Resource(self.env, 1) for _ in range(5)]
                          for _ in range(int(self.agent_pe.max(initial=-1)) + 1)]
        self.read_accept = spec.hbm.read_response == "accepted"
        self.read_release_early = spec.pe.dma_read_release == "accepted"
        self.accepted = [self.env.event() for _ in range(n)]   # a PE read's last flit taken by the controller
        self._init_ipcq()
        for a in range(p.n_agents):
            self.env.process(self._agent(a))

    def _init_ipcq(self) -> None:
        """Queue-pair state (spec_ccl §1.2) and one recv server per channel."""
        p, ch = self.p, self.p.channels
        self.ch, n = ch, len(ch)
        self.msgs = [[] for _ in range(n)]   # message k of a channel = its k-th SEND in program order
        for a in range(p.n_agents):
            for o in p.ops_of(a):
                if p.op_code[o] == Op.SEND:
                    self.msgs[p.op_target[o]].append(o)
        self.head, self.tail_cache = [0] * n, [0] * n   # sender: my_head, peer_tail_cache
        self.n_vis, self.tail = [0] * n, [0] * n        # receiver: peer_head_cache, my_tail
        self.waiting, self.last_vis = [0] * n, [-np.inf] * n   # RECVs queued and not yet served; last t_vis
        self.recv_q = [simpy.Store(self.env) for _ in range(n)]
        # Parking events: a sender on a full ring, a recv server for the next message, an agent in RECV on any.
        self.send_wait, self.vis_wait, self.any_wait = [None] * n, [None] * n, [None] * p.n_agents
        self.rr = [0] * p.n_agents                      # round-robin cursor of RECV on any channel
        for c in range(n):
            self.env.process(self._recv_server(c))

    # -- agents (design §4; spec_pe §4.3; spec_ccl §4.3) ---------------------------------
    def _agent(self, a: int):
        p, env = self.p, self.env
        yield env.timeout(p.agent_start_ns[a] - env.now)   # the clock starts at the earliest agent start
        outstanding = []                           # this agent's DMAs and RECVs issued so far
        for o in p.ops_of(a):
            self.issue[o] = env.now
            code = p.op_code[o]
            if code == Op.START:
                self.begin[o] = self.end[o] = env.now
            elif code in DMA or code in TIMED:
                outstanding.append(o)
                env.process(self._dma(a, o) if code in DMA else self._timed(a, o))
                if not p.op_async[o]:
                    yield self.done[o]
            elif code == Op.SEND:
                yield from self._send_op(o)
            elif code == Op.RECV:
                yield from self._recv_op(a, o)
                outstanding.append(o)
                if not p.op_async[o]:
                    yield self.done[o]
            elif code == Op.WAIT:
                tgt = p.op_target[o]   # one op, or every outstanding DMA and RECV of this agent
                pending = [self.done[k] for k in ([tgt] if tgt >= 0 else outstanding) if not self.done[k].triggered]
                if pending:
                    yield simpy.AllOf(env, pending)
                self.begin[o], self.end[o] = self.issue[o], env.now
            else:  # COMPUTE: the agent is busy for op_arg ns
                self.begin[o], self.end[o] = env.now, env.now + p.op_arg[o]
                yield env.timeout(p.op_arg[o])
            if code not in DMA and code not in TIMED and code != Op.RECV:
                self.done[o].succeed()
        self.finish[a] = env.now

    def _take(self, a: int, o: int):
        """Take op ``o``'s resource of the agent's PE (none for the host); returns (resource, request)."""
        pe = self.agent_pe[a]
        if pe < 0:
            return None, None
        res = self.resources[pe][RESOURCE[int(self.p.op_code[o])]]
        return res, res.request()

    def _timed(self, a: int, o: int):
        """FETCH, STORE, GEMM, MATH: hold the PE's resource for op_arg ns (spec_pe §4.2, §4.4)."""
        res, req = self._take(a, o)
        if req is not None and not req.triggered:
            yield req
        self.begin[o] = self.env.now
        yield self.env.timeout(self.p.op_arg[o])
        self.end[o] = self.env.now
        if req is not None:
            res.release(req)
        self.done[o].succeed()

    def _dma(self, a: int, o: int):
        """One DMA: take the channel (PE only), pay the source overhead, send; hold until done (a read:
        until the controller took its last flit, under ``pe.dma_read_release: accepted``)."""
        p, env = self.p, self.env
        write = p.op_code[o] == Op.DMA_WRITE
        host = p.agent_kind[a] == AgentKind.HOST
        channel, req = self._take(a, o)
        if req is not None and not req.triggered:   # a free channel is taken at once: transfers an agent
            yield req                                # issues at one instant reach the wire in program order
        self.begin[o] = env.now
        route = self.routes[p.op_route[o]]
        yield env.timeout(self.ovh[self.e_src[route[0]]])   # the source pays its overhead first
        kind = (H2D if write else D2H_CMD) if host else PE_REQ
        nbytes = 0 if kind == D2H_CMD else int(p.op_nbytes[o])   # PE reads carry their bytes (spec_memory §4.1)
        self._send(_Txn(kind, o, route, nbytes, int(p.op_addr[o]), WRITE if write else READ, self.flit))
        if req is not None and not write and self.read_release_early:
            yield self.accepted[o]
            channel.release(req)
            req = None
        yield self.done[o]
        self.end[o] = env.now
        if req is not None:
            channel.release(req)

    # -- IPCQ (spec_ccl §2, §4) ---------------------------------------------------------
    def _at(self, t: float) -> simpy.Timeout:
        """A timeout firing at the absolute time ``t`` (the delay is nudged until ``now + delay == t``)."""
        now, d = self.env.now, max(t - self.env.now, 0.0)
        while now + d < t:
            d = math.nextafter(d, math.inf)
        while d > 0 and now + d > t:
            d = math.nextafter(d, -math.inf)
        return self.env.timeout(d)

    def _wake_time(self, since: float, now: float) -> float:
        """Sleep wakes at the trigger ``now``; poll at the first tick of the grid started at ``since`` (§2.6)."""
        poll = self.ch.poll_ns
        return now if poll <= 0.0 or now <= since else since + np.ceil((now - since) / poll) * poll

    def _poll(self, since: float):
        t = self._wake_time(since, self.env.now)
        if t > self.env.now:
            yield self._at(t)

    @staticmethod
    def _wake(ev: simpy.Event | None) -> None:
        if ev is not None and not ev.triggered:
            ev.succeed()

    def _slot(self, c: int, n: int) -> float:
        """SLOT + HOP: tier setup + n / tier bw, plus the PE <-> bank hop (spec_ccl §2.7)."""
        ch = self.ch
        return ch.setup_ns[c] + n / ch.tier_bw[c] + n / ch.hop_bw[c]

    def _send_op(self, o: int):
        """SEND (§2.2): park while the ring is full, then inject the data and return at once."""
        c = self.p.op_target[o]
        while self.head[c] - self.tail_cache[c] >= self.ch.n_slots[c]:
            since = self.env.now
            self.send_wait[c] = self.env.event()   # woken by the credit worker (§2.5), then re-check
            yield self.send_wait[c]
            yield from self._poll(since)
        self.head[c] += 1
        self.begin[o] = self.end[o] = self.env.now
        self.env.process(self._inject(o, self.routes[self.ch.route[c]]))

    def _inject(self, o: int, route: list[int]):
        yield self.env.timeout(self.ovh[self.e_src[route[0]]])   # the sender's pe_dma pays its overhead
        self._send(_Txn(IPCQ, o, route, int(self.p.op_nbytes[o]), 0, WRITE, self.flit))

    def _ipcq_arrive(self, txn: _Txn) -> None:
        """Data reassembled at the receiver's pe_dma: slot write, then visible in order (§2.3, §4.6)."""
        c = self.p.op_target[txn.op]
        vis = max(self.env.now + self._slot(c, txn.nbytes), self.last_vis[c])
        self.last_vis[c] = vis
        self._at(vis).callbacks.append(lambda _: self._visible(c))

    def _visible(self, c: int) -> None:
        """Data and head become visible (§4.5): wake the channel's recv server, then any-channel waiters."""
        self.n_vis[c] += 1
        self._wake(self.vis_wait[c])
        self._wake(self.any_wait[self.ch.dst[c]])

    def _recv_op(self, a: int, o: int):
        """RECV: pick the channel (round robin for RECV on any channel, §4.9) and queue on its server."""
        c = self.p.op_target[o]
        while c < 0 and (c := self._round_robin(a)) < 0:
            since = self.env.now
            self.any_wait[a] = self.env.event()
            yield self.any_wait[a]
            yield from self._poll(since)
        self.waiting[c] += 1
        self.recv_q[c].put(o)

    def _round_robin(self, a: int) -> int:
        """The first inbound channel from the cursor with a visible message and no queued RECV."""
        ch = self.ch
        inbound = ch.in_list[ch.in_ptr[a]:ch.in_ptr[a + 1]]
        for j in range(len(inbound)):
            c = inbound[(self.rr[a] + j) % len(inbound)]
            if self.n_vis[c] > self.tail[c] and self.waiting[c] == 0:
                self.rr[a] = (self.rr[a] + j + 1) % len(inbound)
                return int(c)
        return -1

    def _recv_server(self, c: int):
        """Serve the channel's RECVs in order, one at a time: the next begins when the previous ends (§2.4)."""
        p, ch, env = self.p, self.ch, self.env
        for msg in self.msgs[c]:
            o = yield self.recv_q[c].get()
            while self.n_vis[c] <= self.tail[c]:   # park until the message is visible
                self.vis_wait[c] = env.event()
                yield self.vis_wait[c]
            self.waiting[c] -= 1
            self.tail[c] += 1
            t0 = self._wake_time(self.issue[o], env.now)   # poll: grid started at the recv's issue
            t1 = t0 + (self._slot(c, int(p.op_nbytes[msg])) if p.op_arg[o] > 0.0 else 0.0)   # slot read
            credit_at = t1 + ch.credit_ns[c]
            end = credit_at if ch.credit_blocking else t1   # blocking: the recv returns with the credit (§2.4)
            self.begin[o] = t0
            done = self._at(end)
            self._at(credit_at).callbacks.append(lambda _, v=self.tail[c]: self._credit(c, v))
            yield done
            self.end[o] = end
            self.done[o].succeed()

    def _credit(self, c: int, value: int) -> None:
        """A credit lands at the sender (§2.5): the tail cache advances, a parked sender wakes."""
        self.tail_cache[c] = max(self.tail_cache[c], value)
        self._wake(self.send_wait[c])

    # -- transport (spec_fabric §5.1–§5.3) -----------------------------------------------
    def _send(self, txn: _Txn) -> None:
        """Inject ``txn`` at its route's first edge (the source's overhead is already paid)."""
        if txn.nflits == 0:
            self.env.process(self._control(txn))
        else:
            self._stream(txn, 0)

    def _control(self, txn: _Txn):
        """Zero-byte message: propagation of every edge plus every intermediate node's overhead."""
        lat, route = 0.0, txn.route
        for k, e in enumerate(route):
            lat += self.e_prop[e]
            if k < len(route) - 1:
                lat += self.ovh[self.e_dst[e]]
        yield self.env.timeout(lat)
        yield self.env.timeout(self.ovh[self.e_dst[route[-1]]])
        self._complete(txn)

    def _stream(self, txn: _Txn, hop: int) -> None:
        """Put every flit of ``txn`` on the wire of route hop ``hop`` (in one go)."""
        e = txn.route[hop]
        if self.is_pe_dma[self.e_src[e]]:
            queues = self._vc_link(e)
            queues[1 if txn.kind == IPCQ else 0].extend((txn, i, hop) for i in range(txn.nflits))
            if not self.vc_wake[e].triggered:
                self.vc_wake[e].succeed()
            return
        store = self._wire(e)
        for i in range(txn.nflits):
            store.put((txn, i, hop))

    def _settle(self):
        """Let every other event of this instant run first, as the engine's arbiter does (marked
        timeouts of other arbiters do not count)."""
        now = self.env.now
        while any(t == now and not getattr(ev, "vc_settle", False) for t, _, _, ev in self.env._queue):
            tick = self.env.timeout(0)
            tick.vc_settle = True
            yield tick

    def _vc_link(self, e: int) -> tuple[deque, deque]:
        if e not in self.vc_queues:
            self.vc_queues[e] = (deque(), deque())
            self.vc_wake[e] = self.env.event()
            self.env.process(self._vc_link_proc(e))
        return self.vc_queues[e]

    def _vc_link_proc(self, e: int):
        """PE egress: up to ``w`` flits of the channel whose turn it is, then the other's; skip an empty one."""
        bw, prop = self.e_bw[e], self.e_prop[e]
        queues = self.vc_queues[e]
        turn, left = 0, self.vc_w[0]
        while True:
            if not queues[0] and not queues[1]:
                self.vc_wake[e] = self.env.event()
                yield self.vc_wake[e]
                continue
            yield from self._settle()
            if not queues[turn] or left <= 0:
                if queues[1 - turn]:
                    turn = 1 - turn
                left = self.vc_w[turn]
            txn, i, hop = queues[turn].popleft()
            left -= 1
            yield self.env.timeout(self._flit_bytes(txn, i) / bw)
            self.env.timeout(prop).callbacks.append(lambda _, f=(txn, i, hop): self._arrive(*f))

    def _flit_bytes(self, txn: _Txn, i: int) -> int:
        return self.flit if i < txn.nflits - 1 else txn.nbytes - self.flit * (txn.nflits - 1)

    def _wire(self, e: int) -> simpy.Store:
        if e not in self.wires:
            self.wires[e] = simpy.Store(self.env)
            self.env.process(self._wire_proc(e, self.wires[e]))
        return self.wires[e]

    def _wire_proc(self, e: int, store: simpy.Store):
        """FIFO wire: serialize each flit, then deliver it ``prop`` later (pipelined, spec_fabric §5.2)."""
        bw, prop = self.e_bw[e], self.e_prop[e]
        while True:
            txn, i, hop = yield store.get()
            yield self.env.timeout(self._flit_bytes(txn, i) / bw)
            # Deliver after propagation without holding the wire (a timeout with a callback).
            self.env.timeout(prop).callbacks.append(lambda _, f=(txn, i, hop): self._arrive(*f))

    def _arrive(self, txn: _Txn, i: int, hop: int) -> None:
        v = self.e_dst[txn.route[hop]]
        if self.flit_aware[v]:
            self._inbox(v).put((txn, i, hop))
            return
        txn.reassembled += 1                               # store-and-forward (spec_fabric §5.3)
        if txn.reassembled == txn.nflits:
            txn.reassembled = 0
            self.env.process(self._forward_txn(txn, hop, v))

    def _forward_txn(self, txn: _Txn, hop: int, v: int):
        yield self.env.timeout(self.ovh[v])
        if hop == len(txn.route) - 1:
            self._complete(txn)
        else:
            self._stream(txn, hop + 1)

    def _inbox(self, v: int) -> simpy.Store:
        if v not in self.inboxes:
            self.inboxes[v] = simpy.Store(self.env)
            self.env.process(self._worker(v, self.inboxes[v]))
        return self.inboxes[v]

    def _worker(self, v: int, inbox: simpy.Store):
        """Serial worker of a flit-aware node: first-flit overhead, then pass through (spec_fabric §5.3)."""
        while True:
            txn, i, hop = yield inbox.get()
            if i == 0 and self.ovh[v] > 0:
                yield self.env.timeout(self.ovh[v])
            if hop < len(txn.route) - 1:
                self._wire(txn.route[hop + 1]).put((txn, i, hop + 1))
            elif self.is_hbm[v]:
                self._commit_flit(v, txn, i)
            elif i == txn.nflits - 1:
                self._complete(txn)

    # -- HBM controller (spec_memory §3.4–§3.8) ------------------------------------------
    def _commit(self, v: int, addr: int, direction: int, busy_ns: float) -> float:
        """Schedule one PC access at ``now`` (spec_memory §3.4); return its finish."""
        g = (v, (addr >> self.pc_shift) & (self.n_pcs - 1))
        sw = self.penalty if self.pc_dir.get(g, direction) != direction else 0.0
        fin = max(self.env.now, self.pc_avail.get(g, -np.inf)) + sw + busy_ns
        self.pc_avail[g], self.pc_dir[g] = fin, direction
        return fin

    def _commit_flit(self, v: int, txn: _Txn, i: int) -> None:
        """Per-flit commit (§3.5); the last flit forks the asynchronous finalize (§3.6)."""
        fin = self._commit(v, txn.addr + i * self.flit, txn.dir, self.flit_commit_ns)
        txn.last = fin if i == 0 else max(txn.last, fin)
        if i == txn.nflits - 1:
            if txn.kind == PE_REQ and txn.dir == READ:
                self.accepted[txn.op].succeed()
                if self.read_accept:      # the response leaves now; the bursts still occupy the PCs
                    self._complete(txn)
                    return
            self.env.process(self._finalize(txn, txn.last))

    def _finalize(self, txn: _Txn, last_finish: float):
        wait = last_finish - self.env.now
        if wait > 0:
            yield self.env.timeout(wait)
        self._complete(txn)

    def _chunk_loop(self, txn: _Txn):
        """Host read command (§3.7): chunk i commits at t0 + (i+1)*drain/n, then the data streams back.

        ``drain = nbytes / min bw`` of the command's (forward) route, as in the engine.
        """
        p, env = self.p, self.env
        o, v = txn.op, self.e_dst[txn.route[-1]]
        nbytes, t0 = int(p.op_nbytes[o]), env.now
        n = -(-nbytes // self.burst)
        delta = nbytes / min(self.e_bw[e] for e in txn.route) / n if n else 0.0   # drain / n
        last = t0
        for i in range(n):
            wait = t0 + (i + 1) * delta - env.now
            if wait > 0:
                yield env.timeout(wait)
            last = max(last, self._commit(v, txn.addr + i * self.burst, READ, self.burst_commit_ns))
        if last > env.now:
            yield env.timeout(last - env.now)
        # The data leaves the controller at once: its overhead was paid by the command (§3.8).
        self._send(_Txn(D2H_DATA, o, self.routes[p.op_rroute[o]], nbytes, txn.addr, READ, self.flit))

    def _complete(self, txn: _Txn) -> None:
        """``txn`` has fully arrived (overhead paid) at the last node of its route (§3.8)."""
        if txn.kind == PE_REQ:
            if txn.dir == READ and not self.accepted[txn.op].triggered:   # a zero-byte read
                self.accepted[txn.op].succeed()
            self._send(_Txn(PE_RESP, txn.op, self.routes[self.p.op_rroute[txn.op]], 0, 0, txn.dir, self.flit))
        elif txn.kind == D2H_CMD:
            self.env.process(self._chunk_loop(txn))
        elif txn.kind == IPCQ:
            self._ipcq_arrive(txn)
        else:   # PE_RESP back at pe_dma, H2D at the controller, D2H_DATA at pcie_ep
            self.done[txn.op].succeed()

    def run(self) -> int:
        """Step the environment until no event is left; returns the number of events."""
        n_events = 0
        while self.env.peek() < float("inf"):
            self.env.step()
            n_events += 1
        return n_events


def run_simpy(p: Program) -> SimpyResult:
    """Replay ``p`` with the SimPy reference; raise :class:`ReplayDeadlock` if an agent never finishes."""
    sim = _Sim(p)
    t0 = time.perf_counter()
    n_events = sim.run()
    wall = time.perf_counter() - t0
    stuck = np.flatnonzero(np.isnan(sim.finish))
    if len(stuck):
        raise ReplayDeadlock(f"deadlock in {p.name!r}: agents {[p.agent_name(int(a)) for a in stuck]} "
                             "never finished")
    return SimpyResult(program=p, n_events=n_events, wall_s=wall, agent_finish_ns=sim.finish,
                       op_issue_ns=sim.issue, op_begin_ns=sim.begin, op_end_ns=sim.end)
