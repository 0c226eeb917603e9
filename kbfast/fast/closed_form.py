"""Closed-form completion time of one isolated transfer (design §6; derivation in docs/fast_path.md).

A transfer is a train of ``n`` flits (``F`` bytes each, the last ``s_L``) put at
``T0`` on the first edge of a route.  Between store-and-forward nodes the route
is a tandem of FIFO servers, in order: wire, node, wire, ..., wire
(+ the HBM controller's worker when the segment ends there).  Wire ``k``
serves flit ``i`` in ``s_i * c_k`` (``c_k = 1/bw``); a flit-aware node serves
flit 0 in its overhead ``o_k`` and later flits in 0.  Propagation is a pure
delay, so it adds ``sum p`` to every flit.  The exit time of flit ``i`` is
``T0 + sum p + V_i`` with ``V_i`` the max-plus longest lattice path to
``(i, K-1)``.  With row 0 special (``sigma0_k = s_0 c_k`` or ``o_k``), rows
``1..i-1`` full and row ``i`` of size ``s``::

    V_0 = R0(K-1)
    V_1 = max_a  R0(a) + s (Ctot - C(a-1))
    V_i = max_j  (i-2) F c_j + PX(j) + SY_s(j)                  (i >= 2)
    X(a) = R0(a) - F C(a-1),  PX(j) = max_{a<=j} X(a)
    Y_s(b) = F C(b) + s (Ctot - C(b-1)),  SY_s(j) = max_{b>=j} Y_s(b)

with prefix sums ``R0`` of ``sigma0`` and ``C`` of ``c``: O(K) per query.

At the HBM controller flit ``i`` commits to PC ``(pc0 + i) mod n_pcs`` at
``max(S_i, pc_avail) + commit``.  For one PC the last finish is
``max_t S_{i_t} + commit (N - t)``; ``S_i`` is convex in ``i`` on ``2..n-2``
(a max of affine functions), so only the class's flits at ``i in {0, 1, n-1}``
and the two ends of its range inside ``2..n-2`` need evaluating: O(n_pcs K).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kbfast.sim.fabric import bottleneck, ctrl_latency, pc_of

# transfer kinds: a PE DMA (write, or read under hbm.read_response: committed), host write, host read,
# a PE read under hbm.read_response: accepted (finalized when the controller takes its last flit)
PE_REQ, H2D, D2H, PE_READ = 0, 1, 2, 3

# The closed forms below allocate nothing, so they run without NRT (``_nrt=False``): no atomic
# reference counting on their many array arguments (a third of a short route's time in a batch).


MEMO_SLOTS = 4   # prepared segments kept: a route's first three store-and-forward segments, and its last
RESPONSE = MEMO_SLOTS   # the slot after them: the last response's route and latency (:func:`_response`)
CUTS = MEMO_SLOTS + 1   # then the last route's store-and-forward cuts (:func:`_saf_cuts`)


@njit(cache=True)
def new_buf(max_route):  # pragma: no cover - jitted
    """Scratch of :func:`_prepare` for routes of up to ``max_route`` edges: one set of rows per memo slot,
    the response memo's slot and the cuts memo's slot; memos cleared."""
    buf = np.empty((MEMO_SLOTS + 2, 10, max(2 * max_route + 2, 10)))
    reset_buf(buf)
    return buf


@njit(cache=True, _nrt=False)
def reset_buf(buf):  # pragma: no cover - jitted
    """Clear :func:`new_buf`'s scratch and memos."""
    buf[:] = 0.0
    buf[:, 9, 0] = -1.0
    buf[RESPONSE, 0, 0] = -1.0
    buf[CUTS, 0, 0] = -1.0


