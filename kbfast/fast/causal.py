"""Flows that can never be in flight together, whatever the timing (docs/fast_path.md §4, "Causal order").

A flow that ends before another begins in *every* schedule cannot delay it, so the upper bound may leave
it out as a co-user, however wide the two flows' windows.  The Program's own order proves it:

* program order: an agent issues an op once the one before it returned; a blocking DMA returns at its end;
* a message: the k-th RECV on a channel returns after the k-th SEND's data arrived (channels are first in,
  first out), so after everything the sender knew when it sent;
* a credit: SEND k on a channel of ``n`` slots is accepted (its data leaves) only after RECV ``k - n``
  returned (spec_ccl §4: ``head - tail_cache < n_slots``).

:func:`knowledge` runs these rules as vector clocks: at the issue of each flow, per agent how many of its
ops have returned and per channel how many messages were delivered.  Flow ``g`` has ended before flow
``o`` begins when ``o``'s clock counts it: a SEND as its message, a blocking DMA as its op (an asynchronous
DMA's end is never counted).  A RECV of an agent that also receives from any channel (``RECV_ANY``) takes
messages in an order only the timing decides: its channels give no message or credit rule.

Two messages of one channel are ordered in space, too: the sender puts them into its PE's IPCQ virtual
channel, a first-in first-out queue, and they take the same route, so the later one is behind the earlier
at every server and cannot delay it (``Causal.chan`` and ``Causal.nth``).

:func:`causal_interference` is :func:`kbfast.fast.bounds.interference` charged per server and pair by
pair, without the co-users that are causally apart.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from kbfast.fast.bounds import _unit, entry_servers
from kbfast.fast.runs import run_units, stable_order
from kbfast.ir import RECV_ANY
from kbfast.sim.agents import OP_DMA_READ, OP_DMA_WRITE, OP_RECV, OP_SEND

# per flow row (rows[o] for op o, -1 for an op that is no flow): its clock at its begin, and how another
# flow's clock counts its end (component, least count; component -1: never); a SEND's channel (else -1)
# and its place among the channel's messages
Causal = namedtuple("Causal", ["rows", "clock", "comp", "need", "chan", "nth"])

# how causal_interference's co-user g of op o stands to it, whatever the timing: a later message of o's
# channel (behind o at every server), g ended before o began, o ended before g began
BEHIND, ENDED_BEFORE, BEGAN_AFTER = 2, 4, 8


@njit(cache=True)
def knowledge(op_ptr, agent_ops, op_code, op_target, op_async, ch_src, ch_dst, ch_nslots, flows):  # pragma: no cover
    """Vector clocks of the flows ``flows`` (op ids) at their begin: a :class:`Causal`.

    ``clock[rows[o], a]`` (``a`` < A) counts agent ``a``'s ops known to have returned when flow ``o``
    begins; ``clock[rows[o], A + c]`` the messages of channel ``c`` known to have arrived.  Agents advance
    in program order as far as their messages and credits allow (a worklist); an op that can never run
    (a RECV without its SEND) stops its agent, and its flows keep an empty clock (nothing is apart).
    One worklist pass whose steps share the clock rows in place, hence its length.
    """
    n_ag = len(op_ptr) - 1
    n_ch = len(ch_src)
    n_ops = len(op_code)
    width = n_ag + n_ch
    rows = np.full(n_ops, -1, np.int64)
    for i in range(len(flows)):
        rows[flows[i]] = i
    clock = np.zeros((len(flows), width), np.int32)
    comp = np.full(len(flows), -1, np.int64)
    need = np.zeros(len(flows), np.int32)
    # an agent that receives from any channel: its inbound channels give no message or credit rule
    anyrecv = np.zeros(n_ag, np.bool_)
    for a in range(n_ag):
        for i in range(op_ptr[a], op_ptr[a + 1]):
            o = agent_ops[i]
            if op_code[o] == OP_RECV and op_target[o] == RECV_ANY:
                anyrecv[a] = True
    ordered = np.zeros(n_ch, np.bool_)
    for c in range(n_ch):
        ordered[c] = not anyrecv[ch_dst[c]]
    # each op's agent and place in it; the message index of each SEND and RECV on its channel
    agent = np.empty(n_ops, np.int64)
    place = np.empty(n_ops, np.int64)
    for a in range(n_ag):
        for i in range(op_ptr[a], op_ptr[a + 1]):
            agent[agent_ops[i]] = a
            place[agent_ops[i]] = i - op_ptr[a]
    msg = np.full(n_ops, -1, np.int64)
    n_send = np.zeros(n_ch, np.int64)
    n_recv = np.zeros(n_ch, np.int64)
    for a in range(n_ag):
        for i in range(op_ptr[a], op_ptr[a + 1]):
            o = agent_ops[i]
            c = op_target[o]
            if op_code[o] == OP_SEND:
                msg[o] = n_send[c]
                n_send[c] += 1
            elif op_code[o] == OP_RECV and c >= 0 and ordered[c]:
                msg[o] = n_recv[c]
                n_recv[c] += 1
    s_ptr = np.zeros(n_ch + 1, np.int64)
    r_ptr = np.zeros(n_ch + 1, np.int64)
    for c in range(n_ch):
        s_ptr[c + 1] = s_ptr[c] + n_send[c]
        r_ptr[c + 1] = r_ptr[c] + n_recv[c]
    send_clock = np.zeros((s_ptr[n_ch], width), np.int32)   # the sender's clock when its data leaves
    recv_clock = np.zeros((r_ptr[n_ch], width), np.int32)   # the receiver's clock when the RECV returns
    sent = np.zeros(s_ptr[n_ch], np.bool_)
    received = np.zeros(r_ptr[n_ch], np.bool_)
    cur = np.zeros((n_ag, width), np.int32)                 # per agent: its clock after its last op
    nxt = np.zeros(n_ag, np.int64)                          # per agent: its next op (index into its ops)
    stack = np.empty(n_ag + 2 * n_ops + 1, np.int64)
    top = 0
    for a in range(n_ag):
        stack[top] = a
        top += 1
    while top > 0:
        top -= 1
        a = stack[top]
        while op_ptr[a] + nxt[a] < op_ptr[a + 1]:
            o = agent_ops[op_ptr[a] + nxt[a]]
            c = op_target[o]
            m = msg[o]
            k = cur[a].copy()
            if op_code[o] == OP_SEND:
                n = ch_nslots[c]
                if ordered[c] and m >= n and m - n < n_recv[c]:
                    if not received[r_ptr[c] + m - n]:
                        break                        # waits for the credit of RECV m - n
                    np.maximum(k, recv_clock[r_ptr[c] + m - n], k)
                send_clock[s_ptr[c] + m] = k
                sent[s_ptr[c] + m] = True
                if ordered[c] and m < n_recv[c]:
                    stack[top] = ch_dst[c]
                    top += 1
            if rows[o] >= 0:
                clock[rows[o]] = k
            if op_code[o] == OP_RECV and m >= 0:
                if m < n_send[c]:
                    if not sent[s_ptr[c] + m]:
                        break                        # waits for its message
                    np.maximum(k, send_clock[s_ptr[c] + m], k)
                    k[n_ag + c] = max(k[n_ag + c], m + 1)
                recv_clock[r_ptr[c] + m] = k
                received[r_ptr[c] + m] = True
                stack[top] = ch_src[c]
                top += 1
            nxt[a] += 1
            k[a] = nxt[a]                            # ops 0 .. nxt - 1 of a have returned
            cur[a] = k
    chan = np.full(len(flows), -1, np.int64)
    nth = np.zeros(len(flows), np.int64)
    for o in flows:
        i = rows[o]
        if op_code[o] == OP_SEND:
            comp[i] = n_ag + op_target[o]
            need[i] = msg[o] + 1
            chan[i], nth[i] = op_target[o], msg[o]
        elif (op_code[o] == OP_DMA_WRITE or op_code[o] == OP_DMA_READ) and not op_async[o]:
            comp[i] = agent[o]
            need[i] = place[o] + 1
    return Causal(rows=rows, clock=clock, comp=comp, need=need, chan=chan, nth=nth)


@njit(cache=True, inline="always")
def _n_flows(B, r):  # pragma: no cover - jitted
    """The flows on resource ``r`` (each class's ops, once per entry of the class there)."""
    n = 0
    for j in range(B.users_ptr[r], B.users_ptr[r + 1]):
        c = B.users[j, 0]
        n += B.ops_ptr[c + 1] - B.ops_ptr[c]
    return n


@njit(cache=True)
def pair_count(B):  # pragma: no cover - jitted
    """The pairs :func:`causal_interference` visits: the sum over resources of (its flows)^2."""
    total = 0
    for r in range(len(B.users_ptr) - 1):
        total += _n_flows(B, r) ** 2
    return total


@njit(cache=True)
def fifo_order(B):  # pragma: no cover - jitted
    """Per entry of ``B.res``: its server's place on its class's route, for the crossing rule of
    :func:`causal_interference`; -1 where that rule does not hold: the controller, and the route's first wire,
    which a PE's two virtual channels share by round robin, not first in first out."""
    at = entry_servers(B)
    order = np.full(len(B.res), -1, np.int64)
    for c in range(len(B.cls_ptr) - 1):
        for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]):
            if at[k] >= 0 and not B.seq_solo[at[k]]:
                order[k] = at[k] - B.seq_ptr[c]
    return order


