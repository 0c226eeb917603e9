"""Upper bound on the delay contention can add to each flow (design §6, parity P2).

In a network of FIFO servers without backpressure, flows that share a server
with flow ``o`` while ``o`` is in flight can delay ``o``'s completion by at
most the work they bring to the shared servers (at each server, ``o``'s flits
leave no later than they would alone at their actual arrivals plus that work,
and ``o`` alone is a max-plus tandem: arrivals later by ``d``, departures later
by at most ``d``; docs/fast_path.md §4):

* a shared wire: their bytes / bw;
* a shared flit-aware node: their first-flit overhead;
* a shared HBM controller: commit time (+ switch penalty) per flit they commit,
  plus a switch penalty on each of ``o``'s own commits.

Only flows whose windows ``[begin_lower, end_upper]`` overlap count.  The
bound starts from "every sharer" (valid), then tightens: windows taken from a
valid bound contain the true in-flight intervals, so each pass stays valid.

Paid at every server, a co-user's train is charged once per server it shares; on a run of consecutive
shared servers it passes as one pipeline, so ``kbfast.fast.runs`` (``run_coefficients``, ``run_charges``) charges it
once per run instead (docs/fast_path.md §4), for the wires and node workers of the classes they can
afford; :func:`interference` keeps the rest.

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

from kbfast.fast.runs import count_at_most, count_below, stable_argsort_into

# Work of flow ``g`` on entry ``k``: ``base[k] * unit``, with unit (by ``kind[k]``) 0: its bytes
# (base = 1 / bw), 1: one (base = the node's overhead), 2: its flits (base = commit + switch penalty).
BoundTables = namedtuple("BoundTables", [
    "cls_ptr", "res", "kind", "base",    # per class, CSR: its entries (resource id, work kind, work base)
    "ops_ptr", "ops",                    # per class, CSR: its ops, ascending
    "users_ptr", "users",                # per resource, CSR: its (class, entry) pairs, in class order
    "serial",                            # per class: its ops are serialized by one PE DMA channel
    # per class, CSR: its route's servers in route order, for the runs of run_coefficients: a finite wire
    # (c = 1 / bw) or a flit-aware node worker (o = its overhead) by resource id; -1 where no run may pass
    # (a store-and-forward node); ``seq_solo``: a server charged per co-user, outside any run (the first
    # wire, where a PE's two virtual channels are interleaved by round robin, not served first in, first out)
    "seq_ptr", "seq_res", "seq_c", "seq_o", "seq_solo"])


@njit(cache=True, inline="always")
def _unit(kind, nbytes, flit):  # pragma: no cover - jitted
    if kind == 0:
        return float(nbytes)
    if kind == 1:
        return 1.0
    return float((nbytes + flit - 1) // flit)


@njit(cache=True)
def entry_servers(B):  # pragma: no cover - jitted
    """Per entry of ``B.res``: its server's position in ``B.seq_*`` (-1 for a controller).  A class's entries
    are its route's wires, then its node workers, each in route order (``_resource_entries``)."""
    at = np.full(len(B.res), -1, np.int64)
    for c in range(len(B.cls_ptr) - 1):
        k = B.cls_ptr[c]
        for w in range(2):
            for i in range(B.seq_ptr[c], B.seq_ptr[c + 1]):
                if B.seq_res[i] >= 0 and (B.seq_c[i] > 0.0) == (w == 0):
                    assert B.res[k] == B.seq_res[i] and B.kind[k] == w
                    at[k] = i
                    k += 1
    return at


