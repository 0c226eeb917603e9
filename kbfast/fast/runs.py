"""The run bound: a co-user paid once per run of consecutive servers it shares with an op, not once per
server (docs/fast_path.md §4; the per-server bound is ``kbfast.fast.bounds``).

:func:`run_coefficients` finds, from the routes alone, each flow class's partner classes and the work per
unit of a partner's op on the runs the two share; :func:`run_charges` multiplies them by the units
(:func:`run_units`) of the co-users whose windows overlap each op.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

# The run bound's coefficients (run_coefficients): per class, CSR over its partner classes ``p_cls`` with the
# work per unit of each run_units column ``p_coef``, and ``p_span``: the first and last positions (in B.seq_*)
# of the servers the two share, on the class's route and on the partner's; ``done``: the class is charged by runs.
RunCoefs = namedtuple("RunCoefs", ["p_ptr", "p_cls", "p_coef", "p_span", "done"])


def no_runs(n_cls: int) -> RunCoefs:
    """Coefficients that charge nothing by runs: every one of ``n_cls`` classes keeps the per-server charge."""
    return RunCoefs(p_ptr=np.zeros(n_cls + 1, np.int64), p_cls=np.empty(0, np.int64), p_coef=np.empty((0, 4)),
                    p_span=np.empty((0, 4), np.int64), done=np.zeros(n_cls, np.bool_))


SMALL_SORT = 32     # up to this many keys, stable_argsort_into sorts by insertion, allocating nothing


@njit(cache=True)
def stable_argsort_into(key, n, out):  # pragma: no cover - jitted
    """``out[:n] = np.argsort(key[:n], kind="mergesort")`` for keys without NaN: every stable sort gives that
    order.  Up to ``SMALL_SORT`` keys by insertion, with no allocation: the bounds sort the windows of
    thousands of resources of a dozen flows each, where two ``np.argsort`` calls per resource took most of
    the time."""
    if n > SMALL_SORT:
        out[:n] = np.argsort(key[:n], kind="mergesort")
        return
    for i in range(n):
        v = key[i]
        j = i
        while j > 0 and key[out[j - 1]] > v:      # only a greater key moves: stable
            out[j] = out[j - 1]
            j -= 1
        out[j] = i


@njit(cache=True)
def stable_order(key):  # pragma: no cover - jitted
    """The stable ascending order of an int64 ``key`` (a class's partners by class; the co-users of an op in
    ``kbfast.fast.causal``): a bottom-up merge sort, which compiles in a fraction of the time of
    ``np.argsort`` and ``np.sort``."""
    n = len(key)
    order = np.arange(n)
    tmp = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if key[order[j]] < key[order[i]]:      # the left one first on a tie: stable
                    tmp[k] = order[j]
                    j += 1
                else:
                    tmp[k] = order[i]
                    i += 1
                k += 1
            while i < mid:
                tmp[k] = order[i]
                i += 1
                k += 1
            while j < hi:
                tmp[k] = order[j]
                j += 1
                k += 1
        order, tmp = tmp, order
        width *= 2
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
    max_partners = min(max_partners, n_cls)    # no class has more: the scratch below is sized by it
    done = np.zeros(n_cls, np.bool_)
    p_ptr = np.zeros(n_cls + 1, np.int64)
    p_cls = np.empty(max(16, n_cls), np.int64)           # grown by doubling
    p_coef = np.empty((max(16, n_cls), 4))
    p_span = np.empty((max(16, n_cls), 4), np.int64)
    su_ptr, su_cls, su_idx = _server_users(B)
    chain = _chain_lengths(B.seq_ptr, B.seq_res, B.seq_solo, su_ptr, su_cls)
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
    max_len = np.int64(0)   # not a literal 0: one compiled _nest_runs and _longest_first
    for c in range(n_cls):
        max_len = max(max_len, B.seq_ptr[c + 1] - B.seq_ptr[c])
    cap = max(1, max_len * (max_partners + 1))
    run_d = np.empty(cap * 4, np.int64)        # runs, then pieces: partner rank, first and last position
    run_a = np.empty(cap * 4, np.int64)
    run_b = np.empty(cap * 4, np.int64)
    side = max(max_len, 1)
    piece = np.full((side, side), -1, np.int64)   # per piece [a, b] accepted, its index among the distinct
    acc_a = np.empty(side * side, np.int64)      # the distinct pieces: first and last position,
    acc_b = np.empty(side * side, np.int64)
    cut_a = np.empty(side * side, np.int64)      # the distinct runs cut: first and last position
    cut_b = np.empty(side * side, np.int64)
    work = np.empty((side * side, 3))            # overheads, 1 / bw summed and largest 1 / bw
    for c in range(n_cls):
        p_ptr[c + 1] = p_ptr[c]
        n_p, n_run, over = _partners_and_runs(B, c, max_partners, su_ptr, su_cls, su_idx, chain, stamp, slot,
                                              last_i, last_j, cur, found, solo, span, run_d, run_a, run_b)
        if over:
            continue
        if n_p == 0:
            done[c] = True
            continue
        partners = _rank_partners(found, n_p, solo, coef, rank, run_d, n_run)
        if _nest_runs(B, B.seq_ptr[c], n_run, max_partners, max_len, coef, run_d, run_a, run_b, piece, acc_a,
                      acc_b, cut_a, cut_b, work):
            continue                           # out of room for pieces: this class keeps the per-server charge
        done[c] = True
        p_cls, p_coef, p_span = _store_partners(c, n_p, partners, coef, rank, span, p_ptr, p_cls, p_coef, p_span)
    return RunCoefs(p_ptr=p_ptr, p_cls=p_cls[:p_ptr[n_cls]].copy(), p_coef=p_coef[:p_ptr[n_cls]].copy(),
                    p_span=p_span[:p_ptr[n_cls]].copy(), done=done)


@njit(cache=True)
def _server_users(B):  # pragma: no cover - jitted
    """Per resource, the (class, sequence index) pairs of the servers on it (CSR ``su_ptr``; ``su_cls``,
    ``su_idx``): one pass over a class's servers then finds its partners and their runs together."""
    n_cls = len(B.cls_ptr) - 1
    n_res = len(B.users_ptr) - 1
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
    return su_ptr, su_cls, su_idx


