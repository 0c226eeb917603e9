"""The fluid FIFO queueing network: the fast path's model of a contended Program (docs/fast_path.md §6, "A fluid
queueing network").  ``tests/naive_queueing.py`` is the same model in plain Python, its slow reference.

Every flow has a rate *per server*, and every server keeps its arrivals first in, first out, as exact mode
does (docs/exact_mode.md).  The servers:

* a directed link of finite bandwidth ``bw``: one FIFO wire, ``1 / bw`` ns per byte;
* a PE's egress, one queue per virtual channel: the source puts a whole train on it at once;
* a router (a flit-aware node with an overhead that two or more flows cross): one serial worker whose decode
  of a transaction's head takes ``overhead_ns``, first come first served; bytes that arrive during a decode
  are held, and leave when the decode that was under way or queued at their arrival ends;
* a store-and-forward node: a train goes on once all of it has arrived;
* an HBM write's pseudo-channels: one stream per PC it touches, ``commit_ns / flit`` ns per byte.

A queue is a list of batches of constant composition; the head batch drains at ``1 / sum(fraction x
ns_per_byte)`` B/ns and each flow in it leaves at its fraction.  A rate change reaches the next server after
the zero-load head delay ``d = s0 / bw + prop + overhead``.  All events of one instant are applied before any
server recomputes.  A flow ends at ``max(begin + L_iso, T_last + L_iso - T_iso)`` (``T_iso``: the same model's
time for the flow alone), so a flow that meets no other keeps its isolated latency (parity P1).

Flows are CSR (:class:`Flows`, built by ``kbfast.fast.network_flows``): flow f's positions are k in
``[f_ptr[f], f_ptr[f + 1])``, its chain of servers, then its PC streams.  A position is also the flow's slot at
that server: per-slot state (arrival and departure rates, bytes departed, bytes held at a router) lives in
per-slot arrays of :class:`State`.  Pools of batches, entries and values are sized by the caller; a kernel
that runs out sets ``ctr[8]`` and stops, and :func:`network_schedule` runs it again with larger ones.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from kbfast.fast.schedule import EV_FLOW_DONE, EV_JOIN, POINT, _begin_flow
from kbfast.sim.agents import EV_AGENT, EV_CHAN_FREE, EV_OP_DONE, OP_SEND, handle, ipcq_arrive, push
from kbfast.sim.heap import heap_new, heap_pop, heap_push, pack, unpack

QUEUE, ROUTER = 0, 1
RATE, BURST, EMPTYK, DECODED, PART = 1, 2, 3, 4, 5
EMPTY = 1e-9

# Per flow: positions f_ptr (CSR), chain length f_nchain, bytes f_n, head delay to its first server f_d0, and
# when its read channel frees after its last byte leaves the chain f_taken_after; per position: server k_srv,
# ns per byte k_npb, head delay to the next server k_delay, store-and-forward next k_saf, bytes k_need, flow
# k_flow; per server: kind s_kind (QUEUE or ROUTER) and a router's decode s_ovh.
Flows = namedtuple("Flows", ["f_ptr", "f_nchain", "f_n", "f_d0", "f_taken_after", "k_srv", "k_npb", "k_delay",
                             "k_saf", "k_need", "k_flow", "s_kind", "s_ovh"])

# The network's state.  Per place k (a flow at a server): arrival rate in_rate, departure rate dep, bytes out
# cum, bytes held at a router acc (held: -1 not yet arrived, 0 passing, 1 held), recompute stamp and the new
# departure rate newdep, and its links in three per-server lists (arrivals in_*, departures d_*, a router's
# flows r_*).  Per server s: the lists' heads and tails, its clock s_t, whether its tail batch is open, its
# head and tail batches s_bh / s_bt, version s_ver (of its scheduled depletion or decode), whether its arrivals
# changed this instant, a router's busy-until s_busy, and the instant's dirty list.  Pools: batches b_* (bytes,
# next, entries [b_e0, b_e1), drain rate b_mu; free stack b_free), entries e_slot / e_val (place, fraction)
# and event values v_val.  ctr: 0 heap size, 1 events pushed, 2 entries used, 3 values used, 4 free batches,
# 5 dirty servers, 6 flows done this instant, 7 recompute stamp, 8 overflow.  Per flow: done_f / done_t (the
# instant's finished flows), PC streams left f_pc_left, and when its read channel frees f_taken.
State = namedtuple("State", [
    "in_rate", "dep", "cum", "acc", "held", "stamp", "newdep",
    "in_next", "in_prev", "in_on", "d_next", "d_prev", "d_on", "r_next", "r_prev", "r_on",
    "s_in_head", "s_d_head", "s_r_head", "s_in_tail", "s_d_tail", "s_r_tail", "s_t", "s_open", "s_bh", "s_bt",
    "s_ver", "s_changed", "s_busy", "s_dirty", "dirty",
    "b_amt", "b_next", "b_e0", "b_e1", "b_mu", "b_free",
    "e_slot", "e_val", "v_val", "ctr",
    "done_f", "done_t", "f_pc_left", "f_taken", "heap"])


def new_state(fl: Flows, batches: int, entries: int, values: int, events: int) -> State:
    """A fresh :class:`State` of ``fl``'s places and servers, with pools of these sizes and an event heap of
    ``events`` pending events."""
    K, S, F = len(fl.k_srv), len(fl.s_kind), len(fl.f_n)
    z = lambda n, t=np.float64: np.zeros(n, t)      # noqa: E731
    m1 = lambda n: np.full(n, -1, np.int64)        # noqa: E731
    st = State(
        in_rate=z(K), dep=z(K), cum=z(K), acc=z(K), held=np.full(K, -1, np.int8), stamp=z(K, np.int64),
        newdep=z(K), in_next=m1(K), in_prev=m1(K), in_on=z(K, np.bool_), d_next=m1(K), d_prev=m1(K),
        d_on=z(K, np.bool_), r_next=m1(K), r_prev=m1(K), r_on=z(K, np.bool_),
        s_in_head=m1(S), s_d_head=m1(S), s_r_head=m1(S), s_in_tail=m1(S), s_d_tail=m1(S), s_r_tail=m1(S),
        s_t=z(S), s_open=z(S, np.bool_), s_bh=m1(S), s_bt=m1(S),
        s_ver=z(S, np.int64), s_changed=z(S, np.bool_), s_busy=np.full(S, -np.inf), s_dirty=z(S, np.bool_),
        dirty=z(S, np.int64),
        b_amt=z(batches), b_next=m1(batches), b_e0=z(batches, np.int64), b_e1=z(batches, np.int64), b_mu=z(batches),
        b_free=np.arange(batches - 1, -1, -1, dtype=np.int64),
        e_slot=z(entries, np.int64), e_val=z(entries), v_val=z(values), ctr=z(9, np.int64),
        done_f=z(F, np.int64), done_t=z(F), f_pc_left=(np.diff(fl.f_ptr) - fl.f_nchain).astype(np.int64),
        f_taken=np.full(F, np.nan), heap=heap_new(events))
    st.ctr[4] = batches
    return st


# -- small helpers ---------------------------------------------------------------------------------------------
@njit(cache=True, _nrt=False)
def _ev(st, t, kind, a, idx):
    """Queue event ``kind`` of server or slot ``a`` at ``t`` (``idx``: its value's or version's index); a full
    heap is an overflow (``ctr[8]``)."""
    if st.ctr[0] >= len(st.heap[0]):
        st.ctr[8] = 1
        return
    p = pack(kind, a, idx >> 12, idx & 4095)
    heap_push(st.heap, st.ctr[0], st.ctr[1], t, p)
    st.ctr[0] += 1
    st.ctr[1] += 1


@njit(cache=True, _nrt=False)
def _val(st, x):
    """Store ``x`` in the value pool; its index (0 and ``ctr[8]`` set when the pool is full)."""
    i = st.ctr[3]
    if i >= len(st.v_val):
        st.ctr[8] = 1
        return 0
    st.v_val[i] = x
    st.ctr[3] += 1
    return i


@njit(cache=True, _nrt=False)
def _list_add(head, tail, nxt, prv, on, s, k):
    """Append ``k`` to server ``s``'s list (insertion order, as a Python dict keeps it)."""
    if on[k]:
        return
    on[k] = True
    nxt[k] = -1
    prv[k] = tail[s]
    if tail[s] >= 0:
        nxt[tail[s]] = k
    else:
        head[s] = k
    tail[s] = k


