"""A fluid first-in first-out queueing network of the fabric, in plain Python: the slow, obvious reference of
kbfast.fast.network (docs/fast_path.md §6, "A fluid queueing network"; tests/test_network.py compares them).

The fluid point estimate (``kbfast.fast.schedule``, POINT mode) gives each flow one rate, the max-min fair share
of its shared resources.  Exact mode is first in, first out at every server (spec_fabric §5.6), and this
model keeps that: every server has a queue, and every flow a rate *per server*.  Bytes are a fluid.

The servers, as exact mode has them:

* **a directed link** (finite bandwidth ``bw``): one FIFO wire that serves ``bw`` B/ns;
* **a PE's egress, per virtual channel**: a source puts a whole train on its channel's queue at once (an
  impulse of ``N`` bytes), one queue per channel, and the two channels meet on the link by their arrival
  rates, which is the 1:1 round robin while both are backlogged (spec_ccl §2.8);
* **a router** (a flit-aware node with an overhead that two or more flows cross): a shared FIFO inbox with
  one serial worker.  A transaction's first flit takes ``overhead_ns`` of the worker, first come first served;
  every byte that arrives while the worker decodes waits until the decode that was under way or queued at
  its arrival has ended, and then leaves at once (forwarding costs the worker nothing);
* **a store-and-forward node**: sends a train on once all of it has arrived;
* **an HBM controller**: the flits of a write commit on their pseudo-channels (address-interleaved,
  ``commit_ns`` per flit each), so each write fans out into one stream per pseudo-channel it touches
  (spec_memory §3).

A queue is a list of batches of constant composition: arrivals at constant rates fill the open batch at the
tail; the head batch drains at ``1 / sum(fraction * ns_per_byte)`` B/ns, and each flow in it leaves at its
fraction of that.  A change of a flow's rate out of one server reaches its next server after the zero-load
head delay between them (the first flit's serialization, the propagation and the node overheads on the way).
All events of one instant are applied before any server recomputes its rates, so a server never emits the
intermediate states of one instant.

A flow ends at ``max(begin + L_iso, T_last + L_iso - T_iso)``: ``T_last`` is when its last byte leaves its
last server, and ``T_iso`` is that time for the flow alone, from the same model, so a flow that meets no
other keeps its isolated latency.  The agents' rules (channels, IPCQ, WAIT) are the kernel's own
(``kbfast.sim.agents``), driven from Python here.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from kbfast.fast.evaluate import _no_iso
from kbfast.fast.plan import plan_fast
from kbfast.fast.schedule import EV_FLOW_DONE, EV_JOIN, POINT, _begin_flow, scratch
from kbfast.ir import Program
from kbfast.sim.agents import EV_AGENT, EV_CHAN_FREE, EV_OP_DONE, OP_SEND, handle, ipcq_arrive, new_state, push
from kbfast.sim.heap import heap_pop, unpack

EMPTY = 1e-9       # bytes: a batch this small is empty


class Queue:
    """A FIFO server: a link (``ns_per_byte[f] = 1 / bw``), a virtual channel's egress, or a pseudo-channel
    (``commit_ns / flit``)."""

    def __init__(self, name):
        self.name = name
        self.ns_per_byte = {}   # flow -> ns of this server per byte
        self.inrate = {}        # flow -> arrival rate, B/ns
        self.batches = []       # [bytes, {flow: fraction}], head first
        self.open = False       # the last batch takes the arrivals
        self.t = 0.0            # state as of
        self.dep = {}           # flow -> departure rate, B/ns
        self.cum = {}           # flow -> bytes departed
        self.version = 0        # of the scheduled head depletion
        self.changed = False    # arrival rates changed this instant

    def drain_rate(self, comp) -> float:
        return 1.0 / sum(fr * self.ns_per_byte[f] for f, fr in comp.items())


class Router:
    """A router's shared FIFO inbox and serial worker (spec_fabric §5.6)."""

    def __init__(self, name, overhead_ns):
        self.name = name
        self.overhead_ns = overhead_ns
        self.ns_per_byte = {}   # flow -> 0 (the worker forwards for free)
        self.busy = -math.inf   # the worker decodes until then
        self.held = {}          # flow -> its bytes wait for the worker
        self.acc = {}           # flow -> bytes held
        self.inrate = {}
        self.cum = {}
        self.t = 0.0