@njit(cache=True)
def _chain_lengths(seq_ptr, seq_res, seq_solo, su_ptr, su_cls):  # pragma: no cover - jitted
    """Per position of ``B.seq_res``: how many servers from it on form a *chain*: every user of each server
    of the chain but the last goes on to the next one, and each next server has no other user.  A chain's
    users are distinct classes, none of its servers is solo, and one visit finds every match along it."""
    n_cls = len(seq_ptr) - 1
    n_res = len(su_ptr) - 1
    nxt = np.full(n_res, -2, np.int64)     # per resource: the one resource all its users go on to, or -1
    for x in range(n_cls):
        for i in range(seq_ptr[x], seq_ptr[x + 1]):
            r = seq_res[i]
            if r < 0 or nxt[r] == -1:
                continue
            to = -1
            if i + 1 < seq_ptr[x + 1] and not seq_solo[i] and not seq_solo[i + 1]:
                to = seq_res[i + 1]
            if to < 0 or to == r or (nxt[r] != -2 and nxt[r] != to):
                nxt[r] = -1
            else:
                nxt[r] = to
    for r in range(n_res):
        to = nxt[r]
        if to < 0:
            continue
        n = su_ptr[r + 1] - su_ptr[r]
        if su_ptr[to + 1] - su_ptr[to] != n:
            nxt[r] = -1                    # the next server has users of its own
            continue
        for u in range(su_ptr[r] + 1, su_ptr[r + 1]):
            if su_cls[u] == su_cls[u - 1]:
                nxt[r] = -1                # a class that passes twice
                break
    chain = np.ones(len(seq_res), np.int64)
    for x in range(n_cls):
        for i in range(seq_ptr[x + 1] - 2, seq_ptr[x] - 1, -1):
            r = seq_res[i]
            if r >= 0 and nxt[r] >= 0:
                chain[i] = chain[i + 1] + 1
    return chain


@njit(cache=True)
def _partners_and_runs(B, c, max_partners, su_ptr, su_cls, su_idx, chain, stamp, slot, last_i, last_j, cur, found,
                       solo, span, run_d, run_a, run_b):  # pragma: no cover - jitted
    """The classes sharing a wire or node worker with class ``c`` (``found``, in discovery order, with their
    solo servers' sums ``solo`` and shared spans ``span``) and the runs (``run_d`` partner slot, ``run_a``..
    ``run_b`` positions in c's sequence): a match at c's server i and the partner's server j extends its run
    when its last match was (i - 1, j - 1).  A chain of ``L`` servers (:func:`_chain_lengths`) is visited
    once: a match at its first server is a match at each of the next ``L - 1``.  Returns (partners, runs,
    over ``max_partners``)."""
    s_lo, s_hi = B.seq_ptr[c], B.seq_ptr[c + 1]
    alone = B.serial[c] or B.ops_ptr[c + 1] - B.ops_ptr[c] < 2     # no co-user in its own class
    n_p = 0
    n_run = 0
    i = s_lo
    while i < s_hi:
        r = B.seq_res[i]
        if r < 0:
            i += 1
            continue
        end = i + chain[i] - 1             # the chain's last server
        for u in range(su_ptr[r], su_ptr[r + 1]):
            d, j = su_cls[u], su_idx[u]
            if d == c and alone:
                continue
            if stamp[d] != c:
                if n_p == max_partners:
                    return n_p, n_run, True
                stamp[d] = c
                slot[d] = n_p
                found[n_p] = d
                solo[n_p] = 0.0
                span[n_p, 0], span[n_p, 1], span[n_p, 2], span[n_p, 3] = i, i, j, j
                last_i[d] = -2
                n_p += 1
            q = slot[d]
            span[q, 1] = end               # c's servers come in route order
            span[q, 2] = min(span[q, 2], j)
            span[q, 3] = max(span[q, 3], j + end - i)
            if B.seq_solo[i]:
                solo[q, 0] += B.seq_o[i]
                solo[q, 1] += B.seq_c[i]
                continue
            if last_i[d] == i - 1 and last_j[d] == j - 1:
                run_b[cur[d]] = end - s_lo
            else:
                run_d[n_run], run_a[n_run], run_b[n_run] = q, i - s_lo, end - s_lo
                cur[d] = n_run
                n_run += 1
            last_i[d], last_j[d] = end, j + end - i
        i = end + 1
    return n_p, n_run, False