@njit(cache=True, _nrt=False)
def _prepare(edges, lo, hi, with_terminal, e_dst, e_c, e_prop, n_ovh, s0, F, sL, n, buf, memo):  # pragma: no cover
    """Fill the column arrays of segment edges[lo:hi] for a train of ``n`` flits, the last ``sL`` bytes;
    return (K, sum_prop, Ctot).

    ``buf`` (one memo slot of :func:`new_buf`) rows: 0 sigma0, 1 c, 2 R0, 3 C, 4 PX, 5 SY_F,
    7/8 the full-row lines (slope F c, best intercept PX + SY_F per distinct slope; their count in
    buf[0, K]), 9 the memo, and in it V_1 of a full flit (buf[9, 9]) and V_{n-1} (buf[9, 8], :func:`_last_v`).
    Only V_{n-1} depends on the train's length: with ``memo >= 0`` (a caller's name for the
    attribute tables, unchanged while it uses that name) a call on the same segment, first-flit
    size and tables as the slot's previous call recomputes only V_{n-1}.
    """
    if (memo >= 0 and buf[9, 0] == memo and buf[9, 1] == lo and buf[9, 2] == hi and buf[9, 3] == with_terminal
            and buf[9, 4] == s0):
        K = int(buf[9, 5])
        ctot = buf[9, 7]
        buf[9, 8] = _last_v(K, ctot, F, sL, n, buf)
        return K, buf[9, 6], ctot
    K = np.int64(0)
    sum_p = 0.0
    for k in range(lo, hi):
        e = edges[k]
        buf[0, K] = s0 * e_c[e]
        buf[1, K] = e_c[e]
        K += 1
        sum_p += e_prop[e]
        if k < hi - 1 or with_terminal:
            buf[0, K] = n_ovh[e_dst[e]]
            buf[1, K] = 0.0
            K += 1
    r0 = 0.0
    c = 0.0
    for k in range(K):
        r0 += buf[0, k]
        c += buf[1, k]
        buf[2, k] = r0
        buf[3, k] = c
    ctot = c
    best = -np.inf
    for a in range(K):
        c_prev = buf[3, a - 1] if a > 0 else 0.0
        x = buf[2, a] - F * c_prev
        best = max(best, x)
        buf[4, a] = best
    best_f = -np.inf
    for b in range(K - 1, -1, -1):
        c_prev = buf[3, b - 1] if b > 0 else 0.0
        best_f = max(best_f, F * buf[3, b] + F * (ctot - c_prev))
        buf[5, b] = best_f
    # V_i for full rows (2 <= i <= n-2) is a max of lines in i: keep the best line per slope.
    n_lines = 0
    for j in range(K):
        slope = F * buf[1, j]
        icept = buf[4, j] + buf[5, j]
        found = False
        for m in range(n_lines):
            if buf[7, m] == slope:
                buf[8, m] = max(buf[8, m], icept)
                found = True
                break
        if not found:
            buf[7, n_lines] = slope
            buf[8, n_lines] = icept
            n_lines += 1
    buf[0, K] = n_lines
    buf[9, 0] = memo
    buf[9, 1] = lo
    buf[9, 2] = hi
    buf[9, 3] = with_terminal
    buf[9, 4] = s0
    buf[9, 5] = K
    buf[9, 6] = sum_p
    buf[9, 7] = ctot
    buf[9, 9] = _first_v(K, ctot, F, buf)
    buf[9, 8] = _last_v(K, ctot, F, sL, n, buf)
    return K, sum_p, ctot


@njit(cache=True, inline="always")
def _first_v(K, ctot, s, buf):  # pragma: no cover - jitted
    """V_1 of a second flit of ``s`` bytes: max_a R0(a) + s (Ctot - C(a-1))."""
    best = -np.inf
    for a in range(K):
        c_prev = buf[3, a - 1] if a > 0 else 0.0
        best = max(best, buf[2, a] + s * (ctot - c_prev))
    return best