@njit(cache=True)
def _tail_to_segment_end(B, lo, hi, n, flit, out, total):  # pragma: no cover - jitted
    """``out[k]`` = the time the last flit of an ``n``-byte flow alone takes from leaving server ``k``
    (positions ``lo .. hi-1`` of ``B.seq_*``) to leaving the last server of its segment (up to the next
    store-and-forward break): ``V(n-1, end) - V(n-1, k)`` in the lattice of docs/fast_path.md §1.1;
    ``total[k]`` = ``V(n-1, end)``, the whole segment's time alone, from the train's put to its last flit.
    ``V(n-1, k)`` is the closed form of §1.2 on the columns up to ``k``; with ``j <= b`` it is a running
    maximum, O(1) per column:

        V(i, k) = max_{j <= b <= k} (A_j + Z_b) + s * C(k),   A_j = (i - 2) F c_j + max_{a <= j} (R0(a) - F C(a-1)),
        Z_b = F C(b) - s C(b-1)   (i >= 2; i = 1: max_{a <= k} (R0(a) - s C(a-1)) + s C(k); i = 0: R0(k))

    with ``R0`` the first flit's prefix (``o`` or ``s0 c`` per column), ``C`` the prefix of ``c`` and
    ``s`` the last flit's bytes.  Props are left out: they only lengthen the tail."""
    n_flits = max(1, (n + flit - 1) // flit)
    i = n_flits - 1
    s0 = float(min(n, flit))
    s = float(n - i * flit)
    F = float(flit)
    start = lo
    while start < hi:
        if B.seq_res[start] < 0:
            start += 1
            continue
        end = start
        while end + 1 < hi and B.seq_res[end + 1] >= 0:
            end += 1
        r0 = 0.0
        c_prev = 0.0                          # C(k - 1)
        best_x = -np.inf                      # max_{a <= k} X(a)
        best_a = -np.inf                      # max_{j <= k} A_j
        m = -np.inf
        for k in range(start, end + 1):
            c = B.seq_c[k]
            r0 += B.seq_o[k] + c * s0
            c_k = c_prev + c
            if i == 0:
                v = r0
            elif i == 1:
                best_x = max(best_x, r0 - s * c_prev)
                v = best_x + s * c_k
            else:
                best_x = max(best_x, r0 - F * c_prev)
                best_a = max(best_a, (i - 2) * F * c + best_x)
                m = max(m, best_a + F * c_k - s * c_prev)
                v = m + s * c_k
            out[k] = v
            c_prev = c_k
        for k in range(start, end + 1):
            out[k] = out[end] - out[k]
            total[k] = v
        start = end + 1


@njit(cache=True)
def window_offsets(B, nbytes, flit, message):  # pragma: no cover - jitted
    """Where on its window a flow can be at each server of its route (docs/fast_path.md §4, "Windows per
    server"; one pass per class over its servers, hence its length).  A flow's first flit reaches its route's server ``i`` no earlier than ``pre`` after the flow
    begins: every server before ``i`` holds it for its node overhead or its wire time.  After the last flit
    leaves server ``i``, the flow alone needs at least ``post`` more to end: every later wire's time for the
    last flit, and when every flow of the class is one flit (head and tail alike), every later node's
    overhead.  Per class from its smallest first and last flits:

        pre_i  = sum_{j < i} (o_j + c_j * min s0),   post_i = sum_{j > i} (c_j * min sL + [one flit] o_j),

    or, where more, from the whole trains of the segments (:func:`_tail_to_segment_end`; a store-and-forward
    node puts the next segment's train only once the last flit has arrived), the least over the class's sizes:

        pre_i  = sum_{earlier segments} V_seg + sum_{j < i in i's segment} (o_j + c_j * s0),
        post_i = (the last flit's way from i to its segment's end) + sum_{later segments} V_seg.

    Returns ``(pre, post)`` per entry of ``B.res`` and ``(seq_pre, seq_post)`` per position of
    ``B.seq_res``.  Only classes of IPCQ messages (``message`` per op: one transaction along the route) are
    narrowed; the others keep zeros (a serial class's own co-users are taken back by whole windows, a host
    DMA moves in chunks), and so does the controller (a posted read's commits outlive its flow)."""
    n_cls = len(B.cls_ptr) - 1
    seq_pre = np.zeros(len(B.seq_res))
    seq_post = np.zeros(len(B.seq_res))
    pre = np.zeros(len(B.res))
    post = np.zeros(len(B.res))
    tail = np.empty(len(B.seq_res))
    total = np.empty(len(B.seq_res))
    at = entry_servers(B)
    for c in range(n_cls):
        if B.serial[c] or B.ops_ptr[c + 1] == B.ops_ptr[c]:
            continue
        narrow = True
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            narrow = narrow and message[B.ops[i]]
        if not narrow:
            continue
        s0 = np.inf
        s_last = np.inf
        single = True
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            n = nbytes[B.ops[i]]
            n_flits = max(1, (n + flit - 1) // flit)
            s0 = min(s0, float(min(n, flit)))
            s_last = min(s_last, float(n - (n_flits - 1) * flit))
            single = single and n_flits == 1
        lo, hi = B.seq_ptr[c], B.seq_ptr[c + 1]
        acc = 0.0
        for i in range(lo, hi):
            seq_pre[i] = acc
            acc += B.seq_o[i] + B.seq_c[i] * s0
        acc = 0.0
        for i in range(hi - 1, lo - 1, -1):
            seq_post[i] = acc
            acc += B.seq_c[i] * s_last + (B.seq_o[i] if single else 0.0)
        # from the segments' whole trains, the least over the class's sizes
        sizes = np.unique(nbytes[B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]])
        least_pre = np.full(hi - lo, np.inf)
        least_post = np.full(hi - lo, np.inf)
        for n in sizes:
            _tail_to_segment_end(B, lo, hi, n, flit, tail, total)
            s0_n = float(min(n, flit))
            before = 0.0                     # the whole trains of the segments before, then the head's way
            head = 0.0
            for i in range(lo, hi):
                if B.seq_res[i] < 0:
                    if i > lo and B.seq_res[i - 1] >= 0:
                        before += total[i - 1]
                    head = 0.0
                    continue
                least_pre[i - lo] = min(least_pre[i - lo], before + head)
                head += B.seq_o[i] + B.seq_c[i] * s0_n
            after = 0.0                      # the whole trains of the segments after
            for i in range(hi - 1, lo - 1, -1):
                if B.seq_res[i] < 0:
                    if i + 1 < hi and B.seq_res[i + 1] >= 0:
                        after += total[i + 1]
                    continue
                least_post[i - lo] = min(least_post[i - lo], tail[i] + after)
        for i in range(lo, hi):
            if B.seq_res[i] >= 0:
                seq_pre[i] = max(seq_pre[i], least_pre[i - lo])
                seq_post[i] = max(seq_post[i], least_post[i - lo])
        for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]):
            if at[k] >= 0:
                pre[k], post[k] = seq_pre[at[k]], seq_post[at[k]]
    return pre, post, seq_pre, seq_post