@njit(cache=True)
def _rank_partners(found, n_p, solo, coef, rank, run_d, n_run):  # pragma: no cover - jitted
    """Partners in class order, whatever the discovery order: fills ``rank`` (slot -> rank), starts ``coef``
    (by rank) from the solo servers' sums, renames the runs' partners to ranks; returns the partners."""
    by_cls = stable_order(found[:n_p])
    for k in range(n_p):
        rank[by_cls[k]] = k
    coef[:n_p, :] = 0.0
    for q in range(n_p):
        coef[rank[q], 0] += solo[q, 0]
        coef[rank[q], 1] += solo[q, 1]
    for k in range(n_run):
        run_d[k] = rank[run_d[k]]
    return found[:n_p][by_cls]


@njit(cache=True)
def _longest_first(run_d, run_a, run_b, n_run, max_partners, max_len):  # pragma: no cover - jitted
    """The runs' order for :func:`_nest_runs`: longest first, then by partner rank, then by start (the runs
    come in order of start), ties in order of discovery.  Two stable counting sorts, by partner then by
    length: they take time in proportion to the runs, partners and route length."""
    count = np.zeros(max(max_partners, max_len) + 2, np.int64)
    by_d = np.empty(n_run, np.int64)
    for k in range(n_run):
        count[run_d[k] + 1] += 1
    for q in range(max_partners):
        count[q + 1] += count[q]
    for k in range(n_run):
        by_d[count[run_d[k]]] = k
        count[run_d[k]] += 1
    count[:] = 0
    order = np.empty(n_run, np.int64)
    for k in range(n_run):
        count[max_len - (run_b[k] - run_a[k]) + 1] += 1
    for x in range(max_len + 1):
        count[x + 1] += count[x]
    for k in by_d:
        x = max_len - (run_b[k] - run_a[k])
        order[count[x]] = k
        count[x] += 1
    return order


@njit(cache=True)
def _nest_runs(B, s_lo, n_run, max_partners, max_len, coef, run_d, run_a, run_b, piece, acc_a, acc_b, cut_a,
               cut_b, work):  # pragma: no cover - jitted
    """Cut crossing runs, longest first (ties: partner, then start), until the family nests, adding each
    accepted piece's work per unit to its partner's ``coef`` row.  A run is cut at the first accepted piece
    (in order of acceptance) that it crosses.  The partners of a class share most pieces, and a repeat
    crosses what its first acceptance crosses, so only the distinct pieces are scanned (``piece[a, b]``: an
    index, in order of first acceptance, into ``acc_a``, ``acc_b`` and ``work``, each piece's work per unit;
    -1 everywhere on entry and on return).  The accepted pieces nest, so a run already accepted is accepted
    again with no scan, and a run already cut is cut at the same place (``piece[a, b] = -2 - cut``).  Returns
    True when out of room for pieces (the class then keeps the per-server charge)."""
    order = _longest_first(run_d, run_a, run_b, n_run, max_partners, max_len)
    n_acc = 0                               # pieces accepted
    n_dist = 0                              # of which distinct
    n_cut = 0                               # distinct runs cut (cut_a, cut_b)
    top = n_run                             # work stack above the runs
    out = False
    for k in order:
        run_d[top], run_a[top], run_b[top] = run_d[k], run_a[k], run_b[k]
        top += 1
        while top > n_run:
            if top + 2 > len(run_d) or n_acc == len(run_d):
                out = True
                break
            top -= 1
            q, a, b = run_d[top], run_a[top], run_b[top]
            d = piece[a, b]
            cut = -1
            if d <= -2:
                cut = -2 - d             # cut before: at the same place again
            elif d < 0:                  # seen for the first time
                for t in range(n_dist):
                    x, y = acc_a[t], acc_b[t]
                    if x < a <= y < b:
                        cut = y          # [a, y] nests in [x, y]; [y + 1, b] goes on
                        break
                    if a < x <= b < y:
                        cut = x - 1      # [x, b] nests in [x, y]; [a, x - 1] goes on
                        break
                if cut >= 0:
                    piece[a, b] = -2 - cut
                    cut_a[n_cut], cut_b[n_cut] = a, b
                    n_cut += 1
            if cut >= 0:
                run_d[top], run_a[top], run_b[top] = q, a, cut
                run_d[top + 1], run_a[top + 1], run_b[top + 1] = q, cut + 1, b
                top += 2
                continue
            n_acc += 1
            if d < 0:                       # a new piece: its work per unit
                d = piece[a, b] = n_dist
                acc_a[d], acc_b[d] = a, b
                ovh = 0.0
                csum = 0.0
                cmax = 0.0
                for i in range(s_lo + a, s_lo + b + 1):
                    ovh += B.seq_o[i]
                    csum += B.seq_c[i]
                    cmax = max(cmax, B.seq_c[i])
                work[d, 0], work[d, 1], work[d, 2] = ovh, csum, cmax
                n_dist += 1
            coef[q, 0] += work[d, 0]
            coef[q, 2] += work[d, 1]
            coef[q, 3] += work[d, 2]
        if out:
            break
    for t in range(n_dist):
        piece[acc_a[t], acc_b[t]] = -1
    for t in range(n_cut):
        piece[cut_a[t], cut_b[t]] = -1
    return out


