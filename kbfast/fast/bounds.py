"""Upper bound on the delay contention can add to each flow (design §6, parity P2).

In a network of FIFO servers without backpressure, flows that share a server
with flow ``o`` while ``o`` is in flight can delay ``o``'s completion by at
most the work they bring to the shared servers (max-plus monotonicity: a delay
of the inputs by ``d`` delays the outputs by at most ``d``):

* a shared wire: their bytes / bw;
* a shared flit-aware node: their first-flit overhead;
* a shared HBM controller: commit time (+ switch penalty) per flit they commit,
  plus a switch penalty on each of ``o``'s own commits.

Only flows whose windows ``[begin_lower, end_upper]`` overlap count.  The
bound starts from "every sharer" (valid), then tightens: windows taken from a
valid bound contain the true in-flight intervals, so each pass stays valid.

Flows come in *classes*: ops with the same payload route and HBM controller use
the same resources, so the tables hold each class's resource entries once (at
1024 SIPs: 2.6 M entries for 33 k classes instead of 7.5 M for 94 k flows).

A *serial* class holds DMAs of one PE channel (one direction of one PE's DMA
engine, shared by its agents).  The channel takes its next DMA only once the
previous one's last flit has reached the controller (a read, ``accepted``) or
the whole round trip is over, so two of them are never on a wire or a node
worker at the same time: on those entries a serial class's own co-users bring
no work.  On the controller they still may (a posted read's commits outlive it).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

# Work of flow ``g`` on entry ``k``: ``base[k] * unit``, with unit (by ``kind[k]``) 0: its bytes
# (base = 1 / bw), 1: one (base = the node's overhead), 2: its flits (base = commit + switch penalty).
BoundTables = namedtuple("BoundTables", [
    "cls_ptr", "res", "kind", "base",    # per class, CSR: its entries (resource id, work kind, work base)
    "ops_ptr", "ops",                    # per class, CSR: its ops, ascending
    "users_ptr", "users",                # per resource, CSR: its (class, entry) pairs, in class order
    "serial"])                           # per class: its ops are serialized by one PE DMA channel


@njit(cache=True, inline="always")
def _unit(kind, nbytes, flit):  # pragma: no cover - jitted
    if kind == 0:
        return float(nbytes)
    if kind == 1:
        return 1.0
    return float((nbytes + flit - 1) // flit)


@njit(cache=True)
def interference(B, nbytes, flit, begin_lo, end_hi, use_windows, own_extra, posted):  # pragma: no cover - jitted
    """extra[o] = own_extra[o] + sum over o's resources used by 2+ flows of the work of overlapping co-users.

    A ``posted`` op (a PE read whose response leaves when its last flit is taken) waits for no PC commit:
    the controller entries (kind 2) add nothing to it.

    Co-user ``g`` overlaps ``o`` unless ``end_hi[g] < begin_lo[o]`` or ``end_hi[o] < begin_lo[g]``.  A
    resource whose windows all contain one instant (latest begin <= earliest end) overlaps entirely:
    its co-users bring ``total - own work``, and summed over a class's such entries that is
    ``A - (B0 * bytes + B1 + B2 * flits)`` per op, O(1) per op.  On the other (*windowed*) resources
    the overlapping work is ``W(begin_lo[g] <= end_hi[o]) - W(end_hi[g] < begin_lo[o])``: two prefix
    sums over the resource's flows sorted by begin and by end, O(U log U) for U flows on it, not the
    O(U^2) of comparing every pair.
    """
    n_cls = len(B.cls_ptr) - 1
    n_res = len(B.users_ptr) - 1
    # per class: its flows' work units by kind, and their latest begin and earliest end
    units = np.zeros((n_cls, 3))
    last_b = np.full(n_cls, -np.inf)
    first_e = np.full(n_cls, np.inf)
    for c in range(n_cls):
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            g = B.ops[i]
            units[c, 0] += nbytes[g]
            units[c, 1] += 1.0
            units[c, 2] += (nbytes[g] + flit - 1) // flit
            last_b[c] = max(last_b[c], begin_lo[g])
            first_e[c] = min(first_e[c], end_hi[g])
    # per resource: its number of flows, their total work, and whether windows matter
    n_on = np.zeros(n_res, np.int64)
    total = np.zeros(n_res)
    windowed = np.zeros(n_res, np.bool_)
    w_ptr = np.zeros(n_res + 1, np.int64)
    max_u = 0
    for r in range(n_res):
        lb = -np.inf
        fe = np.inf
        for j in range(B.users_ptr[r], B.users_ptr[r + 1]):
            c, k = B.users[j, 0], B.users[j, 1]
            n_on[r] += B.ops_ptr[c + 1] - B.ops_ptr[c]
            total[r] += B.base[k] * units[c, B.kind[k]]
            lb = max(lb, last_b[c])
            fe = min(fe, first_e[c])
        windowed[r] = use_windows and n_on[r] >= 2 and lb > fe
        w_ptr[r + 1] = w_ptr[r] + (n_on[r] if windowed[r] else 0)
        if windowed[r]:
            max_u = max(max_u, n_on[r])
    # windowed resources: begins and ends sorted, with the work prefix in each order
    tb = np.empty(max_u)
    te = np.empty(max_u)
    tw = np.empty(max_u)
    by_b = np.empty(w_ptr[n_res])
    by_e = np.empty(w_ptr[n_res])
    cum_b = np.empty(w_ptr[n_res] + n_res)
    cum_e = np.empty(w_ptr[n_res] + n_res)
    for r in range(n_res):
        if not windowed[r]:
            continue
        u = 0
        for j in range(B.users_ptr[r], B.users_ptr[r + 1]):
            c, k = B.users[j, 0], B.users[j, 1]
            for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
                g = B.ops[i]
                tw[u] = B.base[k] * _unit(B.kind[k], nbytes[g], flit)
                tb[u] = begin_lo[g]
                te[u] = end_hi[g]
                u += 1
        ob = np.argsort(tb[:u], kind="mergesort")
        oe = np.argsort(te[:u], kind="mergesort")
        lo = w_ptr[r]
        cum_b[lo + r] = 0.0
        cum_e[lo + r] = 0.0
        for i in range(u):
            by_b[lo + i] = tb[ob[i]]
            by_e[lo + i] = te[oe[i]]
            cum_b[lo + r + i + 1] = cum_b[lo + r + i] + tw[ob[i]]
            cum_e[lo + r + i + 1] = cum_e[lo + r + i] + tw[oe[i]]
    extra = own_extra.copy()
    max_len = 0
    for c in range(n_cls):
        max_len = max(max_len, B.cls_ptr[c + 1] - B.cls_ptr[c])
    win_k = np.empty(max_len, np.int64)
    for c in range(n_cls):
        # the class's entries on resources of 2+ flows: totals and bases of the window-free ones
        a = a_commit = b_bytes = b_one = b_flits = 0.0
        n_w = 0
        for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]):
            r = B.res[k]
            if n_on[r] < 2:
                continue
            if windowed[r]:
                win_k[n_w] = k
                n_w += 1
            else:
                a += total[r]
                if B.kind[k] == 0:
                    b_bytes += B.base[k]
                elif B.kind[k] == 1:
                    b_one += B.base[k]
                else:
                    b_flits += B.base[k]
                    a_commit += total[r]
        if B.serial[c]:
            # its own co-users overlapping each op, by window: bytes and counts sorted by begin and by end
            n_c = B.ops_ptr[c + 1] - B.ops_ptr[c]
            cb = np.empty(n_c)
            ce = np.empty(n_c)
            for i in range(n_c):
                cb[i] = begin_lo[B.ops[B.ops_ptr[c] + i]]
                ce[i] = end_hi[B.ops[B.ops_ptr[c] + i]]
            ob = np.argsort(cb, kind="mergesort")
            oe = np.argsort(ce, kind="mergesort")
            sb, se = cb[ob], ce[oe]
            pb = np.zeros((n_c + 1, 2))           # prefix of (bytes, count) in begin order
            pe = np.zeros((n_c + 1, 2))           # ... in end order
            for i in range(n_c):
                pb[i + 1, 0] = pb[i, 0] + nbytes[B.ops[B.ops_ptr[c] + ob[i]]]
                pb[i + 1, 1] = pb[i, 1] + 1.0
                pe[i + 1, 0] = pe[i, 0] + nbytes[B.ops[B.ops_ptr[c] + oe[i]]]
                pe[i + 1, 1] = pe[i, 1] + 1.0
            # the class's wire (0) and node (1) entries on resources of 2+ flows: bases, without / with windows
            base = np.zeros((2, 2))
            for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]):
                if n_on[B.res[k]] >= 2 and B.kind[k] <= 1:
                    base[int(windowed[B.res[k]]), B.kind[k]] += B.base[k]
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            o = B.ops[i]
            if posted[o]:
                x = max(a - a_commit - (b_bytes * nbytes[o] + b_one), 0.0)
            else:
                x = max(a - (b_bytes * nbytes[o] + b_one + b_flits * ((nbytes[o] + flit - 1) // flit)), 0.0)
            for q in range(n_w):
                k = win_k[q]
                r = B.res[k]
                if posted[o] and B.kind[k] == 2:
                    continue
                lo, hi = w_ptr[r], w_ptr[r + 1]
                started = np.searchsorted(by_b[lo:hi], end_hi[o], side="right")     # begin_lo[g] <= end_hi[o]
                ended = np.searchsorted(by_e[lo:hi], begin_lo[o], side="left")      # end_hi[g] < begin_lo[o]
                own = B.base[k] * _unit(B.kind[k], nbytes[o], flit)
                x += max(cum_b[lo + r + started] - cum_e[lo + r + ended] - own, 0.0)
            if B.serial[c]:
                # take back the wire and node work the class's own co-users were charged above: all of them
                # on entries without windows, the overlapping ones (the same test) on windowed entries
                s_ = np.searchsorted(sb, end_hi[o], side="right")
                e_ = np.searchsorted(se, begin_lo[o], side="left")
                co_bytes = max(pb[s_, 0] - pe[e_, 0] - nbytes[o], 0.0)
                co_count = max(pb[s_, 1] - pe[e_, 1] - 1.0, 0.0)
                back = base[0, 0] * (pb[n_c, 0] - nbytes[o]) + base[0, 1] * (n_c - 1) + \
                    base[1, 0] * co_bytes + base[1, 1] * co_count
                x = max(x - back, 0.0)
            extra[o] += x
    return extra