@njit(cache=True)
def _class_totals(B, nbytes, flit, begin_lo, end_hi):  # pragma: no cover - jitted
    """Per class of :func:`interference`: its flows' work units by kind (bytes, one, flits), their latest
    begin and their earliest end."""
    n_cls = len(B.cls_ptr) - 1
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
    return units, last_b, first_e


@njit(cache=True)
def _resource_totals(B, units, last_b, first_e, use_windows, pre, post):  # pragma: no cover - jitted
    """Per resource of :func:`interference`: its number of flows, their total work, whether windows matter
    (``windowed``: not all its windows contain one instant), and the CSR ``w_ptr`` of the windowed ones'
    flows (their largest count ``max_u``)."""
    n_res = len(B.users_ptr) - 1
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
            lb = max(lb, last_b[c] + pre[k])
            fe = min(fe, first_e[c] - post[k])
        windowed[r] = use_windows and n_on[r] >= 2 and lb > fe
        w_ptr[r + 1] = w_ptr[r] + (n_on[r] if windowed[r] else 0)
        if windowed[r]:
            max_u = max(max_u, n_on[r])
    return n_on, total, windowed, w_ptr, max_u


@njit(cache=True)
def _windowed_prefix(B, nbytes, flit, begin_lo, end_hi, pre, post, windowed, w_ptr, max_u):  # pragma: no cover
    """Per windowed resource of :func:`interference`: its flows' narrowed begins and ends sorted
    (``by_b``, ``by_e`` at ``w_ptr[r]``), with the work prefix in each order (``cum_b``, ``cum_e`` at
    ``w_ptr[r] + r``)."""
    n_res = len(B.users_ptr) - 1
    tb = np.empty(max_u)
    te = np.empty(max_u)
    tw = np.empty(max_u)
    by_b = np.empty(w_ptr[n_res])
    by_e = np.empty(w_ptr[n_res])
    cum_b = np.empty(w_ptr[n_res] + n_res)
    cum_e = np.empty(w_ptr[n_res] + n_res)
    ob = np.empty(max_u, np.int64)
    oe = np.empty(max_u, np.int64)
    for r in range(n_res):
        if not windowed[r]:
            continue
        u = 0
        for j in range(B.users_ptr[r], B.users_ptr[r + 1]):
            c, k = B.users[j, 0], B.users[j, 1]
            for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
                g = B.ops[i]
                tw[u] = B.base[k] * _unit(B.kind[k], nbytes[g], flit)
                tb[u] = begin_lo[g] + pre[k]
                te[u] = max(end_hi[g] - post[k], tb[u])
                u += 1
        stable_argsort_into(tb, u, ob)
        stable_argsort_into(te, u, oe)
        lo = w_ptr[r]
        cum_b[lo + r] = 0.0
        cum_e[lo + r] = 0.0
        for i in range(u):
            by_b[lo + i] = tb[ob[i]]
            by_e[lo + i] = te[oe[i]]
            cum_b[lo + r + i + 1] = cum_b[lo + r + i] + tw[ob[i]]
            cum_e[lo + r + i + 1] = cum_e[lo + r + i] + tw[oe[i]]
    return by_b, by_e, cum_b, cum_e