@njit(cache=True, inline="always")
def _last_v(K, ctot, F, sL, n, buf):  # pragma: no cover - jitted
    """V_{n-1} for n >= 3 (else 0, unused): max_j (n-3) F c_j + PX(j) + SY_L(j), with
    SY_L(j) = max_{b>=j} F C(b) + s_L (Ctot - C(b-1)) kept as a running maximum in the same backward pass.

    Only the wire columns (even ``j``) and the last column are visited.  A node column ``j < K-1`` has
    ``c_j = 0``, so ``C(j) = C(j-1)`` and column ``j+1`` has the same ``Ctot - C(.-1)`` and a ``C`` no smaller:
    its ``b`` term is no smaller, so ``SY_L(j) = SY_L(j+1)``, and its ``j`` term, ``0 + PX(j) + SY_L(j)``, is
    no larger than column ``j+1``'s (``PX`` is a running maximum, the slope term is >= 0).  Rounding is
    monotone, so the maximum is the same to the bit."""
    if n < 3:
        return 0.0
    i = n - 1
    best_l = -np.inf
    best = -np.inf
    j = K - 1 if (K - 1) % 2 == 0 else K - 2
    if j < K - 1:                      # the last column is a node's (the controller's worker): no j+1 beyond it
        best_l = F * buf[3, K - 1] + sL * (ctot - buf[3, K - 2])
        best = (i - 2) * F * buf[1, K - 1] + buf[4, K - 1] + best_l
    while j >= 0:
        c_prev = buf[3, j - 1] if j > 0 else 0.0
        best_l = max(best_l, F * buf[3, j] + sL * (ctot - c_prev))
        best = max(best, (i - 2) * F * buf[1, j] + buf[4, j] + best_l)
        j -= 2
    return best


@njit(cache=True, inline="always")
def _last_flit_v(n, K, F, sL, ctot, buf):  # pragma: no cover - jitted
    """V_{n-1}, the longest lattice path to the last flit's exit (n-1, K-1); see the module docstring."""
    if n == 1:
        return buf[2, K - 1]
    if n == 2:
        return _first_v(K, ctot, sL, buf)
    return buf[9, 8]


@njit(cache=True, _nrt=False)
def _saf_cuts(edges, lo, hi, e_dst, n_flit, buf, memo):  # pragma: no cover - jitted
    """The store-and-forward cuts of edges[lo:hi]: the indices ``k < hi - 1`` whose end node is not flit-aware,
    in order, in ``buf[CUTS, 1, :count]``; returns their count.  With ``memo >= 0`` (as :func:`_prepare`'s) a
    call on the same route as the previous one reads them back instead of walking the route."""
    m = buf[CUTS, 0]
    cuts = buf[CUTS, 1]
    if memo >= 0 and m[0] == memo and m[1] == lo and m[2] == hi:
        return int(m[3])
    nc = 0
    for k in range(lo, hi - 1):
        if not n_flit[e_dst[edges[k]]]:
            cuts[nc] = k
            nc += 1
    m[0] = memo
    m[1] = lo
    m[2] = hi
    m[3] = nc
    return nc


@njit(cache=True, _nrt=False)
def _train_through(edges, lo, hi, n_cuts, e_dst, e_c, e_prop, n_ovh, T0, nbytes, F, buf, memo):  # pragma: no cover
    """:func:`train_exit_last` over edges[lo:hi] whose store-and-forward cuts are the first ``n_cuts`` of
    ``buf[CUTS, 1]`` (:func:`_saf_cuts`)."""
    n = (nbytes + F - 1) // F
    sL = nbytes - F * (n - 1)
    s0 = F if n > 1 else nbytes
    cuts = buf[CUTS, 1]
    seg_lo = lo
    t0 = T0
    for seg in range(n_cuts + 1):
        k = int(cuts[seg]) if seg < n_cuts else hi - 1
        b = buf[min(seg, MEMO_SLOTS - 2)]
        K, sum_p, ctot = _prepare(edges, seg_lo, k + 1, np.bool_(False), e_dst, e_c, e_prop, n_ovh, s0, F, sL, n,
                                  b, memo)
        last = t0 + sum_p + _last_flit_v(n, K, F, sL, ctot, b)
        if seg == n_cuts:
            return last, t0, seg_lo
        t0 = last + n_ovh[e_dst[edges[k]]]
        seg_lo = k + 1
    return t0, t0, seg_lo


@njit(cache=True, _nrt=False)
def train_exit_last(edges, lo, hi, e_dst, e_c, e_prop, n_ovh, n_flit, T0, nbytes, F, buf, memo):  # pragma: no cover
    """Put ``nbytes`` at T0 on edges[lo]; follow store-and-forward boundaries up to the end of edges[hi-1].

    Returns (arrival of the last flit at the end node, start of the last segment, index of its first edge).
    """
    n_cuts = _saf_cuts(edges, lo, hi, e_dst, n_flit, buf, memo)
    return _train_through(edges, lo, hi, n_cuts, e_dst, e_c, e_prop, n_ovh, T0, nbytes, F, buf, memo)


