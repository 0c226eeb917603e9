"""Agent programs and IPCQ credit flow, shared by both evaluators (Numba).

The exact replay and the fast schedule differ only in how a transfer moves
through the fabric.  Everything an agent does between transfers lives here
once: program order, WAIT (on the agent's own ops or on another agent's), COMPUTE,
the PE's resources and the IPCQ protocol of spec_ccl §2 and §4:

* a PE has five resources of capacity 1, shared first in, first out by every
  agent on it (spec_pe §4.2–§4.4): the DMA write and read channels (held through
  the round trip; a read frees its channel when the controller took its last
  flit under ``pe.dma_read_release: accepted``, event ``EV_CHAN_FREE``), the TCM
  read channel (FETCH), the TCM write channel (STORE) and the compute slot (GEMM
  and MATH).  FETCH, STORE, GEMM and MATH hold theirs for ``op_arg`` ns;

* SEND is accepted when ``head - tail_cache < n_slots`` (else the agent blocks:
  sleep wakes at the credit, poll at the first poll tick after it); the data
  transfer is then injected and the send returns at once.  ``q_peak`` keeps the
  largest ``head - tail_cache`` a SEND of the channel saw: this is the only test
  that reads ``n_slots``, so a run in which no SEND blocked is the same run for
  every ``n_slots > q_peak``;
* when the data has reassembled at the receiver's ``pe_dma`` (time ``t_a``),
  the slot write costs ``SLOT + HOP`` and data and head become visible together
  at ``t_vis = max(t_a + SLOT + HOP, previous t_vis of the channel)``;
* a RECV takes the channel's next message when it is visible, pays the slot read
  ``SLOT + HOP`` (not with ``consume = 0``), then the credit: blocking, the recv
  returns after the credit latency and the credit lands at the sender then;
  forked, the recv returns at once and the credit lands a latency later;
* RECV on no channel scans the agent's inbound channels round robin.

``SLOT(n) = setup + n / tier_bw`` and ``HOP(n) = n / hop_bw`` (sram, hbm).
Evaluators call :func:`run_agent` on agent events, begin the ops it returns in
``pend`` (DMAs, and SEND data transfers), and report back with
:func:`op_done` and :func:`ipcq_arrive`.

Inlining (measured with ``kbfast bench`` and the first-run compile times, docs/README.md "First run"):
the fast schedule's loop is mostly agent events, and a call that passes ``P`` and ``S`` (about 50 arrays)
costs more than the work, so the handlers are inlined into it, :func:`run_agent` too (a call to it made a
lrab all-reduce's schedule on ring6 take 242 µs where inlined it takes 150 µs; torus16 602 and 346 µs).
The small helpers that many handlers call (:func:`push`, ``_begin``, ``_release``, ``_end``) are ordinary
calls without NRT instead: Numba inlines once per call site and types every copy, which cost the fast
schedule about 4 s of its first-run compile, while LLVM inlines calls this small anyway (the schedule's speed
did not change).  The exact replay pushes at every flit hop and inlines a ``push`` of its own.
The exact replay's loop is mostly flit events: it calls :func:`handle_call` and :func:`ipcq_arrive_call`,
compiled once, which keeps its loop small enough to compile in a third of the time at the same speed;
``handle_call`` calls ``run_agent`` compiled once on its own, so that only the fast loop compiles a copy.
Loop counters start as ``np.int64``: an integer literal argument makes Numba compile a callee once more.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from kbfast.sim.heap import heap_push, pack

OP_START, OP_DMA_WRITE, OP_DMA_READ, OP_WAIT, OP_COMPUTE, OP_SEND, OP_RECV, OP_MATH = 0, 1, 2, 3, 4, 5, 6, 7
OP_FETCH, OP_STORE, OP_GEMM = 8, 9, 10
# np.int64, not int: a jitted call passing a Python int constant compiles a callee per value (a Literal[int])
EV_AGENT, EV_OP_DONE, EV_VISIBLE, EV_RECV_TRY, EV_CREDIT, EV_CHAN_FREE = (np.int64(k) for k in range(6))
BLK_NONE, BLK_OP, BLK_ALL, BLK_SEND, BLK_ANY = 0, 1, 2, 3, 4
# A PE's resources of capacity 1 (spec_pe §4.2–§4.4): DMA write and read channels, TCM read and write
# channels, the compute slot (PE_GEMM and PE_MATH).  Every agent of a PE shares them, first in, first out.
R_DMA_WRITE, R_DMA_READ, R_TCM_READ, R_TCM_WRITE, R_COMPUTE = 0, 1, 2, 3, 4
N_RES = 5

Prog = namedtuple("Prog", [
    "a_start", "a_host", "op_ptr", "agent_ops", "op_code", "op_target", "op_nbytes", "op_async", "op_arg",
    "ch_src", "ch_dst", "ch_nslots", "ch_setup", "ch_tier_bw", "ch_hop_bw", "ch_credit", "ch_in_ptr",
    "ch_in_list", "ch_msg_ptr", "ch_msg_op", "credit_blocking", "poll_ns",
    "a_pe",                  # int64 [A]: the PE whose resources agent a uses (-1: the host, which has none)
    "a_alone",               # bool [A]: the only agent on its PE (its timed ops need no queue)
    "read_release_early",    # bool: a DMA read frees its channel when the controller took its last flit
])

State = namedtuple("State", [
    "op_agent", "op_issue", "op_begin", "op_end", "op_next", "op_chan", "op_whead", "op_wnext",
    "a_pc", "a_block", "a_arg", "a_out", "a_finish", "a_since", "a_rr",
    "dq_busy", "dq_head", "dq_tail",
    "q_head", "q_tailc", "q_vis", "q_tail", "q_last_vis", "q_rhead", "q_rtail", "q_busy", "q_peak"])


@njit(cache=True)
def new_state(P):  # pragma: no cover - jitted
    """Fresh agents' state for the packed Program ``P``: every agent at its first op, every op pending,
    every channel empty (the arrays both event loops update)."""
    n_ops = len(P.op_code)
    n_agents = len(P.a_start)
    n_ch = len(P.ch_src)
    n_pe = 1
    for a in range(n_agents):
        n_pe = max(n_pe, P.a_pe[a] + 1)
    op_agent = np.empty(n_ops, np.int64)
    for a in range(n_agents):
        for k in range(P.op_ptr[a], P.op_ptr[a + 1]):
            op_agent[P.agent_ops[k]] = a
    S = State(
        op_agent=op_agent, op_issue=np.empty(n_ops), op_begin=np.empty(n_ops), op_end=np.empty(n_ops),
        op_next=np.empty(n_ops, np.int64), op_chan=np.empty(n_ops, np.int64), op_whead=np.empty(n_ops, np.int64),
        op_wnext=np.empty(n_ops, np.int64), a_pc=np.empty(n_agents, np.int64), a_block=np.empty(n_agents, np.int64),
        a_arg=np.empty(n_agents, np.int64), a_out=np.empty(n_agents, np.int64), a_finish=np.empty(n_agents),
        a_since=np.empty(n_agents), a_rr=np.empty(n_agents, np.int64),
        dq_busy=np.empty((n_pe, N_RES), np.int64), dq_head=np.empty((n_pe, N_RES), np.int64),
        dq_tail=np.empty((n_pe, N_RES), np.int64),
        q_head=np.empty(n_ch, np.int64), q_tailc=np.empty(n_ch, np.int64), q_vis=np.empty(n_ch, np.int64),
        q_tail=np.empty(n_ch, np.int64), q_last_vis=np.empty(n_ch), q_rhead=np.empty(n_ch, np.int64),
        q_rtail=np.empty(n_ch, np.int64), q_busy=np.empty(n_ch), q_peak=np.empty(n_ch, np.int64))
    reset_state(S, P)
    return S


@njit(cache=True, _nrt=False)
def reset_state(S, P):  # pragma: no cover - jitted
    """Put the state ``S`` of ``P`` (or of a Program of the same shape: :func:`new_state`'s) back at the start:
    every agent at its first op, every op pending, every channel empty."""
    S.op_issue[:] = -1.0
    S.op_begin[:] = -1.0
    S.op_end[:] = -1.0
    S.op_next[:] = -1
    for o in range(len(S.op_chan)):       # loops, not slice copies: those may allocate (no NRT here)
        S.op_chan[o] = P.op_target[o]
    S.op_whead[:] = -1
    S.op_wnext[:] = -1
    for a in range(len(S.a_pc)):
        S.a_pc[a] = P.op_ptr[a]
    S.a_block[:] = 0
    S.a_arg[:] = 0
    S.a_out[:] = 0
    S.a_finish[:] = -1.0
    S.a_since[:] = 0.0
    S.a_rr[:] = 0
    S.dq_busy[:] = -1
    S.dq_head[:] = -1
    S.dq_tail[:] = -1
    S.q_head[:] = 0
    S.q_tailc[:] = 0
    S.q_vis[:] = 0
    S.q_tail[:] = 0
    S.q_last_vis[:] = -np.inf
    S.q_rhead[:] = -1
    S.q_rtail[:] = -1
    S.q_busy[:] = -np.inf
    S.q_peak[:] = 0


@njit(cache=True, inline="always")
def _wake_time(P, since, now):  # pragma: no cover - jitted
    """Sleep wakes at the trigger; poll at the first tick of the poll grid started at ``since``."""
    if P.poll_ns <= 0.0 or now <= since:
        return now
    return since + np.ceil((now - since) / P.poll_ns) * P.poll_ns


@njit(cache=True, inline="always")
def _slot_ns(P, c, n):  # pragma: no cover - jitted
    """Slot write or read: tier setup + n / tier bw, plus the PE <-> bank hop for sram and hbm."""
    return P.ch_setup[c] + n / P.ch_tier_bw[c] + n / P.ch_hop_bw[c]


@njit(cache=True, _nrt=False)
def push(heap, size, seq, time, kind, a, b, c):  # pragma: no cover - jitted
    """Push event ``kind`` with payload (a, b, c) at ``time``; returns the new (size, sequence number)."""
    heap_push(heap, size, seq, time, pack(kind, a, b, c))
    return size + 1, seq + 1


@njit(cache=True, inline="always")
def resource_of(code):  # pragma: no cover - jitted
    """The PE resource an op holds (``R_*``), or -1 (START, WAIT, COMPUTE, SEND, RECV)."""
    if code == OP_DMA_WRITE:
        return R_DMA_WRITE
    if code == OP_DMA_READ:
        return R_DMA_READ
    if code == OP_FETCH:
        return R_TCM_READ
    if code == OP_STORE:
        return R_TCM_WRITE
    if code == OP_GEMM or code == OP_MATH:
        return R_COMPUTE
    return -1


@njit(cache=True, _nrt=False)
def _begin(o, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """Op ``o`` has its resource: a DMA goes to the evaluator (``pend``); a timed op ends ``op_arg`` ns later."""
    S.op_begin[o] = now
    code = P.op_code[o]
    if code == OP_DMA_WRITE or code == OP_DMA_READ:
        pend[n_pend] = o
        n_pend += 1
    else:
        size, seq = push(heap, size, seq, now + P.op_arg[o], EV_OP_DONE, o, 0, 0)
    return size, seq, n_pend


@njit(cache=True, _nrt=False)
def _release(pe, r, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """Resource ``r`` of PE ``pe`` is free: the next queued op (FIFO) takes it."""
    nxt = S.dq_head[pe, r]
    if nxt >= 0:
        S.dq_head[pe, r] = S.op_next[nxt]
        if S.dq_head[pe, r] < 0:
            S.dq_tail[pe, r] = -1
        S.dq_busy[pe, r] = nxt
        size, seq, n_pend = _begin(nxt, now, P, S, heap, size, seq, pend, n_pend)
    else:
        S.dq_busy[pe, r] = -1
    return size, seq, n_pend


@njit(cache=True, _nrt=False)
def _end(o, t, S, heap, size, seq):  # pragma: no cover - jitted
    """Op ``o`` ends at ``t``: agents of other ops waiting on it (WAIT on another agent's op) wake then."""
    S.op_end[o] = t
    w = S.op_whead[o]
    S.op_whead[o] = -1
    while w >= 0:
        b = S.op_agent[w]
        if S.a_block[b] == BLK_OP and S.a_arg[b] == o:
            S.a_block[b] = BLK_NONE
            size, seq = push(heap, size, seq, t, EV_AGENT, b, 0, 0)
        w = S.op_wnext[w]
    return size, seq


@njit(cache=True, _nrt=False, inline="always")
def run_agent(a, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """Run agent ``a`` until it blocks; ops to begin now are appended to ``pend``.

    One dispatch over the op codes, shared by both evaluators' event loops (each case a few lines), so it
    stays one function: split, every case would pass the agents' dozens of state arrays."""
    S.a_block[a] = BLK_NONE
    while True:
        k = S.a_pc[a]
        if k == P.op_ptr[a + 1]:
            S.a_finish[a] = now
            break
        o = P.agent_ops[k]
        code = P.op_code[o]
        if S.op_issue[o] < 0:
            S.op_issue[o] = now
        r = resource_of(code)
        if code == OP_START:
            S.op_begin[o] = now
            size, seq = _end(o, now, S, heap, size, seq)
            S.a_pc[a] += 1
        elif r >= R_TCM_READ and P.a_alone[a] and not P.op_async[o]:
            # FETCH, STORE, GEMM, MATH of the PE's only agent: nobody else can hold the resource, so the
            # agent itself is busy for op_arg ns (no queue, no completion event)
            S.op_begin[o] = now
            size, seq = _end(o, now + P.op_arg[o], S, heap, size, seq)
            S.a_pc[a] += 1
            size, seq = push(heap, size, seq, now + P.op_arg[o], EV_AGENT, a, 0, 0)
            break
        elif r >= 0:
            # DMA, FETCH, STORE, GEMM, MATH: take the PE's resource, or queue for it (FIFO).
            S.a_out[a] += 1
            S.a_pc[a] += 1
            pe = P.a_pe[a]
            if pe < 0 or S.dq_busy[pe, r] < 0:
                if pe >= 0:
                    S.dq_busy[pe, r] = o
                size, seq, n_pend = _begin(o, now, P, S, heap, size, seq, pend, n_pend)
            else:
                if S.dq_tail[pe, r] >= 0:
                    S.op_next[S.dq_tail[pe, r]] = o
                else:
                    S.dq_head[pe, r] = o
                S.dq_tail[pe, r] = o
            if not P.op_async[o]:
                S.a_block[a] = BLK_OP
                S.a_arg[a] = o
                break
        elif code == OP_SEND:
            c = P.op_target[o]
            S.q_peak[c] = max(S.q_peak[c], S.q_head[c] - S.q_tailc[c])
            if S.q_head[c] - S.q_tailc[c] >= P.ch_nslots[c]:
                S.a_block[a] = BLK_SEND
                S.a_arg[a] = c
                S.a_since[a] = now
                break
            S.q_head[c] += 1
            S.op_begin[o] = now
            size, seq = _end(o, now, S, heap, size, seq)
            S.a_pc[a] += 1
            pend[n_pend] = o
            n_pend += 1
        elif code == OP_RECV:
            c = P.op_target[o]
            if c < 0:
                # Round robin over the inbound channels, from the cursor (spec_ccl §4.9).
                lo, hi = P.ch_in_ptr[a], P.ch_in_ptr[a + 1]
                for j in range(hi - lo):
                    cand = P.ch_in_list[lo + (S.a_rr[a] + j) % (hi - lo)]
                    if S.q_vis[cand] > S.q_tail[cand] and S.q_rhead[cand] < 0:
                        c = cand
                        S.a_rr[a] = (S.a_rr[a] + j + 1) % (hi - lo)
                        break
                if c < 0:
                    S.a_block[a] = BLK_ANY
                    S.a_since[a] = now
                    break
            S.op_chan[o] = c
            S.a_out[a] += 1
            S.a_pc[a] += 1
            if S.q_rtail[c] >= 0:
                S.op_next[S.q_rtail[c]] = o
            else:
                S.q_rhead[c] = o
            S.q_rtail[c] = o
            size, seq = push(heap, size, seq, now, EV_RECV_TRY, c, 0, 0)
            if not P.op_async[o]:
                S.a_block[a] = BLK_OP
                S.a_arg[a] = o
                break
        elif code == OP_WAIT:
            tgt = P.op_target[o]
            if tgt < 0:
                if S.a_out[a] > 0:
                    S.a_block[a] = BLK_ALL
                    break
            elif S.op_end[tgt] < 0 or S.op_end[tgt] > now:
                S.a_block[a] = BLK_OP
                S.a_arg[a] = tgt
                if S.op_agent[tgt] != a:
                    # Another agent's op: wake at its known end, or when it ends (its waiter list).
                    if S.op_end[tgt] >= 0:
                        S.a_block[a] = BLK_NONE
                        size, seq = push(heap, size, seq, S.op_end[tgt], EV_AGENT, a, 0, 0)
                    else:
                        S.op_wnext[o] = S.op_whead[tgt]
                        S.op_whead[tgt] = o
                break
            S.op_begin[o] = S.op_issue[o]
            size, seq = _end(o, now, S, heap, size, seq)
            S.a_pc[a] += 1
        else:  # COMPUTE: the agent itself is busy for op_arg ns
            S.op_begin[o] = now
            size, seq = _end(o, now + P.op_arg[o], S, heap, size, seq)
            S.a_pc[a] += 1
            size, seq = push(heap, size, seq, now + P.op_arg[o], EV_AGENT, a, 0, 0)
            break
    return size, seq, n_pend


@njit(cache=True, inline="always")
def op_done(o, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """A DMA, RECV or timed op completed at ``now``: free its resource (unless it already did), wake its
    agent if waiting, and every agent waiting on it."""
    size, seq = _end(o, now, S, heap, size, seq)
    a = S.op_agent[o]
    S.a_out[a] -= 1
    r = resource_of(P.op_code[o])
    pe = P.a_pe[a]
    if r >= 0 and pe >= 0 and S.dq_busy[pe, r] == o:
        size, seq, n_pend = _release(pe, r, now, P, S, heap, size, seq, pend, n_pend)
    if (S.a_block[a] == BLK_OP and S.a_arg[a] == o) or (S.a_block[a] == BLK_ALL and S.a_out[a] == 0):
        S.a_block[a] = BLK_NONE
        size, seq = push(heap, size, seq, now, EV_AGENT, a, 0, 0)
    return size, seq, n_pend


@njit(cache=True, inline="always")
def chan_free(o, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """DMA read ``o`` frees its channel before its response is back (``pe.dma_read_release: accepted``)."""
    pe = P.a_pe[S.op_agent[o]]
    if pe >= 0 and S.dq_busy[pe, R_DMA_READ] == o:
        size, seq, n_pend = _release(pe, np.int64(R_DMA_READ), now, P, S, heap, size, seq, pend, n_pend)
    return size, seq, n_pend


@njit(cache=True, inline="always")
def ipcq_arrive(send_op, now, P, S, heap, size, seq):  # pragma: no cover - jitted
    """The data of ``send_op`` reassembled at the receiver's pe_dma: slot write, then visible (FIFO)."""
    c = P.op_target[send_op]
    vis = max(now + _slot_ns(P, c, P.op_nbytes[send_op]), S.q_last_vis[c])
    S.q_last_vis[c] = vis
    return push(heap, size, seq, vis, EV_VISIBLE, c, 0, 0)


@njit(cache=True, inline="always")
def visible(c, now, P, S, heap, size, seq):  # pragma: no cover - jitted
    """Data and head of the next message of channel ``c`` become visible (spec_ccl §4.5)."""
    S.q_vis[c] += 1
    size, seq = push(heap, size, seq, now, EV_RECV_TRY, c, 0, 0)
    a = P.ch_dst[c]
    if S.a_block[a] == BLK_ANY:
        S.a_block[a] = BLK_NONE
        size, seq = push(heap, size, seq, _wake_time(P, S.a_since[a], now), EV_AGENT, a, 0, 0)
    return size, seq


@njit(cache=True, inline="always")
def recv_try(c, now, P, S, heap, size, seq):  # pragma: no cover - jitted
    """Serve the channel's oldest waiting RECV if its message is visible (spec_ccl §2.4)."""
    o = S.q_rhead[c]
    if o < 0 or S.q_vis[c] <= S.q_tail[c] or S.q_busy[c] > now:
        return size, seq
    S.q_rhead[c] = S.op_next[o]
    if S.q_rhead[c] < 0:
        S.q_rtail[c] = -1
    msg = P.ch_msg_op[P.ch_msg_ptr[c] + S.q_tail[c]]
    t0 = max(now, S.op_issue[o])
    if t0 > S.op_issue[o]:
        t0 = max(t0, _wake_time(P, S.op_issue[o], now))
    S.op_begin[o] = t0
    t1 = t0 + (_slot_ns(P, c, P.op_nbytes[msg]) if P.op_arg[o] > 0.0 else 0.0)
    S.q_tail[c] += 1
    if P.credit_blocking:
        end = t1 + P.ch_credit[c]
        credit_at = end
    else:
        end = t1
        credit_at = t1 + P.ch_credit[c]
    S.q_busy[c] = end
    size, seq = push(heap, size, seq, end, EV_OP_DONE, o, 0, 0)
    size, seq = push(heap, size, seq, credit_at, EV_CREDIT, S.q_tail[c], c, 0)
    # Retry when this recv ends: a recv may be queued meanwhile while its message is already visible.
    size, seq = push(heap, size, seq, end, EV_RECV_TRY, c, 0, 0)
    return size, seq


@njit(cache=True, inline="always")
def credit(c, value, now, P, S, heap, size, seq):  # pragma: no cover - jitted
    """A credit lands at the sender: the tail cache advances; a sender blocked on a full ring wakes."""
    S.q_tailc[c] = max(S.q_tailc[c], value)
    a = P.ch_src[c]
    if S.a_block[a] == BLK_SEND and S.a_arg[a] == c:
        S.a_block[a] = BLK_NONE
        size, seq = push(heap, size, seq, _wake_time(P, S.a_since[a], now), EV_AGENT, a, 0, 0)
    return size, seq


@njit(cache=True, inline="always")
def handle(kind, x, y, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """Dispatch a shared event (``EV_AGENT`` .. ``EV_CHAN_FREE``); returns (size, seq, n_pend).  Any other kind
    raises: an evaluator handles its own kinds before it calls this."""
    if kind == EV_AGENT:
        return run_agent(x, now, P, S, heap, size, seq, pend, n_pend)
    return _handle_other(kind, x, y, now, P, S, heap, size, seq, pend, n_pend)


@njit(cache=True, inline="always")
def _handle_other(kind, x, y, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """:func:`handle` of every kind but ``EV_AGENT``."""
    if kind == EV_OP_DONE:
        size, seq, n_pend = op_done(x, now, P, S, heap, size, seq, pend, n_pend)
    elif kind == EV_VISIBLE:
        size, seq = visible(x, now, P, S, heap, size, seq)
    elif kind == EV_RECV_TRY:
        size, seq = recv_try(x, now, P, S, heap, size, seq)
    elif kind == EV_CREDIT:
        size, seq = credit(y, x, now, P, S, heap, size, seq)
    elif kind == EV_CHAN_FREE:
        size, seq, n_pend = chan_free(x, now, P, S, heap, size, seq, pend, n_pend)
    else:
        raise ValueError("kbfast.sim.agents.handle: unknown event kind (an evaluator passed an event it must "
                         "handle itself)")
    return size, seq, n_pend


@njit(cache=True, _nrt=False)
def _run_agent_call(a, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """:func:`run_agent` compiled once as a function of its own, for the exact replay."""
    return run_agent(a, now, P, S, heap, size, seq, pend, n_pend)


@njit(cache=True, _nrt=False)
def handle_call(kind, x, y, now, P, S, heap, size, seq, pend, n_pend):  # pragma: no cover - jitted
    """:func:`handle` compiled once as a function of its own, for the exact replay (see the module notes);
    an agent event calls :func:`run_agent`, which the fast schedule inlines, so that it is compiled once
    more only there."""
    if kind == EV_AGENT:
        return _run_agent_call(x, now, P, S, heap, size, seq, pend, n_pend)
    return _handle_other(kind, x, y, now, P, S, heap, size, seq, pend, n_pend)


@njit(cache=True, _nrt=False)
def ipcq_arrive_call(send_op, now, P, S, heap, size, seq):  # pragma: no cover - jitted
    """:func:`ipcq_arrive` compiled once as a function of its own, for the exact replay."""
    return ipcq_arrive(send_op, now, P, S, heap, size, seq)