@njit(cache=True)
def _heaviest_common_order(pos_g, work):  # pragma: no cover - jitted
    """The heaviest subsequence of servers (given in the order of o's route) whose places ``pos_g`` on g's
    route also increase: O(m^2) for m shared servers, O(m) when they all increase (two flows that cross
    their shared servers in the same order; most do), then the sum of ``work`` (>= 0) in that order, which
    is what the O(m^2) recurrence adds up, bit for bit."""
    m = len(pos_g)
    rising = True
    for i in range(1, m):
        if pos_g[i] <= pos_g[i - 1]:
            rising = False
            break
    if rising:
        total = 0.0
        for i in range(m):
            total += work[i]
        return total
    best = np.empty(m)
    top = 0.0
    for i in range(m):
        best[i] = work[i]
        for j in range(i):
            if pos_g[j] < pos_g[i]:
                best[i] = max(best[i], best[j] + work[i])
        top = max(top, best[i])
    return top


@njit(cache=True)
def _add_crossing_charges(x, x_g, x_po, x_pg, x_w, n_x, by_po, head, tail):  # pragma: no cover - jitted
    """``x`` plus the crossing charges of one op's ``n_x`` entries (co-user ``x_g``, place on o's route ``x_po`` and on
    g's ``x_pg``, work ``x_w``): per co-user, in ascending order, its heaviest common-order subsequence over
    its entries in order of ``x_po`` (ties: as entered).  A stable counting sort by ``x_po`` (``by_po``, zero
    on entry and on return) and per co-user lists (``head`` -1 and ``tail`` on entry; ``head`` -1 on
    return) give that order in time linear in the entries.  Added to ``x`` one by one, as they always were."""
    n_po = 0
    for n in range(n_x):
        by_po[x_po[n] + 1] += 1
        n_po = max(n_po, x_po[n] + 1)
    for v in range(n_po):
        by_po[v + 1] += by_po[v]
    order = np.empty(n_x, np.int64)
    for n in range(n_x):
        order[by_po[x_po[n]]] = n
        by_po[x_po[n]] += 1
    by_po[:n_po + 1] = 0
    nxt = np.empty(n_x, np.int64)
    users = np.empty(n_x, np.int64)
    n_u = 0
    for n in order:
        g = x_g[n]
        nxt[n] = -1
        if head[g] < 0:
            head[g] = n
            users[n_u] = g
            n_u += 1
        else:
            nxt[tail[g]] = n
        tail[g] = n
    users = users[:n_u][stable_order(users[:n_u])]
    pos_g = np.empty(n_x, np.int64)
    work = np.empty(n_x)
    for g in users:
        m = 0
        n = head[g]
        while n >= 0:
            pos_g[m], work[m] = x_pg[n], x_w[n]
            m += 1
            n = nxt[n]
        head[g] = -1
        x += _heaviest_common_order(pos_g[:m], work[:m])
    return x