@njit(cache=True, _nrt=False)
def _controller_segment(edges, lo, hi, e_dst, e_c, e_prop, n_ovh, n_flit, T0, nbytes, F, buf, memo):  # pragma: no cover
    """The last store-and-forward segment of a train to the HBM controller ending edges[lo:hi], prepared
    with the controller's worker; returns (K, base, Ctot, its memo rows): flit ``i`` is taken at
    ``base + V_i``."""
    n = (nbytes + F - 1) // F
    sL = nbytes - F * (n - 1)
    s0 = F if n > 1 else nbytes
    seg_lo = lo
    t0 = T0
    n_cuts = _saf_cuts(edges, lo, hi, e_dst, n_flit, buf, memo)
    if n_cuts > 0:
        last_saf = int(buf[CUTS, 1, n_cuts - 1])  # the last store-and-forward node before the controller
        arrive, _, _ = _train_through(edges, lo, last_saf + 1, n_cuts - 1, e_dst, e_c, e_prop, n_ovh, T0, nbytes,
                                      F, buf, memo)
        t0 = arrive + n_ovh[e_dst[edges[last_saf]]]
        seg_lo = last_saf + 1
    b = buf[MEMO_SLOTS - 1]
    K, sum_p, ctot = _prepare(edges, seg_lo, hi, np.bool_(True), e_dst, e_c, e_prop, n_ovh, s0, F, sL, n, b, memo)
    return K, t0 + sum_p, ctot, b


@njit(cache=True, _nrt=False)
def hbm_finish(edges, lo, hi, e_dst, e_c, e_prop, n_ovh, n_flit, T0, nbytes, F, addr, pc_shift, n_pcs,
               commit, pcs, buf, memo):  # pragma: no cover - jitted
    """Finalize time at the HBM controller ending edges[lo:hi], the latest PC commit of the train, and when
    the controller takes its last flit (``base + V_{n-1}``, a PE read's end under ``read_response:
    accepted``), from one pass over the route's segments.

    Flit ``i`` is on PC ``(pc0 + i) mod P``; the class members at or after ``i`` number
    ``(n-1-i)//P + 1``.  Candidates: ``i in {0, 1, n-1}`` and the first and last ``P``
    indices of ``2..n-2`` (each class's ends of the convex range).  ``pcs`` (:func:`new_pcs`) row 0 is
    the read/write switch penalty of the first commit on PC ``q`` (a class's first flit is one of
    ``i < P``), row 1 when PC ``q`` is free (``-inf``: idle), and row 2 receives each PC's last commit
    (``-inf``: untouched): ``max(class candidates, ready + penalty + commit * N_q)``.
    """
    n = (nbytes + F - 1) // F
    sL = nbytes - F * (n - 1)
    K, base, ctot, b = _controller_segment(edges, lo, hi, e_dst, e_c, e_prop, n_ovh, n_flit, T0, nbytes, F, buf, memo)
    pc0 = pc_of(addr, pc_shift, n_pcs)
    log_p = 0                          # n_pcs is a power of two (pc_of): a class's counts by shifts and masks
    while (1 << log_p) < n_pcs:
        log_p += 1
    for q in range(n_pcs):
        pcs[2, q] = -np.inf
    # candidates 0, 1, n-1, then 2..P+1 and n-1-P..n-2 (clipped to 2..n-2, without repeats)
    _commit_candidate(0, base + b[2, K - 1], n, n_pcs, log_p, pc0, commit, pcs)
    if n == 1:
        return _last_commits(n, n_pcs, log_p, pc0, commit, pcs), base + b[2, K - 1]
    v1 = b[9, 9] if n > 2 else _first_v(K, ctot, sL, b)
    _commit_candidate(1, base + v1, n, n_pcs, log_p, pc0, commit, pcs)
    if n == 2:
        return _last_commits(n, n_pcs, log_p, pc0, commit, pcs), base + v1
    taken = base + b[9, 8]             # the controller takes the last flit (V_{n-1}, :func:`_last_v`)
    _commit_candidate(n - 1, taken, n, n_pcs, log_p, pc0, commit, pcs)
    a1 = min(n_pcs + 1, n - 2)
    b0 = max(a1 + 1, n - 1 - n_pcs)
    n_lines = int(b[0, K])
    for i_lo, i_hi in ((2, a1 + 1), (b0, n - 1)):
        for i in range(i_lo, i_hi):
            best = -np.inf
            for m in range(n_lines):   # V_i of a full row: the best of the lines in i (rows 7/8, :func:`_prepare`)
                best = max(best, (i - 2) * b[7, m] + b[8, m])
            _commit_candidate(i, base + best, n, n_pcs, log_p, pc0, commit, pcs)
    return _last_commits(n, n_pcs, log_p, pc0, commit, pcs), taken