@njit(cache=True)
def _store_partners(c, n_p, partners, coef, rank, span, p_ptr, p_cls, p_coef, p_span):  # pragma: no cover
    """Append class ``c``'s partners, their coefficients and spans (by rank) to the CSR outputs, growing them
    by doubling; returns the (possibly new) ``p_cls, p_coef, p_span``."""
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
    for q in range(n_p):                 # element by element: row views cost more than the copy
        p_cls[m + q] = partners[q]
        for k in range(4):
            p_coef[m + q, k] = coef[q, k]
            p_span[m + rank[q], k] = span[q, k]
    p_ptr[c + 1] = m + n_p
    return p_cls, p_coef, p_span


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


@njit(cache=True, inline="always")
def count_at_most(a, lo, hi, x):  # pragma: no cover - jitted
    """``lo + np.searchsorted(a[lo:hi], x, side="right")`` for sorted ``a[lo:hi]``: the end of the elements
    ``<= x``, found by bisection on the indices (a slice per search, in the loops over ops and partners, paid
    reference counting: a third of :func:`run_charges`' time on a four-SIP decode layer)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True, inline="always")
def count_below(a, lo, hi, x):  # pragma: no cover - jitted
    """``lo + np.searchsorted(a[lo:hi], x, side="left")`` for sorted ``a[lo:hi]``: the end of the elements
    ``< x`` (:func:`count_at_most`)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


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
                b_row = d + count_at_most(by_b, lo, hi, e_o - pre_d)      # begin[g] <= end[o]
                e_row = d + count_below(by_e, lo, hi, b_o + post_d)       # end[g] < begin[o]
                mine = d == c and begin_lo[o] + pre_d <= e_o and end_hi[o] - post_d >= b_o     # o overlaps itself
                for u in range(4):
                    w = cum_b[b_row, u] - cum_e[e_row, u] - (units[o, u] if mine else 0.0)
                    x += R.p_coef[j, u] * max(w, 0.0)
            extra[o] = x
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
    widest = 0
    for c in range(n_cls):
        widest = max(widest, B.ops_ptr[c + 1] - B.ops_ptr[c])
    kb, ke = np.empty(widest), np.empty(widest)
    ob, oe = np.empty(widest, np.int64), np.empty(widest, np.int64)
    for c in range(n_cls):
        lo, hi = B.ops_ptr[c], B.ops_ptr[c + 1]
        ops = B.ops[lo:hi]
        for i in range(hi - lo):
            kb[i] = begin_lo[ops[i]]
            ke[i] = end_hi[ops[i]]
        stable_argsort_into(kb, hi - lo, ob)
        stable_argsort_into(ke, hi - lo, oe)
        for i in range(hi - lo):
            by_b[lo + i] = begin_lo[ops[ob[i]]]
            by_e[lo + i] = end_hi[ops[oe[i]]]
            for j in range(m):
                cum_b[lo + c + i + 1, j] = cum_b[lo + c + i, j] + units[ops[ob[i]], j]
                cum_e[lo + c + i + 1, j] = cum_e[lo + c + i, j] + units[ops[oe[i]], j]
    return by_b, by_e, cum_b, cum_e