@njit(cache=True)
def _serial_prefix(B, c, nbytes, begin_lo, end_hi, n_on, windowed):  # pragma: no cover - jitted
    """For serial class ``c`` of :func:`interference`: its own co-users overlapping each op, by window:
    its ops' begins and ends sorted (``sb``, ``se``) with prefixes of (bytes, count) in each order
    (``pb``, ``pe``), and its wire (0) and node (1) entries' bases on resources of 2+ flows, without / with
    windows (``base``)."""
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
    base = np.zeros((2, 2))
    for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]):
        if n_on[B.res[k]] >= 2 and B.kind[k] <= 1:
            base[int(windowed[B.res[k]]), B.kind[k]] += B.base[k]
    return n_c, sb, se, pb, pe, base


@njit(cache=True)
def interference(B, nbytes, flit, begin_lo, end_hi, use_windows, own_extra, posted,
                 skip_wn, pre, post):  # pragma: no cover - jitted
    """extra[o] = own_extra[o] + sum over o's resources used by 2+ flows of the work of overlapping co-users.

    A class with ``skip_wn`` set is charged its controller entries only (its wires and node workers are
    ``kbfast.fast.runs.run_charges``'s); it still brings its work to every other class.

    A ``posted`` op (a PE read whose response leaves when its last flit is taken) waits for no PC commit:
    the controller entries (kind 2) add nothing to it.

    Co-user ``g`` overlaps ``o`` unless ``end_hi[g] < begin_lo[o]`` or ``end_hi[o] < begin_lo[g]``, on
    each entry ``k`` with its windows narrowed to the server: ``[begin_lo + pre[k], end_hi - post[k]]``
    (:func:`window_offsets`; zeros: the flows' whole windows; they must be zero on a serial class's
    entries, whose own co-users are taken back below by whole windows).  A
    resource whose windows all contain one instant (latest begin <= earliest end) overlaps entirely:
    its co-users bring ``total - own work``, and summed over a class's such entries that is
    ``A - (B0 * bytes + B1 + B2 * flits)`` per op, O(1) per op.  On the other (*windowed*) resources
    the overlapping work is ``W(begin_lo[g] <= end_hi[o]) - W(end_hi[g] < begin_lo[o])``: two prefix
    sums over the resource's flows sorted by begin and by end, O(U log U) for U flows on it, not the
    O(U^2) of comparing every pair.
    """
    n_cls = len(B.cls_ptr) - 1
    units, last_b, first_e = _class_totals(B, nbytes, flit, begin_lo, end_hi)
    n_on, total, windowed, w_ptr, max_u = _resource_totals(B, units, last_b, first_e, use_windows, pre, post)
    by_b, by_e, cum_b, cum_e = _windowed_prefix(B, nbytes, flit, begin_lo, end_hi, pre, post, windowed, w_ptr,
                                                max_u)
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
            if n_on[r] < 2 or (skip_wn[c] and B.kind[k] <= 1):
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
        serial = B.serial[c] and not skip_wn[c]      # the correction below is on wire and node entries only
        if serial:
            n_c, sb, se, pb, pe, base = _serial_prefix(B, c, nbytes, begin_lo, end_hi, n_on, windowed)
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
                b_o = begin_lo[o] + pre[k]
                started = count_at_most(by_b, lo, hi, max(end_hi[o] - post[k], b_o)) - lo
                ended = count_below(by_e, lo, hi, b_o) - lo
                own = B.base[k] * _unit(B.kind[k], nbytes[o], flit)
                x += max(cum_b[lo + r + started] - cum_e[lo + r + ended] - own, 0.0)
            if serial:
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