@njit(cache=True, _nrt=False)
def _list_del(head, tail, nxt, prv, on, s, k):
    """Remove ``k`` from server ``s``'s list, if it is on it."""
    if not on[k]:
        return
    on[k] = False
    if prv[k] >= 0:
        nxt[prv[k]] = nxt[k]
    else:
        head[s] = nxt[k]
    if nxt[k] >= 0:
        prv[nxt[k]] = prv[k]
    else:
        tail[s] = prv[k]


@njit(cache=True, _nrt=False)
def _in_sum(st, s):
    """The sum of the arrival rates at server ``s``, B/ns."""
    tot = 0.0
    k = st.s_in_head[s]
    while k >= 0:
        tot += st.in_rate[k]
        k = st.in_next[k]
    return tot


@njit(cache=True, _nrt=False)
def _new_batch(fl, st, s, amount, single):
    """A batch of ``amount`` bytes at the tail of ``s``: flow slot ``single`` alone, or (``single`` < 0) the
    composition of the arrivals."""
    if st.ctr[4] == 0:
        st.ctr[8] = 1
        return -1
    st.ctr[4] -= 1
    b = st.b_free[st.ctr[4]]
    e0 = st.ctr[2]
    if single >= 0:
        m = 1
    else:
        m = 0
        k = st.s_in_head[s]
        while k >= 0:
            m += 1
            k = st.in_next[k]
    if e0 + m > len(st.e_slot):
        st.ctr[8] = 1
        st.ctr[4] += 1
        return -1
    if single >= 0:
        st.e_slot[e0] = single
        st.e_val[e0] = 1.0
        mu_inv = fl.k_npb[single]
    else:
        tot = _in_sum(st, s)
        i = e0
        mu_inv = 0.0
        k = st.s_in_head[s]
        while k >= 0:
            st.e_slot[i] = k
            st.e_val[i] = st.in_rate[k] / tot
            mu_inv += st.e_val[i] * fl.k_npb[k]
            i += 1
            k = st.in_next[k]
    st.ctr[2] = e0 + m
    st.b_amt[b] = amount
    st.b_e0[b] = e0
    st.b_e1[b] = e0 + m
    st.b_mu[b] = 1.0 / mu_inv
    st.b_next[b] = -1
    if st.s_bt[s] >= 0:
        st.b_next[st.s_bt[s]] = b
    else:
        st.s_bh[s] = b
    st.s_bt[s] = b
    return b