@njit(cache=True)
def _server_flows(B, begin_lo, end_hi, pre, post):  # pragma: no cover - jitted
    """Per resource, CSR: its flows (op, entry, class) with their windows there (narrowed by ``pre`` and
    ``post``), in class order, then op order; and ``by_begin``, each resource's rows sorted by window begin
    (stably)."""
    n_res = len(B.users_ptr) - 1
    ptr = np.zeros(n_res + 1, np.int64)
    for r in range(n_res):
        ptr[r + 1] = ptr[r] + _n_flows(B, r)
    m = ptr[n_res]
    u_op, u_k, u_cls = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64)
    u_b, u_e = np.empty(m), np.empty(m)
    by_begin = np.empty(m, np.int64)
    for r in range(n_res):
        n = ptr[r]
        for j in range(B.users_ptr[r], B.users_ptr[r + 1]):
            c, k = B.users[j, 0], B.users[j, 1]
            for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
                g = B.ops[i]
                u_op[n], u_k[n], u_cls[n] = g, k, c
                u_b[n] = begin_lo[g] + pre[k]
                u_e[n] = max(end_hi[g] - post[k], u_b[n])
                n += 1
        lo, hi = ptr[r], ptr[r + 1]
        if hi - lo > 1:
            by_begin[lo:hi] = lo + np.argsort(u_b[lo:hi], kind="mergesort")
        elif hi > lo:
            by_begin[lo] = lo
    return ptr, u_op, u_k, u_cls, u_b, u_e, by_begin