def _composition(rates):
    tot = sum(rates.values())
    return {f: r / tot for f, r in rates.items()}


class Network:
    """The event loop of the servers: ``inject`` a flow's train; ``step`` runs the next instant and appends the
    flows whose last byte left their last server to ``done`` as ``(flow, time)``."""

    def __init__(self, flows):
        self.flows = flows
        self.events = []
        self.seq = 0
        self.done = []
        self.n_events = 0

    def _push(self, t, kind, *args):
        heapq.heappush(self.events, (t, self.seq, kind, args))
        self.seq += 1

    def next_time(self) -> float:
        return self.events[0][0] if self.events else math.inf

    def inject(self, o, now):
        fl = self.flows[o]
        self._push(now + fl["d0"], "burst", 0, o, float(fl["n"]))

    def step(self):
        t = self.events[0][0]
        dirty = {}
        while self.events and self.events[0][0] == t:
            _, _, kind, args = heapq.heappop(self.events)
            self.n_events += 1
            if kind == "decoded":
                self._router_free(args[0], args[1], t)
                continue
            if kind == "decoded_part":
                w = args[0]
                self._router_advance(w, t)
                for f, a in args[1].items():
                    w.cum[f] += a
                    self._out(w, f, "burst", a, t)
                continue
            if kind == "empty":
                s, version = args
                if version != s.version:
                    continue
                self._advance(s, t)
            else:
                j, o, value = args
                s = self.flows[o]["servers"][j]
                if isinstance(s, Router):
                    self._router_in(s, kind, o, value, t)
                    continue
                self._advance(s, t)
                if kind == "rate":
                    if value > 0:
                        s.inrate[o] = value
                    else:
                        s.inrate.pop(o, None)
                else:                                # a burst: behind what has arrived so far
                    if s.changed:
                        self._new_tail(s)
                        s.changed = False
                    if s.open:
                        s.open = False
                        if s.batches and s.batches[-1][0] <= EMPTY:
                            s.batches.pop()
                    s.batches.append([value, {o: 1.0}])
                s.changed = True
            dirty[id(s)] = s
        for s in dirty.values():
            if s.changed:
                self._new_tail(s)
                s.changed = False
            self._recompute(s, t)

    # -- FIFO servers --------------------------------------------------------------------------------------------
    def _new_tail(self, s):
        """The arrival rates changed: a new open batch of their composition (none while the queue is empty:
        :meth:`_recompute` decides)."""
        if not s.batches:
            return
        if s.open:
            last = s.batches[-1]
            if last[0] <= EMPTY:
                if s.inrate:
                    last[1] = _composition(s.inrate)
                else:
                    s.batches.pop()
                    s.open = False
                return
            s.open = False
        if s.inrate:
            s.batches.append([0.0, _composition(s.inrate)])
            s.open = True

    def _advance(self, s, now):
        dt = now - s.t
        if dt > 0:
            if s.batches:
                head = s.batches[0]
                head[0] -= s.drain_rate(head[1]) * dt
                if s.open:
                    s.batches[-1][0] += sum(s.inrate.values()) * dt
                head[0] = max(head[0], 0.0)
            for f, r in s.dep.items():
                s.cum[f] = s.cum.get(f, 0.0) + r * dt
        s.t = now

    def _recompute(self, s, now):
        """Departure rates from the head batch (or the arrivals, through an empty queue that keeps up), the
        next head depletion, and the rate changes sent on."""
        while s.batches and s.batches[0][0] <= EMPTY * 1e3 and not (len(s.batches) == 1 and s.open):
            s.batches.pop(0)
        if len(s.batches) == 1 and s.open:
            head = s.batches[0]
            if sum(s.inrate.values()) <= s.drain_rate(head[1]) and head[0] <= EMPTY * 1e3:
                s.batches.clear()
                s.open = False
        new, t_empty = {}, math.inf
        if not s.batches:
            if sum(r * s.ns_per_byte[f] for f, r in s.inrate.items()) <= 1.0 + 1e-12:
                new = dict(s.inrate)
            else:
                s.batches.append([0.0, _composition(s.inrate)])
                s.open = True
        if s.batches:
            head = s.batches[0]
            mu = s.drain_rate(head[1])
            new = {f: mu * fr for f, fr in head[1].items()}
            if len(s.batches) == 1 and s.open:
                net = sum(s.inrate.values()) - mu
                if net < 0:
                    t_empty = now + head[0] / -net
            else:
                t_empty = now + head[0] / mu
        old, s.dep = s.dep, new
        s.version += 1
        if t_empty < math.inf:
            self._push(t_empty, "empty", s, s.version)
        for f, r in old.items():                     # departures that stop, then those that start or change
            if f not in new and r != 0.0:
                self._out(s, f, "rate", 0.0, now)
        for f, r in new.items():
            if old.get(f, 0.0) != r:
                self._out(s, f, "rate", r, now)

    # -- routers -------------------------------------------------------------------------------------------------
    def _router_advance(self, w, now):
        dt = now - w.t
        if dt > 0:
            for f, r in w.inrate.items():
                if w.held[f]:
                    w.acc[f] += r * dt
                else:
                    w.cum[f] += r * dt
        w.t = now

    def _router_in(self, w, kind, o, value, now):
        self._router_advance(w, now)
        if o not in w.held:                          # the transaction's first flit
            w.held[o], w.acc[o], w.cum[o] = False, 0.0, 0.0
            if now >= w.busy:                        # idle: whatever passes through waits from now on
                for f in w.held:
                    if f != o and not w.held[f]:
                        w.held[f], w.acc[f] = True, 0.0
                        if w.inrate.get(f, 0.0) > 0:
                            self._out(w, f, "rate", 0.0, now)
            else:                                    # what waits so far leaves when the current decode ends
                part = {f: a for f, a in w.acc.items() if w.held[f] and a > 0}
                for f in part:
                    w.acc[f] = 0.0
                if part:
                    self._push(w.busy, "decoded_part", w, part)
            w.busy = max(now, w.busy) + w.overhead_ns
            self._push(w.busy, "decoded", w, w.busy)
        if now < w.busy and not w.held[o]:
            w.held[o], w.acc[o] = True, 0.0
        if kind == "burst":
            if w.held[o]:
                w.acc[o] += value
            else:
                w.cum[o] += value
                self._out(w, o, "burst", value, now)
            return
        old = w.inrate.get(o, 0.0)
        if value > 0:
            w.inrate[o] = value
        else:
            w.inrate.pop(o, None)
        if not w.held[o] and value != old:
            self._out(w, o, "rate", value, now)

    def _router_free(self, w, busy, now):
        if busy != w.busy:
            return                                   # another decode was queued meanwhile
        self._router_advance(w, now)
        for o in list(w.held):
            if not w.held[o]:
                continue
            w.held[o] = False
            w.cum[o] += w.acc[o]
            if w.acc[o] > 0:
                self._out(w, o, "burst", w.acc[o], now)
            w.acc[o] = 0.0
            if w.inrate.get(o, 0.0) > 0:
                self._out(w, o, "rate", w.inrate[o], now)

    # -- between servers -----------------------------------------------------------------------------------------
    def _out(self, s, o, kind, value, now):
        """Flow ``o`` leaves server ``s`` at a new rate, or in a burst: on to its next server(s)."""
        fl = self.flows[o]
        j = fl["index"][id(s)]
        need = fl["n"] if j < fl["n_chain"] else fl["pc_bytes"][j - fl["n_chain"]]
        finished = (value == 0.0 if kind == "rate" else not s.inrate.get(o)) and \
            s.cum.get(o, 0.0) >= need * (1 - 1e-7)
        if j >= fl["n_chain"]:                       # a pseudo-channel
            if finished:
                fl["pc_left"] -= 1
                if fl["pc_left"] == 0:
                    self.done.append((o, now))
            return
        if j + 1 == fl["n_chain"] and fl["pc_bytes"]:
            if finished:                             # the controller has the last flit
                fl["t_taken"] = now + fl["taken_after"]
            for i, b in enumerate(fl["pc_bytes"]):
                self._push(now + fl["delay"][j], kind, j + 1 + i, o, value * b / fl["n"])
            return
        if j + 1 == len(fl["servers"]):
            if finished:
                self.done.append((o, now))
            return
        if fl["store_forward"][j]:
            if finished:
                self._push(now + fl["delay"][j], "burst", j + 1, o, float(fl["n"]))
            return
        self._push(now + fl["delay"][j], kind, j + 1, o, value)