@njit(cache=True, _nrt=False)
def _pop_tail(st, s):
    """Drop the tail batch (an empty open one)."""
    b = st.s_bt[s]
    if st.s_bh[s] == b:
        st.s_bh[s] = -1
        st.s_bt[s] = -1
    else:
        q = st.s_bh[s]
        while st.b_next[q] != b:
            q = st.b_next[q]
        st.b_next[q] = -1
        st.s_bt[s] = q
    st.b_free[st.ctr[4]] = b
    st.ctr[4] += 1


@njit(cache=True, _nrt=False)
def _pop_head(st, s):
    """Drop the head batch of ``s`` (drained), back to the free stack."""
    b = st.s_bh[s]
    st.s_bh[s] = st.b_next[b]
    if st.s_bh[s] < 0:
        st.s_bt[s] = -1
    st.b_free[st.ctr[4]] = b
    st.ctr[4] += 1


# -- FIFO servers ----------------------------------------------------------------------------------------------
@njit(cache=True, _nrt=False)
def _advance(fl, st, s, now):
    """Bring FIFO server ``s`` to ``now``: its head batch drains ``mu x dt`` bytes, the open tail batch
    gains the arrivals' ``sum(in_rate) x dt``, and each departing place's bytes out grow by ``dep x dt``."""
    dt = now - st.s_t[s]
    if dt > 0:
        bh = st.s_bh[s]
        if bh >= 0:
            st.b_amt[bh] -= st.b_mu[bh] * dt
            if st.s_open[s]:
                st.b_amt[st.s_bt[s]] += _in_sum(st, s) * dt
            if st.b_amt[bh] < 0.0:
                st.b_amt[bh] = 0.0
        k = st.s_d_head[s]
        while k >= 0:
            st.cum[k] += st.dep[k] * dt
            k = st.d_next[k]
    st.s_t[s] = now