@njit(cache=True, inline="always")
def _pair_run_charge(R, c, d, units_g):  # pragma: no cover - jitted
    """The run bound's charge (kbfast.fast.runs) of one co-user of class ``d`` (its units ``units_g``) to an
    op of class ``c``: over every run and solo server the two share, or inf when ``c`` keeps the per-server
    charge (not ``R.done``) or ``d`` is no partner of it."""
    if not R.done[c]:
        return np.inf
    lo, hi = R.p_ptr[c], R.p_ptr[c + 1]
    j = lo + np.searchsorted(R.p_cls[lo:hi], d)
    if j >= hi or R.p_cls[j] != d:
        return np.inf
    x = 0.0
    for u in range(4):
        x += R.p_coef[j, u] * units_g[u]
    return x


@njit(cache=True)
def causal_interference(B, nbytes, flit, begin_lo, end_hi, own_extra, posted, cz, pre, post,
                        order, runs):  # pragma: no cover - jitted
    """(One scan per op and server over the server's flows sorted by window, a hot kernel: hence its length.)
    extra[o] = own_extra[o] + per co-user ``g`` of ``o`` that is not causally apart from it (``cz``, a
    :class:`Causal`: neither has ended, in every schedule, before the other begins), its work on the
    servers of ``o`` where its window ``[begin_lo, end_hi]`` (narrowed by ``pre`` and ``post``, as in
    :func:`kbfast.fast.bounds.interference`) overlaps ``o``'s.  As in :func:`kbfast.fast.bounds.interference`:
    not a serial class's own co-users on its wires and node workers, no controller work for a ``posted``
    op.  A posted read's commits outlive its end, so on a controller it stays a co-user of the flows that
    begin after it.  Each flow scans, per server, the flows sorted by window begin up to its own window's
    end: O(sum U^2) at worst, the overlapping pairs once the windows are narrow.

    Runs: on the wires and node workers a co-user pays the smaller of its per-server work and its run
    charge over everything the two share (``runs``, :func:`kbfast.fast.runs.run_coefficients`: once per run
    of servers they cross in the same first-in first-out order), where ``runs`` has the class done.  Every
    co-user's pieces there nest, and a single server nests in any run, so each co-user may take either
    (docs/fast_path.md §4, "Runs and the causal order").

    Crossing: a one-flit ``g`` delays a one-flit ``o`` at a first-in first-out server only if it arrived
    first and is still there when ``o`` arrives, so only along servers that both visit in the same order
    (docs/fast_path.md §4).  On the servers with an ``order`` (:func:`fifo_order`; all -1: none), such a
    pair is charged its heaviest common-order subsequence (:func:`_heaviest_common_order`), not every
    shared server."""
    n_ops = len(nbytes)
    extra = own_extra.copy()
    s_ptr, u_op, u_k, u_cls, u_b, u_e, by_begin = _server_flows(B, begin_lo, end_hi, pre, post)
    units = run_units(B, nbytes, flit)
    acc_wn = np.zeros(n_ops)         # per co-user of the current op: its wire and node work, per server
    acc_ct = np.zeros(n_ops)         # its controller work
    seen = np.zeros(n_ops, np.bool_)
    apart = np.zeros(n_ops, np.int64)         # per co-user of the current op: 0 unchecked, else 1 | the bits
    checked = np.empty(n_ops, np.int64)       # of its causal relation to the op; the co-users checked
    touched = np.empty(n_ops, np.int64)       # the current op's co-users, in the order met
    touched_cls = np.empty(n_ops, np.int64)   # and their classes
    # the current op's crossing charges, per (g, o's server, g's server): grown by doubling
    x_g = np.empty(64, np.int64)
    x_po = np.empty(64, np.int64)
    x_pg = np.empty(64, np.int64)
    x_w = np.empty(64)
    max_len = 1
    for c in range(len(B.cls_ptr) - 1):
        max_len = max(max_len, B.seq_ptr[c + 1] - B.seq_ptr[c])
    by_po = np.zeros(max_len + 1, np.int64)   # counting sort of the crossing charges by o's server
    head = np.full(n_ops, -1, np.int64)       # per co-user: its crossing charges, a list in (o's server) order
    tail = np.empty(n_ops, np.int64)
    for c in range(len(B.cls_ptr) - 1):
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            o = B.ops[i]
            ro = cz.rows[o]
            co, no = cz.comp[ro], cz.need[ro]
            n_t = 0
            n_x = 0
            n_chk = 0
            for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]):
                r = B.res[k]
                if s_ptr[r + 1] - s_ptr[r] < 2 or (posted[o] and B.kind[k] == 2):
                    continue
                mine = B.serial[c] and B.kind[k] <= 1
                b_o = begin_lo[o] + pre[k]
                e_o = max(end_hi[o] - post[k], b_o)
                for q in range(s_ptr[r], s_ptr[r + 1]):
                    b = by_begin[q]
                    if u_b[b] > e_o:
                        break                    # this one and the rest begin after o's window ends
                    g = u_op[b]
                    if g == o or u_e[b] < b_o:
                        continue
                    if mine and u_cls[b] == c:
                        continue
                    a = apart[g]
                    if a == 0:                   # the pair's causal relation, once per pair: the clock rows
                        a = 1                    # of the co-users are scattered in memory
                        n_chk += 1
                        checked[n_chk - 1] = g
                        rg = cz.rows[g]
                        if cz.chan[rg] >= 0 and cz.chan[rg] == cz.chan[ro] and cz.nth[rg] > cz.nth[ro] and \
                                u_cls[b] == c:
                            a |= BEHIND
                        if cz.comp[rg] >= 0 and cz.clock[ro, cz.comp[rg]] >= cz.need[rg]:
                            a |= ENDED_BEFORE
                        if co >= 0 and cz.clock[rg, co] >= no:
                            a |= BEGAN_AFTER
                        apart[g] = a
                    if a & BEHIND:
                        continue                 # a later message of o's channel: behind o at every server
                    if a & ENDED_BEFORE and not (posted[g] and B.kind[k] == 2):
                        continue                 # g ended before o began (a posted read's commits outlive it)
                    if a & BEGAN_AFTER:
                        continue                 # o ended before g began
                    w = B.base[u_k[b]] * _unit(B.kind[u_k[b]], nbytes[g], flit)
                    if order[k] >= 0 and order[u_k[b]] >= 0 and nbytes[o] <= flit and nbytes[g] <= flit:
                        if n_x == len(x_g):
                            x_g, x_po = np.concatenate((x_g, x_g)), np.concatenate((x_po, x_po))
                            x_pg, x_w = np.concatenate((x_pg, x_pg)), np.concatenate((x_w, x_w))
                        x_g[n_x], x_po[n_x], x_pg[n_x], x_w[n_x] = g, order[k], order[u_k[b]], w
                        n_x += 1
                        continue
                    if not seen[g]:
                        seen[g] = True
                        touched[n_t] = g
                        touched_cls[n_t] = u_cls[b]
                        n_t += 1
                    if B.kind[k] == 2:
                        acc_ct[g] += w
                    else:
                        acc_wn[g] += w
            x = 0.0
            for q in range(n_t):
                g = touched[q]
                wn = acc_wn[g]
                if wn > 0.0:
                    wn = min(wn, _pair_run_charge(runs, c, touched_cls[q], units[g]))
                x += wn + acc_ct[g]
                acc_wn[g] = 0.0
                acc_ct[g] = 0.0
                seen[g] = False
            for q in range(n_chk):
                apart[checked[q]] = 0
            if n_x > 0:
                x = _add_crossing_charges(x, x_g, x_po, x_pg, x_w, n_x, by_po, head, tail)
            extra[o] += x
    return extra