@njit(cache=True, inline="always")
def _commit_candidate(i, take, n, n_pcs, log_p, pc0, commit, pcs):  # pragma: no cover - jitted
    """Flit ``i``, taken by the controller at ``take``, bounds its PC's last commit: ``take`` plus one commit
    per class member at or after it, and its PC's switch penalty if it is the class's first flit (``log_p``:
    log2 of ``n_pcs``)."""
    term = take + commit * (((n - 1 - i) >> log_p) + 1)
    q = (pc0 + i) & (n_pcs - 1)
    if i < n_pcs:
        term += pcs[0, q]
    pcs[2, q] = max(pcs[2, q], term)


@njit(cache=True, inline="always")
def _last_commits(n, n_pcs, log_p, pc0, commit, pcs):  # pragma: no cover - jitted
    """Each PC's last commit (``pcs`` row 2), at least its ready time, penalty and one commit per flit; their
    latest (``log_p``: log2 of ``n_pcs``)."""
    fin = -np.inf
    for q in range(n_pcs):
        first = (q - pc0) & (n_pcs - 1)
        if first < n:
            n_q = ((n - 1 - first) >> log_p) + 1
            pcs[2, q] = max(pcs[2, q], pcs[1, q] + pcs[0, q] + commit * n_q)
            fin = max(fin, pcs[2, q])
    return fin


@njit(cache=True)
def new_pcs(n_pcs):  # pragma: no cover - jitted
    """Per-PC rows of :func:`hbm_finish`: switch penalties 0, every PC idle, no commits yet."""
    pcs = np.empty((3, n_pcs))
    reset_pcs(pcs)
    return pcs


@njit(cache=True, _nrt=False)
def reset_pcs(pcs):  # pragma: no cover - jitted
    """:func:`new_pcs`'s rows as new: switch penalties 0, every PC idle, no commits yet."""
    pcs[0, :] = 0.0
    pcs[1, :] = -np.inf
    pcs[2, :] = -np.inf


@njit(cache=True, _nrt=False)
def chunk_finish(t0, nbytes, bn, addr, burst, pc_shift, n_pcs, commit, pen):  # pragma: no cover - jitted
    """Host-read chunk loop (spec_memory §3.7): chunk i at t0+(i+1)*drain/n; returns the data send time.
    ``pen[q]``: the switch penalty of PC ``q``'s first commit."""
    nch = (nbytes + burst - 1) // burst
    if nch == 0:
        return t0
    delta = nbytes / bn / nch
    pc0 = pc_of(addr, pc_shift, n_pcs)
    last = t0
    for q in range(n_pcs):
        first = (q - pc0) % n_pcs
        if first >= nch:
            continue
        N = (nch - 1 - first) // n_pcs + 1
        # t_i affine in i: the max of t_i + commit*(N - t) sits at an end of the class
        last = max(last, t0 + (first + 1) * delta + commit * N + pen[q])
        il = first + (N - 1) * n_pcs
        last = max(last, t0 + (il + 1) * delta + commit + (pen[q] if N == 1 else 0.0))
    return max(t0 + nch * delta, last)