@njit(cache=True, _nrt=False)
def _new_tail(fl, st, s):
    """Close the open tail batch of ``s`` (dropped when empty) and open a new one of the current
    arrivals' composition, when there are arrivals."""
    if st.s_bh[s] < 0:
        return
    has_in = st.s_in_head[s] >= 0
    if st.s_open[s]:
        bt = st.s_bt[s]
        if st.b_amt[bt] <= EMPTY:
            _pop_tail(st, s)
            st.s_open[s] = False
            if has_in:
                _new_batch(fl, st, s, 0.0, -1)
                st.s_open[s] = True
            return
        st.s_open[s] = False
    if has_in:
        _new_batch(fl, st, s, 0.0, -1)
        st.s_open[s] = True


@njit(cache=True, _nrt=False)
def _recompute(fl, st, s, now):
    """After the events of ``now``: drop drained head batches; if nothing is queued and the arrivals'
    load ``sum(in_rate x ns_per_byte)`` is at most 1, they pass through at their rates, else a batch opens.  The
    head batch's places depart at ``mu x fraction``; its depletion (``amount / mu``, or ``amount / (mu - sum
    in_rate)`` for the open one) is scheduled.  Departures that stop are sent on first, then new and changed
    ones, in the new order."""
    while st.s_bh[s] >= 0 and st.b_amt[st.s_bh[s]] <= EMPTY * 1e3 and not (
            st.s_bh[s] == st.s_bt[s] and st.s_open[s]):
        _pop_head(st, s)
    bh = st.s_bh[s]
    if bh >= 0 and bh == st.s_bt[s] and st.s_open[s]:
        if _in_sum(st, s) <= st.b_mu[bh] and st.b_amt[bh] <= EMPTY * 1e3:
            _pop_head(st, s)
            st.s_open[s] = False
    st.ctr[7] += 1
    cur = st.ctr[7]
    t_empty = np.inf
    passing = False
    if st.s_bh[s] < 0:
        load = 0.0
        k = st.s_in_head[s]
        while k >= 0:
            load += st.in_rate[k] * fl.k_npb[k]
            k = st.in_next[k]
        if load <= 1.0 + 1e-12:
            passing = True
            k = st.s_in_head[s]
            while k >= 0:
                st.newdep[k] = st.in_rate[k]
                st.stamp[k] = cur
                k = st.in_next[k]
        else:
            _new_batch(fl, st, s, 0.0, -1)
            st.s_open[s] = True
    bh = st.s_bh[s]
    if bh >= 0:
        mu = st.b_mu[bh]
        for i in range(st.b_e0[bh], st.b_e1[bh]):
            k = st.e_slot[i]
            st.newdep[k] = mu * st.e_val[i]
            st.stamp[k] = cur
        if bh == st.s_bt[s] and st.s_open[s]:
            net = _in_sum(st, s) - mu
            if net < 0:
                t_empty = now + st.b_amt[bh] / -net
        else:
            t_empty = now + st.b_amt[bh] / mu
    st.s_ver[s] += 1
    if t_empty < np.inf:
        _ev(st, t_empty, EMPTYK, s, st.s_ver[s] & 0xFFFFFFFF)
    # departures that stop (in the old order), and the list emptied for the new one
    k = st.s_d_head[s]
    while k >= 0:
        nk = st.d_next[k]
        st.d_on[k] = False
        if st.stamp[k] != cur and st.dep[k] != 0.0:
            st.dep[k] = 0.0
            _out(fl, st, k, RATE, 0.0, now)
        k = nk
    st.s_d_head[s] = -1
    st.s_d_tail[s] = -1
    # departures that start or change, in the new order
    if passing:
        k = st.s_in_head[s]
        while k >= 0:
            _set_dep(fl, st, s, k, now)
            k = st.in_next[k]
    elif bh >= 0:
        for i in range(st.b_e0[bh], st.b_e1[bh]):
            _set_dep(fl, st, s, st.e_slot[i], now)


