"""The exact-mode replay kernel: a flit-level discrete-event simulation in Numba.

Semantics (design §5; spec_fabric §5.1–§5.3, §5.7; spec_memory §3–§4; spec_pe §4.3):

* A transaction with payload is split into flits of ``flit_bytes`` (last one
  partial).  Every directed edge is a FIFO wire: a flit put at ``t`` departs at
  ``max(t, avail)``, ``avail += bytes/bw`` and it arrives ``prop`` later.
* A flit-aware node has one serial worker: ``s = max(arrival, free)``, plus the
  node overhead on the transaction's first flit; ``free = s``; the flit is put on
  the next edge at ``s``.  (Such a node is never a payload source, so its worker is
  the only feeder of its out-edges and the put can be resolved at once.)
* A non-flit-aware node (pcie_ep, io_cpu, m_cpu, sram, PE blocks) waits for the
  last flit, pays its overhead, and re-streams every flit (store-and-forward).
* A transaction's source pays its own overhead before streaming.  Zero-byte
  control messages occupy no bandwidth and no worker: they pay propagation and
  the overhead of every intermediate node.
* HBM controller (terminal, flit-aware): flit ``i`` commits to PC
  ``((addr + i*flit) >> log2(burst)) & (n_pcs-1)`` at
  ``max(s, pc_avail) + switch_penalty`` for ``commit_ns``; the transaction
  finalizes at its latest commit, asynchronously (the worker goes on); a PE
  read finalizes when its last flit is taken (``hbm.read_response: accepted``).
  A PE DMA then returns a zero-byte response on the reverse route; a host write
  completes at once; a host read (a zero-byte command) runs the chunk loop of
  spec_memory §3.7 and streams its data back on the reverse route.
* Agents, DMA channels and the IPCQ protocol are kbfast.sim.agents (shared with
  the fast path); an IPCQ SEND injects its data towards the receiver's
  ``pe_dma`` (store-and-forward terminal) and reports the reassembly time.
* A PE's egress link (the first edge out of its ``pe_dma``) carries two virtual
  channels, ``vc_compute`` (DMA data) and ``vc_comm`` (IPCQ data), each a FIFO of
  transactions.  The link serves one flit at a time by weighted round robin:
  up to ``w_compute`` flits of one, then up to ``w_comm`` of the other, skipping
  an empty channel (spec_ccl §2.8, ADR-0023 D8).  The arbiter decides after
  every other event of the same instant, so it sees every flit put at that
  time.  Alone, a channel streams back to back like any other wire.
* Events at equal times run in insertion order (bit-for-bit reproducible).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from kbfast.sim.heap import heap_new, heap_pop, heap_push, pack, unpack
from kbfast.sim.fabric import bottleneck, ctrl_latency, pc_of, pc_table_size
from kbfast.sim.agents import (EV_AGENT, EV_CHAN_FREE, EV_OP_DONE, OP_DMA_WRITE, OP_SEND, handle_call, ipcq_arrive_call,
                               new_state)

# transaction kinds
K_PE_REQ, K_H2D, K_D2H_CMD, K_D2H_DATA, K_IPCQ = 0, 1, 2, 3, 4
# engine event kinds (0..7 belong to kbfast.sim.agents)
EV_FLIT, EV_PUT, EV_TXN_DONE, EV_CTRL_ARRIVE, EV_CHUNK, EV_VC_SERVE = 8, 9, 10, 11, 12, 13
VC_COMPUTE, VC_COMM = 0, 1
# status
OK, DEADLOCK, BUDGET = 0, 1, 2


@njit(cache=True, inline="always")
def _push(heap, size, seq, time, kind, a, b, c):  # pragma: no cover - jitted
    """:func:`kbfast.sim.agents.push`, inlined: the replay pushes at every flit hop (as a call, a paired bench
    measured a GEMM replay's event rate a fifth lower; the agents' handlers and the fast schedule call it)."""
    heap_push(heap, size, seq, time, pack(kind, a, b, c))
    return size + 1, seq + 1


@njit(cache=True, inline="always")
def _flit_size(i, nfl, nbytes, flit_bytes):  # pragma: no cover - jitted
    return flit_bytes if i < nfl - 1 else nbytes - flit_bytes * (nfl - 1)


def replay(fabric, hbm, P, routes, vc_edge, vc_w, max_events, heap_capacity):
    """Replay a Program; returns (status, n_events, S, e_bytes, e_busy, e_peak, pc_commits, pc_busy, pc_backlog).
    Python, not a kernel: it allocates the state and calls :func:`_run` (as a kernel it made Numba optimise the
    replay's loop a second time on a first run, docs/README.md "First run").

    Parameters (built by :func:`kbfast.sim.lowering.lower`, docs/README.md "Kernel contracts")
    ----------
    fabric : Fabric
        compact nodes, edges and routes of the Program.
    hbm : Hbm
        PC count, burst and flit sizes, commit times, switch penalty.
    P : Prog
        agents, ops and IPCQ channels (:func:`kbfast.sim.lowering.make_prog`).
    routes : OpRoutes
        per op its HBM address and forward / reverse route, per channel its route.
    vc_edge : bool [E]
        the PE egress links, where the two virtual channels meet.
    vc_w : int64 [2]
        round-robin weights in flits of ``vc_compute`` and ``vc_comm``.
    max_events : int64
        event budget; past it the replay stops with status ``BUDGET``.
    heap_capacity : int64
        event queue size (:func:`kbfast.sim.lowering.heap_capacity`).

    Returns status (``OK``, ``DEADLOCK``, ``BUDGET``), the number of events, the agents' state ``S``, per
    edge the bytes, busy time and peak queue (bytes), per PC the commits, busy time and largest backlog.

    A put of a whole transaction on one edge (source injection or a
    store-and-forward re-stream) reserves the wire for the train at once; the
    flits' arrival events are then generated one after another (flit i+1 when
    flit i arrives), which keeps the heap small.  On an edge without
    serialization all flits arrive together and are pushed at once, which keeps
    the wire's FIFO order.  On a PE egress link (``vc_edge``) a put joins its
    virtual channel's queue instead and the link's arbiter (``EV_VC_SERVE``)
    sends one flit per event.
    """
    S = new_state(P)
    W = _scratch(len(P.op_code), len(fabric.n_ovh), len(fabric.e_src), fabric.n_hbm, hbm.n_pcs, vc_w, heap_capacity)
    status, n_events = _run(fabric, hbm, P, S, W, routes, vc_edge, vc_w, max_events)
    return status, n_events, S, W.e_bytes, W.e_busy, W.e_peak, W.pc_commits, W.pc_busy, W.pc_backlog


Scratch = namedtuple("Scratch", [
    "pend", "t_route", "t_nbytes", "t_nflits", "t_addr", "t_dir", "t_kind", "t_op", "t_count", "t_last", "t_aux",
    "t_train_hop", "t_train_dep0", "t_sent", "t_qnext", "t_qhop", "q_head", "q_tail", "vc_turn", "vc_left",
    "vc_busy", "q_bytes", "node_free", "avail", "e_bytes", "e_busy", "e_peak", "pc_avail", "pc_dir", "pc_commits",
    "pc_busy", "pc_backlog", "heap", "vheap"])


@njit(cache=True)
def _scratch(n_ops, n_nodes, n_edges, n_hbm, n_pcs, vc_w, heap_capacity):  # pragma: no cover - jitted
    """Fresh arrays of :func:`_run`: per transaction, per edge (and virtual channel), per node, per PC of every
    controller (``n_hbm``: each node's controller, -1 for none); the heaps."""
    max_txn = 2 * n_ops + 1
    n_pc_all = pc_table_size(n_hbm, n_pcs)
    return Scratch(
        pend=np.empty(n_ops + 1, np.int64),
        t_route=np.empty(max_txn, np.int64), t_nbytes=np.empty(max_txn, np.int64),
        t_nflits=np.empty(max_txn, np.int64), t_addr=np.empty(max_txn, np.int64), t_dir=np.empty(max_txn, np.int8),
        t_kind=np.empty(max_txn, np.int8), t_op=np.empty(max_txn, np.int64), t_count=np.zeros(max_txn, np.int64),
        t_last=np.zeros(max_txn),
        t_aux=np.zeros(max_txn),                        # chunk-loop start (D2H command)
        t_train_hop=np.full(max_txn, -1, np.int64),
        t_train_dep0=np.zeros(max_txn),                 # departure of flit 0 of the current train
        t_sent=np.zeros(max_txn, np.int64),             # flits already sent by a VC arbiter
        t_qnext=np.full(max_txn, -1, np.int64), t_qhop=np.zeros(max_txn, np.int64),
        # per edge and virtual channel: FIFO of transactions (head, tail); per edge: turn, flits left in it
        q_head=np.full((n_edges, 2), -1, np.int64), q_tail=np.full((n_edges, 2), -1, np.int64),
        vc_turn=np.zeros(n_edges, np.int64), vc_left=np.full(n_edges, vc_w[VC_COMPUTE], np.int64),
        vc_busy=np.zeros(n_edges, np.bool_), q_bytes=np.zeros(n_edges),
        node_free=np.zeros(n_nodes), avail=np.zeros(n_edges), e_bytes=np.zeros(n_edges), e_busy=np.zeros(n_edges),
        e_peak=np.zeros(n_edges), pc_avail=np.zeros(n_pc_all), pc_dir=np.full(n_pc_all, -1, np.int8),
        pc_commits=np.zeros(n_pc_all, np.int64), pc_busy=np.zeros(n_pc_all), pc_backlog=np.zeros(n_pc_all),
        heap=heap_new(heap_capacity),
        # Arbiter decisions wait in their own heap and run after every other event of their instant,
        # so that they see every flit put on their link at that time, whatever the events' order.
        vheap=heap_new(n_edges + 16))


# No NRT (here and in _start_dma): the loop allocates nothing, and without NRT the inlined
# runtime helpers pay no atomic reference counting on the many arrays of P and S.
# Allocation happens in replay().  One handler per event kind, inlined into the loop (a call would
# pass dozens of arrays per event): each takes the event's fields and the tables it reads, and returns
# the queue counters it moved.
@njit(cache=True, error_model="numpy", _nrt=False)
def _run(fabric, hbm, P, S, W, routes, vc_edge, vc_w, max_events):  # pragma: no cover - jitted
    """The event loop of :func:`replay` (same parameters, plus the agents' state ``S`` and the scratch
    arrays ``W``); returns (status, n_events)."""
    heap, vheap = W.heap, W.vheap
    n_agents = len(P.a_start)
    n_txn = np.int64(0)
    size = np.int64(0)
    seq = np.int64(0)
    for a in range(n_agents):
        size, seq = _push(heap, size, seq, P.a_start[a], EV_AGENT, a, 0, 0)
    vsize = np.int64(0)

    n_events = 0
    status = OK
    while size > 0 or vsize > 0:
        if vsize > 0 and (size == 0 or vheap[0][0] < heap[0][0]):
            now, payload = heap_pop(vheap, vsize)
            vsize -= 1
        else:
            now, payload = heap_pop(heap, size)
            size -= 1
        kind, x, y, z = unpack(payload)
        n_events += 1
        if n_events > max_events:
            status = BUDGET
            break
        if kind == EV_FLIT:
            size, seq = _on_flit(now, x, y, z, fabric, hbm, P, W, size, seq)
        elif kind == EV_PUT:
            size, seq, vsize = _on_put(now, x, z, fabric, hbm, W, vc_edge, size, seq, vsize)
        elif kind == EV_VC_SERVE:
            size, seq, vsize = _on_vc_serve(now, x, fabric, hbm, W, vc_w, size, seq, vsize)
        elif kind == EV_CTRL_ARRIVE:
            size, seq = _on_ctrl_arrive(now, x, fabric, hbm, P, W, size, seq)
        elif kind == EV_CHUNK:
            size, seq, n_txn = _on_chunk(now, x, y, fabric, hbm, P, W, routes, size, seq, n_txn)
        elif kind == EV_TXN_DONE:
            size, seq = _on_txn_done(now, x, fabric, P, S, W, routes, size, seq)
        else:
            # Agents, DMA channels and IPCQ (kbfast.sim.agents; it raises on a kind nobody handles), then
            # begin what they released.
            size, seq, n_pend = handle_call(kind, x, y, now, P, S, heap, size, seq, W.pend, np.int64(0))
            for k in range(n_pend):
                size, seq, n_txn = _begin(now, W.pend[k], fabric, hbm, P, S, W, routes, size, seq, n_txn)

    if status == OK:
        for a in range(n_agents):
            if S.a_finish[a] < 0:
                status = DEADLOCK
    return status, n_events


@njit(cache=True, inline="always")
def _on_flit(now, txn, i, hop, fabric, hbm, P, W, size, seq):  # pragma: no cover - jitted
    """``EV_FLIT``: flit ``i`` of ``txn`` reaches the end of its route's edge ``hop``.  Sends the train's next
    flit on that edge; then the node takes it: an HBM controller commits it to its PC, a flit-aware node
    forwards it through its serial worker, a store-and-forward node counts it and re-streams the whole
    transaction after the last.  Returns (size, seq)."""
    e_dst, e_bw, e_prop, n_ovh, r_ptr, r_edges = fabric.e_dst, fabric.e_bw, fabric.e_prop, fabric.n_ovh, \
        fabric.r_ptr, fabric.r_edges
    flit_bytes = hbm.flit_bytes
    node_free, heap = W.node_free, W.heap
    r = W.t_route[txn]
    lo = r_ptr[r]
    last_hop = lo + hop == r_ptr[r + 1] - 1
    e = r_edges[lo + hop]
    v = e_dst[e]
    nfl = W.t_nflits[txn]
    if hop == W.t_train_hop[txn] and i + 1 < nfl:
        # Next flit of the train on this edge (departures are back to back from dep0).
        dep = W.t_train_dep0[txn] + (i + 1) * (flit_bytes / e_bw[e])
        arr = dep + _flit_size(i + 1, nfl, W.t_nbytes[txn], flit_bytes) / e_bw[e] + e_prop[e]
        size, seq = _push(heap, size, seq, arr, EV_FLIT, txn, i + 1, hop)
    if last_hop and fabric.n_hbm[v] >= 0:
        s = max(now, node_free[v])
        if i == 0:
            s += n_ovh[v]
        node_free[v] = s
        n_pcs = hbm.n_pcs
        g = fabric.n_hbm[v] * n_pcs + pc_of(W.t_addr[txn] + i * flit_bytes, hbm.pc_shift, n_pcs)
        pc_avail, pc_dir = W.pc_avail, W.pc_dir
        sw = hbm.switch_penalty_ns if (pc_dir[g] >= 0 and pc_dir[g] != W.t_dir[txn]) else 0.0
        if pc_avail[g] - s > W.pc_backlog[g]:
            W.pc_backlog[g] = pc_avail[g] - s
        fin = max(s, pc_avail[g]) + sw + hbm.commit_ns
        pc_avail[g] = fin
        pc_dir[g] = W.t_dir[txn]
        W.pc_commits[g] += 1
        W.pc_busy[g] += hbm.commit_ns
        W.t_last[txn] = fin if i == 0 else max(W.t_last[txn], fin)
        if i == nfl - 1:
            # A PE read may free its channel, and send its response, once its last flit is taken.
            read = W.t_kind[txn] == K_PE_REQ and W.t_dir[txn] == 1
            if read and P.read_release_early:
                size, seq = _push(heap, size, seq, s, EV_CHAN_FREE, W.t_op[txn], 0, 0)
            done = s if (read and hbm.read_accept) else max(W.t_last[txn], s)
            size, seq = _push(heap, size, seq, done, EV_TXN_DONE, txn, 0, 0)
    elif fabric.n_flit[v]:
        s = max(now, node_free[v])
        if i == 0:
            s += n_ovh[v]
        node_free[v] = s
        if last_hop:
            if i == nfl - 1:
                size, seq = _push(heap, size, seq, s, EV_TXN_DONE, txn, 0, 0)
        else:
            avail = W.avail
            e2 = r_edges[lo + hop + 1]
            nb = _flit_size(i, nfl, W.t_nbytes[txn], flit_bytes)
            if avail[e2] > s:
                W.e_peak[e2] = max(W.e_peak[e2], (avail[e2] - s) * e_bw[e2])
            avail[e2] = max(s, avail[e2]) + nb / e_bw[e2]
            W.e_bytes[e2] += nb
            W.e_busy[e2] += nb / e_bw[e2]
            size, seq = _push(heap, size, seq, avail[e2] + e_prop[e2], EV_FLIT, txn, i, hop + 1)
    else:
        W.t_count[txn] += 1
        if W.t_count[txn] == nfl:
            W.t_count[txn] = 0
            if last_hop:
                size, seq = _push(heap, size, seq, now + n_ovh[v], EV_TXN_DONE, txn, 0, 0)
            else:
                size, seq = _push(heap, size, seq, now + n_ovh[v], EV_PUT, txn, 0, hop + 1)
    return size, seq


@njit(cache=True, inline="always")
def _on_put(now, txn, hop, fabric, hbm, W, vc_edge, size, seq, vsize):  # pragma: no cover - jitted
    """``EV_PUT``: the whole of ``txn`` is put on its route's edge ``hop`` now.  On a PE egress link it joins
    its virtual channel's queue (and wakes the arbiter); elsewhere it reserves the wire for the train.
    Returns (size, seq, vsize)."""
    e_bw, e_prop = fabric.e_bw, fabric.e_prop
    avail, e_peak = W.avail, W.e_peak
    e = fabric.r_edges[fabric.r_ptr[W.t_route[txn]] + hop]
    nfl = W.t_nflits[txn]
    nbytes = W.t_nbytes[txn]
    if vc_edge[e]:
        q_head, q_tail, q_bytes = W.q_head, W.q_tail, W.q_bytes
        c = VC_COMM if W.t_kind[txn] == K_IPCQ else VC_COMPUTE
        e_peak[e] = max(e_peak[e], q_bytes[e] + max(avail[e] - now, 0.0) * e_bw[e])
        q_bytes[e] += nbytes
        W.t_sent[txn] = 0
        W.t_qnext[txn] = -1
        W.t_qhop[txn] = hop
        W.t_train_hop[txn] = -1
        if q_tail[e, c] < 0:
            q_head[e, c] = txn
        else:
            W.t_qnext[q_tail[e, c]] = txn
        q_tail[e, c] = txn
        if not W.vc_busy[e]:
            W.vc_busy[e] = True
            vsize, seq = _push(W.vheap, vsize, seq, max(now, avail[e]), EV_VC_SERVE, e, 0, 0)
        return size, seq, vsize
    if avail[e] > now:
        e_peak[e] = max(e_peak[e], (avail[e] - now) * e_bw[e])
    dep0 = max(now, avail[e])
    avail[e] = dep0 + nbytes / e_bw[e]
    W.e_bytes[e] += nbytes
    W.e_busy[e] += nbytes / e_bw[e]
    if np.isinf(e_bw[e]):
        # No serialization: every flit arrives at once; push them all now so that
        # they keep the wire's FIFO order against other trains arriving at that time.
        W.t_train_hop[txn] = -1
        for i in range(nfl):
            size, seq = _push(W.heap, size, seq, dep0 + e_prop[e], EV_FLIT, txn, i, hop)
        return size, seq, vsize
    W.t_train_hop[txn] = hop
    W.t_train_dep0[txn] = dep0
    arr = dep0 + _flit_size(0, nfl, nbytes, hbm.flit_bytes) / e_bw[e] + e_prop[e]
    size, seq = _push(W.heap, size, seq, arr, EV_FLIT, txn, 0, hop)
    return size, seq, vsize


@njit(cache=True, inline="always")
def _on_vc_serve(now, e, fabric, hbm, W, vc_w, size, seq, vsize):  # pragma: no cover - jitted
    """``EV_VC_SERVE``: PE egress link ``e`` sends one flit, by weighted round robin between its virtual
    channels: keep the turn while its channel has flits and quota, else switch.  Returns (size, seq, vsize)."""
    e_bw = fabric.e_bw
    q_head, q_tail, vc_turn, vc_left, avail = W.q_head, W.q_tail, W.vc_turn, W.vc_left, W.avail
    c = vc_turn[e]
    if q_head[e, c] < 0 or vc_left[e] <= 0:
        if q_head[e, 1 - c] >= 0:
            c = 1 - c
            vc_turn[e] = c
        vc_left[e] = vc_w[c]
    txn = q_head[e, c]
    i = W.t_sent[txn]
    W.t_sent[txn] = i + 1
    vc_left[e] -= 1
    nb = _flit_size(i, W.t_nflits[txn], W.t_nbytes[txn], hbm.flit_bytes)
    avail[e] = now + nb / e_bw[e]
    W.q_bytes[e] -= nb
    W.e_bytes[e] += nb
    W.e_busy[e] += nb / e_bw[e]
    size, seq = _push(W.heap, size, seq, avail[e] + fabric.e_prop[e], EV_FLIT, txn, i, W.t_qhop[txn])
    if i + 1 == W.t_nflits[txn]:
        q_head[e, c] = W.t_qnext[txn]
        if q_head[e, c] < 0:
            q_tail[e, c] = -1
    if q_head[e, 0] >= 0 or q_head[e, 1] >= 0:
        vsize, seq = _push(W.vheap, vsize, seq, avail[e], EV_VC_SERVE, e, 0, 0)
    else:
        W.vc_busy[e] = False
    return size, seq, vsize


@njit(cache=True, inline="always")
def _on_ctrl_arrive(now, txn, fabric, hbm, P, W, size, seq):  # pragma: no cover - jitted
    """``EV_CTRL_ARRIVE``: a zero-byte message reaches its last node.  A host read's command starts the
    chunk loop (spec_memory §3.7: chunks drain/n apart after the overhead); anything else is done after the
    node's overhead.  Returns (size, seq)."""
    r_ptr, r_edges = fabric.r_ptr, fabric.r_edges
    r = W.t_route[txn]
    v = fabric.e_dst[r_edges[r_ptr[r + 1] - 1]]
    ovh = fabric.n_ovh[v]
    if W.t_kind[txn] == K_D2H_CMD:
        W.t_aux[txn] = now + ovh
        W.t_last[txn] = W.t_aux[txn]
        nbytes = P.op_nbytes[W.t_op[txn]]
        nch = (nbytes + hbm.burst_bytes - 1) // hbm.burst_bytes
        delta = 0.0 if nch == 0 else nbytes / bottleneck(r_edges, r_ptr[r], r_ptr[r + 1], fabric.e_bw) / nch
        size, seq = _push(W.heap, size, seq, W.t_aux[txn] + delta, EV_CHUNK, txn, 0, 0)
    else:
        if W.t_kind[txn] == K_PE_REQ and W.t_dir[txn] == 1 and P.read_release_early:
            size, seq = _push(W.heap, size, seq, now + ovh, EV_CHAN_FREE, W.t_op[txn], 0, 0)
        size, seq = _push(W.heap, size, seq, now + ovh, EV_TXN_DONE, txn, 0, 0)
    return size, seq


@njit(cache=True, inline="always")
def _on_chunk(now, txn, i, fabric, hbm, P, W, routes, size, seq, n_txn):  # pragma: no cover - jitted
    """``EV_CHUNK``: chunk ``i`` of a host read commits one burst to its PC; after the last, the data streams
    back on the reverse route from the controller (its overhead already paid).  Returns (size, seq, n_txn)."""
    r_ptr, r_edges = fabric.r_ptr, fabric.r_edges
    burst_bytes = hbm.burst_bytes
    r = W.t_route[txn]
    v = fabric.e_dst[r_edges[r_ptr[r + 1] - 1]]
    o = W.t_op[txn]
    nbytes = P.op_nbytes[o]
    nch = (nbytes + burst_bytes - 1) // burst_bytes
    if i < nch:
        pc_avail, pc_dir = W.pc_avail, W.pc_dir
        g = fabric.n_hbm[v] * hbm.n_pcs + pc_of(routes.op_addr[o] + i * burst_bytes, hbm.pc_shift, hbm.n_pcs)
        sw = hbm.switch_penalty_ns if (pc_dir[g] >= 0 and pc_dir[g] != 1) else 0.0
        if pc_avail[g] - now > W.pc_backlog[g]:
            W.pc_backlog[g] = pc_avail[g] - now
        fin = max(now, pc_avail[g]) + sw + hbm.burst_commit_ns
        pc_avail[g] = fin
        pc_dir[g] = 1
        W.pc_commits[g] += 1
        W.pc_busy[g] += hbm.burst_commit_ns
        W.t_last[txn] = max(W.t_last[txn], fin)
    if i + 1 < nch:
        delta = nbytes / bottleneck(r_edges, r_ptr[r], r_ptr[r + 1], fabric.e_bw) / nch
        size, seq = _push(W.heap, size, seq, W.t_aux[txn] + (i + 2) * delta, EV_CHUNK, txn, i + 1, 0)
        return size, seq, n_txn
    d = n_txn
    rr = routes.op_rroute[o]
    W.t_route[d] = rr
    W.t_nbytes[d] = nbytes
    W.t_nflits[d] = (nbytes + hbm.flit_bytes - 1) // hbm.flit_bytes
    W.t_addr[d] = routes.op_addr[o]
    W.t_dir[d] = 1
    W.t_kind[d] = K_D2H_DATA
    W.t_op[d] = o
    when = max(now, W.t_last[txn])
    if W.t_nflits[d] == 0:
        when += ctrl_latency(r_edges, r_ptr[rr], r_ptr[rr + 1], fabric.e_dst, fabric.e_prop, fabric.n_ovh)
        size, seq = _push(W.heap, size, seq, when, EV_CTRL_ARRIVE, d, 0, 0)
    else:
        size, seq = _push(W.heap, size, seq, when, EV_PUT, d, 0, 0)
    return size, seq, n_txn + 1


@njit(cache=True, inline="always")
def _on_txn_done(now, txn, fabric, P, S, W, routes, size, seq):  # pragma: no cover - jitted
    """``EV_TXN_DONE``: a transaction has finished.  IPCQ data has reassembled at the receiver; a PE request
    returns its zero-byte response on the reverse route (then the op is done); a host transfer's op is done
    now.  Returns (size, seq)."""
    o = W.t_op[txn]
    if W.t_kind[txn] == K_IPCQ:
        return ipcq_arrive_call(o, now, P, S, W.heap, size, seq)
    if W.t_kind[txn] == K_PE_REQ:
        r_ptr, r_edges = fabric.r_ptr, fabric.r_edges
        rr = routes.op_rroute[o]
        pe = fabric.e_dst[r_edges[r_ptr[rr + 1] - 1]]
        arrive = now + ctrl_latency(r_edges, r_ptr[rr], r_ptr[rr + 1], fabric.e_dst, fabric.e_prop,
                                    fabric.n_ovh) + fabric.n_ovh[pe]
        return _push(W.heap, size, seq, arrive, EV_OP_DONE, o, 0, 0)
    return _push(W.heap, size, seq, now, EV_OP_DONE, o, 0, 0)


@njit(cache=True, inline="always")
def _begin(now, o, fabric, hbm, P, S, W, routes, size, seq, n_txn):  # pragma: no cover - jitted
    """Begin op ``o``, which an agent released at ``now``, as transaction ``n_txn``: a SEND's data towards the
    receiver's ``pe_dma`` after the source's overhead, or a DMA (:func:`_start_dma`).
    Returns (size, seq, n_txn)."""
    r_ptr, r_edges = fabric.r_ptr, fabric.r_edges
    d = n_txn
    if P.op_code[o] == OP_SEND:
        W.t_route[d] = routes.ch_route[P.op_target[o]]
        W.t_nbytes[d] = P.op_nbytes[o]
        W.t_nflits[d] = (P.op_nbytes[o] + hbm.flit_bytes - 1) // hbm.flit_bytes
        W.t_addr[d] = 0
        W.t_dir[d] = 0
        W.t_kind[d] = K_IPCQ
        W.t_op[d] = o
        ev_t = now + fabric.n_ovh[fabric.e_src[r_edges[r_ptr[W.t_route[d]]]]]
        ev_k = EV_PUT
    else:
        ev_t, ev_k = _start_dma(o, now, d, P.a_host[S.op_agent[o]], P.op_code, P.op_nbytes, routes.op_addr,
                                routes.op_route, W.t_route, W.t_nbytes, W.t_nflits, W.t_addr, W.t_dir, W.t_kind,
                                W.t_op, r_ptr, r_edges, fabric.e_src, fabric.e_dst, fabric.e_prop, fabric.n_ovh,
                                hbm.flit_bytes)
    size, seq = _push(W.heap, size, seq, ev_t, ev_k, d, 0, 0)
    return size, seq, n_txn + 1


@njit(cache=True, _nrt=False)
def _start_dma(o, now, d, is_host, op_code, op_nbytes, op_addr, op_route,
               t_route, t_nbytes, t_nflits, t_addr, t_dir, t_kind, t_op, r_ptr, r_edges, e_src, e_dst, e_prop,
               n_ovh, flit_bytes):  # pragma: no cover - jitted
    """Set up transaction ``d`` for DMA op ``o`` issued at ``now``; returns its first event (time, kind).

    The source pays its overhead before streaming; a zero-byte request travels as a control message.
    """
    write = op_code[o] == OP_DMA_WRITE
    t_route[d] = op_route[o]
    t_addr[d] = op_addr[o]
    t_dir[d] = 0 if write else 1
    t_op[d] = o
    if is_host:
        t_kind[d] = K_H2D if write else K_D2H_CMD
    else:
        t_kind[d] = K_PE_REQ
    t_nbytes[d] = op_nbytes[o] if (write or not is_host) else 0
    t_nflits[d] = (t_nbytes[d] + flit_bytes - 1) // flit_bytes
    t0 = now + n_ovh[e_src[r_edges[r_ptr[op_route[o]]]]]
    if t_nflits[d] == 0:
        return t0 + ctrl_latency(r_edges, r_ptr[op_route[o]], r_ptr[op_route[o] + 1], e_dst, e_prop, n_ovh), EV_CTRL_ARRIVE
    return t0, EV_PUT