@njit(cache=True, _nrt=False)
def transfer_end(kind, T, nbytes, addr, fwd, rev, fabric, hbm, pcs, buf, memo):  # pragma: no cover - jitted
    """Completion time of one isolated DMA of ``kind`` (PE_REQ, H2D, D2H, PE_READ) and ``nbytes`` at byte
    address ``addr``, begun at T (the semantics of kbfast.exact.engine; docs/fast_path.md §1).

    PE request: source overhead, train to the HBM controller, PC commits (PE_READ: the controller takes the
    last flit), zero-byte response.
    H2D: the same without the response.  D2H: zero-byte command, chunk loop, data train back.

    ``fwd``, ``rev``: the forward and reverse route ids in ``fabric``'s routes (``r_ptr``, ``r_edges``);
    ``fabric``: a :data:`~kbfast.sim.lowering.Fabric` (or a namedtuple with its fields ``e_src, e_dst, e_c,
    e_bw, e_prop, n_ovh, n_flit, r_ptr, r_edges``); ``hbm``: a :data:`~kbfast.sim.lowering.Hbm` (``flit_bytes,
    burst_bytes, pc_shift, n_pcs, commit_ns, burst_commit_ns``); ``pcs``: per-PC rows (:func:`new_pcs`;
    row 2 receives each PC's last commit); ``buf``, ``memo``: the segment memo (:func:`new_buf`,
    :func:`_prepare`).  The slow reference is ``tests/naive.py``'s ``naive_transfer_end``.
    """
    edges, r_ptr = fabric.r_edges, fabric.r_ptr
    flo, fhi, rlo, rhi = r_ptr[fwd], r_ptr[fwd + 1], r_ptr[rev], r_ptr[rev + 1]
    e_dst, e_c, e_prop, n_ovh, n_flit = fabric.e_dst, fabric.e_c, fabric.e_prop, fabric.n_ovh, fabric.n_flit
    F, n_pcs, pc_shift = hbm.flit_bytes, hbm.n_pcs, hbm.pc_shift
    head = T + n_ovh[fabric.e_src[edges[flo]]]
    if kind == D2H:
        t_cmd = head + ctrl_latency(edges, flo, fhi, e_dst, e_prop, n_ovh)
        ctrl = e_dst[edges[fhi - 1]]
        bn = bottleneck(edges, flo, fhi, fabric.e_bw)
        send = chunk_finish(t_cmd + n_ovh[ctrl], nbytes, bn, addr, hbm.burst_bytes, pc_shift, n_pcs,
                            hbm.burst_commit_ns, pcs[0])
        if nbytes == 0:
            return send + ctrl_latency(edges, rlo, rhi, e_dst, e_prop, n_ovh) + n_ovh[e_dst[edges[rhi - 1]]]
        last, _, _ = train_exit_last(edges, rlo, rhi, e_dst, e_c, e_prop, n_ovh, n_flit, send, nbytes, F, buf, memo)
        return last + n_ovh[e_dst[edges[rhi - 1]]]
    if nbytes == 0:
        fin = head + ctrl_latency(edges, flo, fhi, e_dst, e_prop, n_ovh) + n_ovh[e_dst[edges[fhi - 1]]]
    else:
        fin, taken = hbm_finish(edges, flo, fhi, e_dst, e_c, e_prop, n_ovh, n_flit, head, nbytes, F, addr, pc_shift,
                                n_pcs, hbm.commit_ns, pcs, buf, memo)   # (a PE_READ's commits still fill pcs[2])
        if kind == PE_READ:
            fin = taken
    if kind == H2D:
        return fin
    return fin + _response(edges, rlo, rhi, e_dst, e_prop, n_ovh, buf, memo) + n_ovh[e_dst[edges[rhi - 1]]]


@njit(cache=True, _nrt=False)
def _response(edges, lo, hi, e_dst, e_prop, n_ovh, buf, memo):  # pragma: no cover - jitted
    """``ctrl_latency`` of the zero-byte response over edges[lo:hi]; with ``memo >= 0`` (as :func:`_prepare`'s)
    kept in ``buf``'s response slot for the next call on the same route."""
    m = buf[RESPONSE, 0]
    if memo >= 0 and m[0] == memo and m[1] == lo and m[2] == hi:
        return m[3]
    lat = ctrl_latency(edges, lo, hi, e_dst, e_prop, n_ovh)
    m[0] = memo
    m[1] = lo
    m[2] = hi
    m[3] = lat
    return lat