@njit(cache=True, _nrt=False)
def _set_dep(fl, st, s, k, now):
    """Put place ``k`` on ``s``'s departure list and send its new departure rate on when it changed."""
    _list_add(st.s_d_head, st.s_d_tail, st.d_next, st.d_prev, st.d_on, s, k)
    if st.dep[k] != st.newdep[k]:
        st.dep[k] = st.newdep[k]
        _out(fl, st, k, RATE, st.dep[k], now)


# -- routers ---------------------------------------------------------------------------------------------------
@njit(cache=True, _nrt=False)
def _r_advance(st, s, now):
    """Bring router ``s`` to ``now``: each place's arrivals ``in_rate x dt`` are held (``acc``) or pass (``cum``)."""
    dt = now - st.s_t[s]
    if dt > 0:
        k = st.s_r_head[s]
        while k >= 0:
            if st.held[k] == 1:
                st.acc[k] += st.in_rate[k] * dt
            else:
                st.cum[k] += st.in_rate[k] * dt
            k = st.r_next[k]
    st.s_t[s] = now


@njit(cache=True, _nrt=False)
def _router_in(fl, st, s, kind, k, value, now):
    """A rate change or burst of place ``k`` at router ``s``.  A train's head (its first arrival)
    queues a decode of ``overhead_ns`` after the worker's others (``s_busy``); bytes that arrive while the worker
    decodes are held.  The held bytes of the decode under way go out at its end (a PART event), those of later
    heads when the worker is free (DECODED)."""
    _r_advance(st, s, now)
    if st.held[k] == -1:
        st.held[k] = 0
        st.acc[k] = 0.0
        st.cum[k] = 0.0
        if now >= st.s_busy[s]:
            q = st.s_r_head[s]
            while q >= 0:
                if st.held[q] == 0:
                    st.held[q] = 1
                    st.acc[q] = 0.0
                    if st.in_rate[q] > 0:
                        _out(fl, st, q, RATE, 0.0, now)
                q = st.r_next[q]
        else:
            m = 0
            q = st.s_r_head[s]
            while q >= 0:
                if st.held[q] == 1 and st.acc[q] > 0:
                    m += 1
                q = st.r_next[q]
            if m > 0:
                e0 = st.ctr[2]
                if e0 + m + 1 > len(st.e_slot):
                    st.ctr[8] = 1
                    return
                st.e_slot[e0] = m
                i = e0 + 1
                q = st.s_r_head[s]
                while q >= 0:
                    if st.held[q] == 1 and st.acc[q] > 0:
                        st.e_slot[i] = q
                        st.e_val[i] = st.acc[q]
                        st.acc[q] = 0.0
                        i += 1
                    q = st.r_next[q]
                st.ctr[2] = i
                _ev(st, st.s_busy[s], PART, s, e0)
        _list_add(st.s_r_head, st.s_r_tail, st.r_next, st.r_prev, st.r_on, s, k)
        st.s_busy[s] = max(now, st.s_busy[s]) + fl.s_ovh[s]
        st.s_ver[s] += 1
        _ev(st, st.s_busy[s], DECODED, s, st.s_ver[s] & 0xFFFFFFFF)
    if now < st.s_busy[s] and st.held[k] == 0:
        st.held[k] = 1
        st.acc[k] = 0.0
    if kind == BURST:
        if st.held[k] == 1:
            st.acc[k] += value
        else:
            st.cum[k] += value
            _out(fl, st, k, BURST, value, now)
        return
    old = st.in_rate[k]
    st.in_rate[k] = value
    if st.held[k] == 0 and value != old:
        _out(fl, st, k, RATE, value, now)


@njit(cache=True, _nrt=False)
def _router_free(fl, st, s, ver, now):
    """The worker of router ``s`` has decoded every head queued (version ``ver``): the held bytes go out
    as bursts and their flows' rates resume."""
    if ver != (st.s_ver[s] & 0xFFFFFFFF):
        return
    _r_advance(st, s, now)
    k = st.s_r_head[s]
    while k >= 0:
        nk = st.r_next[k]
        if st.held[k] == 1:
            st.held[k] = 0
            a = st.acc[k]
            st.cum[k] += a
            st.acc[k] = 0.0
            if a > 0:
                _out(fl, st, k, BURST, a, now)
            if st.in_rate[k] > 0:
                _out(fl, st, k, RATE, st.in_rate[k], now)
        k = nk