def flows_of(p: Program, plan) -> dict:
    """Per flow (an op whose payload route has a shared resource): its servers in route order, the head delays
    between them, whether a store-and-forward node lies between them, its pseudo-channel fan-out, and
    ``t_iso``, when its last byte would leave its last server were it alone (from its begin)."""
    fabric, hbm = plan.lowered.fabric, plan.lowered.hbm
    n_ovh, n_flit, e_src, e_dst, e_bw, e_prop = (fabric.n_ovh, fabric.n_flit, fabric.e_src, fabric.e_dst,
                                                 fabric.e_bw, fabric.e_prop)
    r_ptr, r_edges, F = fabric.r_ptr, fabric.r_edges, hbm.flit_bytes
    ops = [o for o in range(p.n_ops) if plan.share[o] and p.op_nbytes[o] > 0 and plan.data_route[o] >= 0]
    route = {o: [int(e) for e in r_edges[r_ptr[plan.data_route[o]]:r_ptr[plan.data_route[o] + 1]]] for o in ops}
    transit = {}
    for o in ops:
        for e in route[o][:-1]:
            transit[e_dst[e]] = transit.get(e_dst[e], 0) + 1
    routers = {int(v) for v, m in transit.items() if m >= 2 and n_flit[v] and n_ovh[v] > 0}
    # A link can queue only if its flows' largest arrival rates (the narrowest link before it; unbounded after
    # a source, a router or a store-and-forward node, which send bursts) can exceed its bandwidth.
    load = {}
    for o in ops:
        most = math.inf
        for k, e in enumerate(route[o]):
            if math.isfinite(e_bw[e]):
                load[e] = load.get(e, 0.0) + most / e_bw[e]
                most = min(most, e_bw[e])
            v = int(e_dst[e])
            if not n_flit[v] or v in routers:
                most = math.inf
    queued = {e for e, x in load.items() if x > 1.0 + 1e-12}
    servers, flows = {}, {}

    def server(key, make):
        if key not in servers:
            servers[key] = make()
        return servers[key]

    for o in ops:
        es, n = route[o], int(p.op_nbytes[o])
        s0 = F if n > F else n
        sv, delay, saf = [], [], []
        # d: the head's delay since the last server (its first flit's serialization on every link, the nodes'
        # overheads); dt: the last flit's (no overheads, and not the serialization on the server's own link,
        # which the fluid has already spent); late: how much later than the last flit the fluid's last byte
        # reaches the last server, summed over the hops
        d, d0, dt, late, pending_saf = n_ovh[e_src[es[0]]], None, 0.0, 0.0, False

        def add(s, ns_per_byte):
            nonlocal d, d0, dt, late, pending_saf
            if d0 is None:
                d0 = d
            else:
                delay.append(d)
                saf.append(pending_saf)
                late += d - dt
            s.ns_per_byte[o] = ns_per_byte
            sv.append(s)
            d, dt, pending_saf = 0.0, 0.0, False

        for k, e in enumerate(es):
            if math.isfinite(e_bw[e]):
                server_link = k == 0 or e in queued
                if k == 0:
                    vc = int(p.op_code[o] == OP_SEND)
                    add(server(("vc", e, vc), lambda: Queue(("vc", e, vc))), 1.0 / e_bw[e])
                if server_link:
                    add(server(("link", e), lambda: Queue(("link", e))), 1.0 / e_bw[e])
                d += s0 / e_bw[e]
                dt += 0.0 if server_link else s0 / e_bw[e]
            d += e_prop[e]
            dt += e_prop[e]
            v = int(e_dst[e])
            if k + 1 < len(es) and v in routers:
                add(server(("router", v), lambda: Router(("router", v), n_ovh[v])), 0.0)
                continue
            d += n_ovh[v]
            if k + 1 < len(es) and not n_flit[v]:
                pending_saf = True
        n_chain, pc_bytes = len(sv), []
        ctrl = fabric.n_hbm[e_dst[es[-1]]]
        if ctrl >= 0:                                # a write: one stream per pseudo-channel it touches
            addr, per = int(plan.lowered.routes.op_addr[o]), {}
            for i in range((n + F - 1) // F):
                q = ((addr + i * F) >> hbm.pc_shift) % hbm.n_pcs
                per[q] = per.get(q, 0) + min(F, n - i * F)
            delay.append(d)
            saf.append(pending_saf)
            for q, b in sorted(per.items()):
                s = server(("pc", int(ctrl), q), lambda: Queue(("pc", int(ctrl), q)))
                s.ns_per_byte[o] = hbm.commit_ns / F
                sv.append(s)
                pc_bytes.append(b)
        # alone: the flow's bytes reach each server over [a0, a1]
        a0 = a1 = d0
        for j, s in enumerate(sv[:n_chain]):
            if isinstance(s, Router):
                a0, a1 = a0 + s.overhead_ns, max(a1, a0 + s.overhead_ns)
            else:
                a1 = max(a1, a0 + n * s.ns_per_byte[o])
            if j + 1 < n_chain:
                a0, a1 = (a1 + delay[j], a1 + delay[j]) if saf[j] else (a0 + delay[j], a1 + delay[j])
        if pc_bytes:
            a1 = max(max(a1 + d, a0 + d + b * sv[n_chain + i].ns_per_byte[o]) for i, b in enumerate(pc_bytes))
        flows[o] = dict(servers=sv, delay=delay, store_forward=saf, d0=d0, n=n, n_chain=n_chain, pc_bytes=pc_bytes,
                        pc_left=len(pc_bytes), index={id(s): j for j, s in enumerate(sv)}, t_iso=a1,
                        taken_after=dt - late)
    return flows


def queueing_schedule(p: Program):
    """The agents' state (``op_issue``, ``op_begin``, ``op_end``, ``a_finish``) of ``p`` under the queueing
    network, and the network (its ``n_events``).  Flows without a shared resource keep their isolated latency,
    as in the fluid schedule."""
    plan = plan_fast(p)
    fabric, hbm, P, routes, sharing = plan.kernel_inputs
    iso = _no_iso(p, plan)
    W = scratch(P, fabric, hbm, sharing)
    S = new_state(P)
    flows = flows_of(p, plan)
    net = Network(flows)
    heap = W.heap
    size, seq = np.int64(0), np.int64(0)
    for a in range(len(P.a_start)):
        size, seq = push(heap, size, seq, P.a_start[a], EV_AGENT, a, 0, 0)
    while size > 0 or net.events:
        if net.next_time() <= (heap[0][0] if size > 0 else math.inf):
            net.step()
            for o, T in net.done:
                lat = W.lat_free[o] if P.op_code[o] != OP_SEND else W.lat[o]
                end = max(W.start[o] + W.lat[o], T + lat - flows[o]["t_iso"])
                if W.rel[o] >= 0.0:     # a read frees its channel once the controller has its last flit
                    taken = flows[o].get("t_taken", T)
                    size, seq = push(heap, size, seq, max(taken, end - W.rel[o]), EV_CHAN_FREE, o, 0, 0)
                size, seq = push(heap, size, seq, end, EV_FLOW_DONE, o, W.ver[o], 0)
            net.done.clear()
            continue
        now, payload = heap_pop(heap, size)
        size -= 1
        kind, x, y, _ = unpack(payload)
        if kind == EV_JOIN:
            net.inject(x, now)
            continue
        if kind == EV_FLOW_DONE:
            if y != W.ver[x]:
                continue
            if P.op_code[x] == OP_SEND:
                size, seq = ipcq_arrive(x, now, P, S, heap, size, seq)
                continue
            kind = EV_OP_DONE
        size, seq, n_pend = handle(kind, x, y, now, P, S, heap, size, seq, W.pend, np.int64(0))
        for k in range(n_pend):
            # Each train joins its channel's queue at its begin (head 0): the network keeps the FIFO order.
            W.drained[:] = True
            size, seq = _begin_flow(now, W.pend[k], POINT, np.zeros(p.n_ops), plan.share, np.zeros(p.n_ops), iso,
                                    fabric, hbm, P, S, W, routes, sharing, size, seq)
    return S, net
