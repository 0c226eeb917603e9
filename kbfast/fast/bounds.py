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
shared servers it passes as one pipeline, so :func:`run_coefficients` and :func:`run_charges` charge it
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

# The run bound's coefficients (run_coefficients): per class, CSR over its partner classes ``p_cls`` with the
# work per unit of each run_units column ``p_coef``, and ``p_span``: the first and last positions (in B.seq_*)
# of the servers the two share, on the class's route and on the partner's; ``done``: the class is charged by runs.
RunCoefs = namedtuple("RunCoefs", ["p_ptr", "p_cls", "p_coef", "p_span", "done"])


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
    server").  A flow's first flit reaches its route's server ``i`` no earlier than ``pre`` after the flow
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
def interference(B, nbytes, flit, begin_lo, end_hi, use_windows, own_extra, posted,
                 skip_wn, pre, post):  # pragma: no cover - jitted
    """extra[o] = own_extra[o] + sum over o's resources used by 2+ flows of the work of overlapping co-users.

    A class with ``skip_wn`` set is charged its controller entries only (its wires and node workers are
    :func:`run_charges`'s); it still brings its work to every other class.

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
            lb = max(lb, last_b[c] + pre[k])
            fe = min(fe, first_e[c] - post[k])
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
                tb[u] = begin_lo[g] + pre[k]
                te[u] = max(end_hi[g] - post[k], tb[u])
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
                b_o = begin_lo[o] + pre[k]
                started = np.searchsorted(by_b[lo:hi], max(end_hi[o] - post[k], b_o), side="right")
                ended = np.searchsorted(by_e[lo:hi], b_o, side="left")
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


@njit(cache=True)
def _class_windows(B, units, begin_lo, end_hi):  # pragma: no cover - jitted
    """Per class, its ops' windows sorted by begin and by end, with prefix sums of their ``units`` columns in
    each order (``units[op]``: 1, bytes, first-flit bytes, the rest): row ``B.ops_ptr[c] + c + i`` of the
    prefix holds the sum over the first ``i`` ops of class ``c``."""
    n_cls = len(B.ops_ptr) - 1
    n = len(B.ops)
    m = units.shape[1]
    by_b = np.empty(n)
    by_e = np.empty(n)
    cum_b = np.zeros((n + n_cls, m))
    cum_e = np.zeros((n + n_cls, m))
    for c in range(n_cls):
        lo, hi = B.ops_ptr[c], B.ops_ptr[c + 1]
        ops = B.ops[lo:hi]
        ob = np.argsort(begin_lo[ops], kind="mergesort")
        oe = np.argsort(end_hi[ops], kind="mergesort")
        for i in range(hi - lo):
            by_b[lo + i] = begin_lo[ops[ob[i]]]
            by_e[lo + i] = end_hi[ops[oe[i]]]
            for j in range(m):
                cum_b[lo + c + i + 1, j] = cum_b[lo + c + i, j] + units[ops[ob[i]], j]
                cum_e[lo + c + i + 1, j] = cum_e[lo + c + i, j] + units[ops[oe[i]], j]
    return by_b, by_e, cum_b, cum_e


@njit(cache=True)
def _order(key):  # pragma: no cover - jitted
    """The stable ascending order of a short int64 ``key`` (insertion sort: a class's partners and runs
    are few, and it compiles in a fraction of the time of ``np.argsort``)."""
    order = np.arange(len(key))
    for i in range(1, len(key)):
        k = order[i]
        j = i - 1
        while j >= 0 and key[order[j]] > key[k]:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = k
    return order


@njit(cache=True)
def run_coefficients(B, max_partners):  # pragma: no cover - jitted
    """The run bound's charges per unit of a co-user, from the routes alone (docs/fast_path.md §4): each
    co-user paid once per *run* of consecutive servers it shares with an op (pay bursts only once).
    Returns :data:`RunCoefs`: per class its partner classes and, per partner, the work per unit of each
    column of :func:`run_units`; ``done[c]`` is False for a class with more than ``max_partners`` partners
    (or too many pieces), whose ops keep :func:`interference`'s per-server charge.

    Flow ``g`` (``N`` bytes, first flit ``s0 = min(N, F)``) crossing a run ``R`` of servers ahead of op
    ``o``'s flits, in the same first-in first-out order at every server of ``R`` (they take the same
    servers one after the other), can add at most the longest path of its own flit x server lattice over
    ``R``: each server once at its largest cell and each later flit once at its slowest server,

        V_g(R) = sum_{nodes in R} o_v + s0 * sum_{wires in R} c_k + (N - s0) * max_{wires in R} c_k,

    against ``N * sum c_k + sum o_v`` per server.  Runs of different co-users that cross each other (neither
    contains the other) are cut at the crossing, longest first, until they nest: a co-user then pays once
    per piece.  A solo server (``B.seq_solo``) charges ``N * c`` per co-user.  A serial class's own ops
    bring it nothing (see the module docstring).
    """
    n_cls = len(B.cls_ptr) - 1
    n_res = len(B.users_ptr) - 1
    done = np.zeros(n_cls, np.bool_)
    p_ptr = np.zeros(n_cls + 1, np.int64)
    p_cls = np.empty(max(16, n_cls), np.int64)           # grown by doubling
    p_coef = np.empty((max(16, n_cls), 4))
    p_span = np.empty((max(16, n_cls), 4), np.int64)
    # per resource, the (class, sequence index) pairs of the servers on it: one pass over a class's servers
    # finds its partners and their runs together
    su_ptr = np.zeros(n_res + 1, np.int64)
    for i in range(len(B.seq_res)):
        if B.seq_res[i] >= 0:
            su_ptr[B.seq_res[i] + 1] += 1
    for r in range(n_res):
        su_ptr[r + 1] += su_ptr[r]
    fill = su_ptr[:-1].copy()
    su_cls = np.empty(su_ptr[n_res], np.int64)
    su_idx = np.empty(su_ptr[n_res], np.int64)
    for x in range(n_cls):
        for i in range(B.seq_ptr[x], B.seq_ptr[x + 1]):
            r = B.seq_res[i]
            if r >= 0:
                su_cls[fill[r]], su_idx[fill[r]] = x, i
                fill[r] += 1
    stamp = np.full(n_cls, -1, np.int64)
    slot = np.zeros(n_cls, np.int64)           # a partner's slot in discovery order
    last_i = np.zeros(n_cls, np.int64)         # the partner's last matched server: index in c's sequence,
    last_j = np.zeros(n_cls, np.int64)         # in its own, and the run it extends
    cur = np.zeros(n_cls, np.int64)
    coef = np.zeros((max_partners, 4))         # per partner (by rank): the work per unit of each column
    found = np.empty(max_partners, np.int64)   # partners in discovery order
    rank = np.empty(max_partners, np.int64)    # discovery slot -> rank in class order
    solo = np.zeros((max_partners, 2))         # per slot: solo servers' overhead and 1 / bw sums
    span = np.zeros((max_partners, 4), np.int64)   # per slot: first and last shared server, on c's and on d's
    max_len = 0
    for c in range(n_cls):
        max_len = max(max_len, B.seq_ptr[c + 1] - B.seq_ptr[c])
    cap = max(1, max_len * (max_partners + 1))
    run_d = np.empty(cap * 4, np.int64)        # runs, then pieces: partner rank, first and last position
    run_a = np.empty(cap * 4, np.int64)
    run_b = np.empty(cap * 4, np.int64)
    acc_a = np.empty(cap * 4, np.int64)
    acc_b = np.empty(cap * 4, np.int64)
    for c in range(n_cls):
        p_ptr[c + 1] = p_ptr[c]
        s_lo, s_hi = B.seq_ptr[c], B.seq_ptr[c + 1]
        alone = B.serial[c] or B.ops_ptr[c + 1] - B.ops_ptr[c] < 2     # no co-user in its own class
        # the classes sharing a wire or node worker with c, and the runs: a match at c's server i and the
        # partner's server j extends its run when its last match was (i - 1, j - 1)
        n_p = 0
        n_run = 0
        over = False
        for i in range(s_lo, s_hi):
            r = B.seq_res[i]
            if r < 0:
                continue
            for u in range(su_ptr[r], su_ptr[r + 1]):
                d, j = su_cls[u], su_idx[u]
                if d == c and alone:
                    continue
                if stamp[d] != c:
                    if n_p == max_partners:
                        over = True
                        break
                    stamp[d] = c
                    slot[d] = n_p
                    found[n_p] = d
                    solo[n_p] = 0.0
                    span[n_p, 0], span[n_p, 1], span[n_p, 2], span[n_p, 3] = i, i, j, j
                    last_i[d] = -2
                    n_p += 1
                q = slot[d]
                span[q, 1] = i                 # c's servers come in route order
                span[q, 2] = min(span[q, 2], j)
                span[q, 3] = max(span[q, 3], j)
                if B.seq_solo[i]:
                    solo[q, 0] += B.seq_o[i]
                    solo[q, 1] += B.seq_c[i]
                    continue
                if last_i[d] == i - 1 and last_j[d] == j - 1:
                    run_b[cur[d]] = i - s_lo
                else:
                    run_d[n_run], run_a[n_run], run_b[n_run] = q, i - s_lo, i - s_lo
                    cur[d] = n_run
                    n_run += 1
                last_i[d], last_j[d] = i, j
            if over:
                break
        if over:
            continue
        if n_p == 0:
            done[c] = True
            continue
        # partners in class order, whatever the discovery order
        by_cls = _order(found[:n_p])
        for k in range(n_p):
            rank[by_cls[k]] = k
        coef[:n_p, :] = 0.0
        for q in range(n_p):
            coef[rank[q], 0] += solo[q, 0]
            coef[rank[q], 1] += solo[q, 1]
        for k in range(n_run):
            run_d[k] = rank[run_d[k]]
        partners = found[:n_p][by_cls]
        # cut crossing runs, longest first (ties: partner, then start), until the family nests
        key = np.empty(n_run, np.int64)
        for k in range(n_run):
            key[k] = ((-(run_b[k] - run_a[k])) * (max_partners + 2) + run_d[k]) * (max_len + 1) + run_a[k]
        order = _order(key)
        n_acc = 0
        top = n_run                             # work stack above the runs
        full = False                            # out of room for pieces: this class keeps the per-server charge
        for k in order:
            if full:
                break
            run_d[top], run_a[top], run_b[top] = run_d[k], run_a[k], run_b[k]
            top += 1
            while top > n_run:
                if top + 2 > len(run_d) or n_acc == len(acc_a):
                    full = True
                    break
                top -= 1
                q, a, b = run_d[top], run_a[top], run_b[top]
                cut = -1
                for t in range(n_acc):
                    x, y = acc_a[t], acc_b[t]
                    if x < a <= y < b:
                        cut = y              # [a, y] nests in [x, y]; [y + 1, b] goes on
                        break
                    if a < x <= b < y:
                        cut = x - 1          # [x, b] nests in [x, y]; [a, x - 1] goes on
                        break
                if cut >= 0:
                    run_d[top], run_a[top], run_b[top] = q, a, cut
                    run_d[top + 1], run_a[top + 1], run_b[top + 1] = q, cut + 1, b
                    top += 2
                    continue
                acc_a[n_acc], acc_b[n_acc] = a, b
                n_acc += 1
                ovh = 0.0
                csum = 0.0
                cmax = 0.0
                for i in range(s_lo + a, s_lo + b + 1):
                    ovh += B.seq_o[i]
                    csum += B.seq_c[i]
                    cmax = max(cmax, B.seq_c[i])
                coef[q, 0] += ovh
                coef[q, 2] += csum
                coef[q, 3] += cmax
        if full:
            continue
        done[c] = True
        m = p_ptr[c]
        if m + n_p > len(p_cls):
            grow = max(2 * len(p_cls), m + n_p)
            p_cls2 = np.empty(grow, np.int64)
            p_coef2 = np.empty((grow, 4))
            p_span2 = np.empty((grow, 4), np.int64)
            p_cls2[:m] = p_cls[:m]
            p_coef2[:m] = p_coef[:m]
            p_span2[:m] = p_span[:m]
            p_cls, p_coef, p_span = p_cls2, p_coef2, p_span2
        p_cls[m:m + n_p] = partners[:n_p]
        p_coef[m:m + n_p] = coef[:n_p]
        for q in range(n_p):
            p_span[m + rank[q]] = span[q]
        p_ptr[c + 1] = m + n_p
    return RunCoefs(p_ptr=p_ptr, p_cls=p_cls[:p_ptr[n_cls]].copy(), p_coef=p_coef[:p_ptr[n_cls]].copy(),
                    p_span=p_span[:p_ptr[n_cls]].copy(), done=done)


@njit(cache=True)
def run_units(B, nbytes, flit):  # pragma: no cover - jitted
    """Per op, the units the run bound's coefficients multiply: 1, its bytes, its first flit's bytes
    ``s0 = min(N, F)`` and the bytes after it ``N - s0``."""
    units = np.zeros((len(nbytes), 4))
    for i in range(len(B.ops)):
        g = B.ops[i]
        s0 = min(nbytes[g], flit)
        units[g, 0] = 1.0
        units[g, 1] = nbytes[g]
        units[g, 2] = s0
        units[g, 3] = nbytes[g] - s0
    return units


@njit(cache=True)
def run_charges_all(B, R, nbytes, flit):  # pragma: no cover - jitted
    """:func:`run_charges` without windows: every co-user counts (the batched sweep's first pass)."""
    n_cls = len(B.cls_ptr) - 1
    extra = np.zeros(len(nbytes))
    if not np.any(R.done):
        return extra
    units = run_units(B, nbytes, flit)
    total = np.zeros((n_cls, 4))               # per class, the total of its ops' units
    for c in range(n_cls):
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            total[c] += units[B.ops[i]]
    for c in range(n_cls):
        if not R.done[c]:
            continue
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            o = B.ops[i]
            x = 0.0
            for j in range(R.p_ptr[c], R.p_ptr[c + 1]):
                d = R.p_cls[j]
                for u in range(4):
                    w = total[d, u] - (units[o, u] if d == c else 0.0)     # o is no co-user of its own
                    x += R.p_coef[j, u] * max(w, 0.0)
            extra[o] = x
    return extra


@njit(cache=True)
def run_charges(B, R, nbytes, flit, begin_lo, end_hi, use_windows, seq_pre, seq_post):  # pragma: no cover - jitted
    """Per op of a class that ``R`` (:func:`run_coefficients`) has ``done``: the work its overlapping
    co-users bring to its wires and node workers, paid once per run; 0 for the other ops.  Co-user ``g``
    overlaps op ``o`` unless ``end_hi[g] < begin_lo[o]`` or ``end_hi[o] < begin_lo[g]`` (every co-user
    without ``use_windows``: :func:`run_charges_all`), with both windows narrowed to the servers the two
    share (``R.p_span``): from ``seq_pre`` at the first to ``seq_post`` at the last (:func:`window_offsets`).
    A partner's shift is one constant for all its ops, so its windows stay sorted; it is capped at the
    partner's shortest window, so that no co-user's window turns empty (the prefix sums need ``begin <= end``)."""
    if not use_windows:
        return run_charges_all(B, R, nbytes, flit)
    n_cls = len(B.cls_ptr) - 1
    extra = np.zeros(len(nbytes))
    if not np.any(R.done):
        return extra
    units = run_units(B, nbytes, flit)
    by_b, by_e, cum_b, cum_e = _class_windows(B, units, begin_lo, end_hi)
    shortest = np.full(n_cls, np.inf)
    for c in range(n_cls):
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            g = B.ops[i]
            shortest[c] = min(shortest[c], end_hi[g] - begin_lo[g])
    for c in range(n_cls):
        if not R.done[c]:
            continue
        for i in range(B.ops_ptr[c], B.ops_ptr[c + 1]):
            o = B.ops[i]
            x = 0.0
            for j in range(R.p_ptr[c], R.p_ptr[c + 1]):
                d = R.p_cls[j]
                b_o = begin_lo[o] + seq_pre[R.p_span[j, 0]]
                e_o = max(end_hi[o] - seq_post[R.p_span[j, 1]], b_o)
                room = max(0.999999 * shortest[d], 0.0)
                pre_d = min(seq_pre[R.p_span[j, 2]], room)
                post_d = min(seq_post[R.p_span[j, 3]], room - pre_d)
                lo, hi = B.ops_ptr[d], B.ops_ptr[d + 1]
                b_row = lo + d + np.searchsorted(by_b[lo:hi], e_o - pre_d, side="right")   # begin[g] <= end[o]
                e_row = lo + d + np.searchsorted(by_e[lo:hi], b_o + post_d, side="left")   # end[g] < begin[o]
                mine = d == c and begin_lo[o] + pre_d <= e_o and end_hi[o] - post_d >= b_o     # o overlaps itself
                for u in range(4):
                    w = cum_b[b_row, u] - cum_e[e_row, u] - (units[o, u] if mine else 0.0)
                    x += R.p_coef[j, u] * max(w, 0.0)
            extra[o] = x
    return extra