@njit(cache=True, _nrt=False)
def _router_part(fl, st, s, e0, now):
    """The decode under way when more heads arrived has ended: the bytes held until then (entries at
    ``e0``: count, then place and bytes) go out."""
    _r_advance(st, s, now)
    m = st.e_slot[e0]
    for i in range(e0 + 1, e0 + 1 + m):
        k = st.e_slot[i]
        st.cum[k] += st.e_val[i]
        _out(fl, st, k, BURST, st.e_val[i], now)


# -- between servers -------------------------------------------------------------------------------------------
@njit(cache=True, _nrt=False)
def _out(fl, st, k, kind, value, now):
    """Place ``k``'s departure changed (a RATE or a BURST of ``value``): pass it to the flow's next server
    after the head delay ``k_delay``, fan it out to the PC streams (each its share ``k_need[q] / n``), or, at a
    store-and-forward node, send the whole train once it has all left.  A flow whose last byte has left its
    last server (or every PC stream) is done; a read's channel frees ``f_taken_after`` later."""
    f = fl.k_flow[k]
    j = k - fl.f_ptr[f]
    nchain = fl.f_nchain[f]
    need = fl.k_need[k]
    stopped = (value == 0.0) if kind == RATE else (st.in_rate[k] == 0.0)
    finished = stopped and st.cum[k] >= need * (1 - 1e-7)
    s = fl.k_srv[k]
    if finished and fl.s_kind[s] == ROUTER:
        _list_del(st.s_r_head, st.s_r_tail, st.r_next, st.r_prev, st.r_on, s, k)
    if j >= nchain:
        if finished:
            st.f_pc_left[f] -= 1
            if st.f_pc_left[f] == 0:
                _done(st, f, now)
        return
    last = fl.f_ptr[f + 1] - fl.f_ptr[f]
    if j + 1 == nchain and last > nchain:
        if finished:
            st.f_taken[f] = now + fl.f_taken_after[f]
        n = fl.f_n[f]
        for q in range(fl.f_ptr[f] + nchain, fl.f_ptr[f + 1]):
            _ev(st, now + fl.k_delay[k], kind, q, _val(st, value * fl.k_need[q] / n))
        return
    if j + 1 == last:
        if finished:
            _done(st, f, now)
        return
    if fl.k_saf[k]:
        if finished:
            _ev(st, now + fl.k_delay[k], BURST, k + 1, _val(st, fl.f_n[f]))
        return
    _ev(st, now + fl.k_delay[k], kind, k + 1, _val(st, value))


@njit(cache=True, _nrt=False)
def _done(st, f, now):
    """Flow ``f`` is done at ``now`` (collected by the caller after the instant)."""
    i = st.ctr[6]
    st.done_f[i] = f
    st.done_t[i] = now
    st.ctr[6] += 1


# -- the loop --------------------------------------------------------------------------------------------------
@njit(cache=True, _nrt=False)
def inject(fl, st, f, now):
    """Flow ``f`` starts at ``now``: its whole train reaches its first server ``f_d0`` later."""
    _ev(st, now + fl.f_d0[f], BURST, fl.f_ptr[f], _val(st, fl.f_n[f]))


@njit(cache=True, _nrt=False)
def step(fl, st):
    """Every event of the next instant, then one recompute per FIFO server they touched."""
    heap = st.heap
    t = heap[0][0]
    while st.ctr[0] > 0 and heap[0][0] == t:
        _, payload = heap_pop(heap, st.ctr[0])
        st.ctr[0] -= 1
        kind, a, b, c = unpack(payload)
        idx = (b << 12) | c
        if kind == DECODED:
            _router_free(fl, st, a, idx, t)
            continue
        if kind == PART:
            _router_part(fl, st, a, idx, t)
            continue
        if kind == EMPTYK:
            s = a
            if idx != (st.s_ver[s] & 0xFFFFFFFF):
                continue
            _advance(fl, st, s, t)
        else:
            k = a
            s = fl.k_srv[k]
            value = st.v_val[idx]
            if fl.s_kind[s] == ROUTER:
                _router_in(fl, st, s, kind, k, value, t)
                continue
            _advance(fl, st, s, t)
            if kind == RATE:
                st.in_rate[k] = value
                if value > 0:
                    _list_add(st.s_in_head, st.s_in_tail, st.in_next, st.in_prev, st.in_on, s, k)
                else:
                    _list_del(st.s_in_head, st.s_in_tail, st.in_next, st.in_prev, st.in_on, s, k)
            else:
                if st.s_changed[s]:
                    _new_tail(fl, st, s)
                    st.s_changed[s] = False
                if st.s_open[s]:
                    st.s_open[s] = False
                    if st.s_bt[s] >= 0 and st.b_amt[st.s_bt[s]] <= EMPTY:
                        _pop_tail(st, s)
                _new_batch(fl, st, s, value, k)
            st.s_changed[s] = True
        if not st.s_dirty[s]:
            st.s_dirty[s] = True
            st.dirty[st.ctr[5]] = s
            st.ctr[5] += 1
    for i in range(st.ctr[5]):
        s = st.dirty[i]
        st.s_dirty[s] = False
        if st.s_changed[s]:
            _new_tail(fl, st, s)
            st.s_changed[s] = False
        _recompute(fl, st, s, t)
    st.ctr[5] = 0
    return t




# -- with the agents -------------------------------------------------------------------------------------------
DONE, OVERFLOW, OVER_BUDGET = 0, 1, 2   # run_program's outcomes


@njit(cache=True, _nrt=False)
def run_program(share, zeros, iso, fabric, hbm, P, routes, sharing, S, W, fl, st, f_of_op, op_of_f, f_tiso,
                max_events):  # pragma: no cover - jitted
    """The agents of ``P`` (kbfast.sim.agents' rules, as the fluid schedule runs them) with every flow of a
    shared resource in the network (``f_of_op``: its flow, else -1): a flow joins at its head's start
    (``_begin_flow``'s EV_JOIN) and ends at ``max(begin + L_iso, T_last + L_iso - T_iso)``; a read's channel
    frees when the controller has its last flit.  Returns DONE, OVERFLOW (a pool of ``st`` ran out: the
    caller retries with larger ones) or OVER_BUDGET (the network pushed more than ``max_events`` events)."""
    heap = W.heap
    size = np.int64(0)
    seq = np.int64(0)
    W.drained[:] = True             # each train joins its channel's queue at its begin: the network keeps FIFO
    for a in range(len(P.a_start)):
        size, seq = push(heap, size, seq, P.a_start[a], EV_AGENT, a, 0, 0)
    while size > 0 or st.ctr[0] > 0:
        t_net = st.heap[0][0] if st.ctr[0] > 0 else np.inf
        t_heap = heap[0][0] if size > 0 else np.inf
        if t_net <= t_heap:
            step(fl, st)
            if st.ctr[8]:
                return OVERFLOW
            if st.ctr[1] > max_events:
                return OVER_BUDGET
            for i in range(st.ctr[6]):
                f = st.done_f[i]
                T = st.done_t[i]
                o = op_of_f[f]
                lat = W.lat_free[o] if P.op_code[o] != OP_SEND else W.lat[o]
                end = max(W.start[o] + W.lat[o], T + lat - f_tiso[f])
                if W.rel[o] >= 0.0:
                    taken = T if np.isnan(st.f_taken[f]) else st.f_taken[f]
                    size, seq = push(heap, size, seq, max(taken, end - W.rel[o]), EV_CHAN_FREE, o, 0, 0)
                size, seq = push(heap, size, seq, end, EV_FLOW_DONE, o, W.ver[o], 0)
            st.ctr[6] = 0
            continue
        now, payload = heap_pop(heap, size)
        size -= 1
        kind, x, y, _ = unpack(payload)
        if kind == EV_JOIN:
            inject(fl, st, f_of_op[x], now)
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
            size, seq = _begin_flow(now, W.pend[k], POINT, zeros, share, zeros, iso, fabric, hbm, P, S, W, routes,
                                    sharing, size, seq)
    return DONE
