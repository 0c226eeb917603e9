"""The GEMM tile pipeline as a max-plus recurrence, with its steady state in closed form (Numba).

spec_pe §4–§5 and the decisions table rows "PE tile pipeline" and "pipeline depth", for one GEMM command on
a PE whose traffic shares nothing.  Tiles t = 0..T-1 run in M -> N -> K order (``T = n_mn * n_k``, k = t mod
n_k); each capacity-1 resource serves them in tile order:

* read channel: ``r = max(t0, read_free, fetch_end[t - D])`` (the depth gate only from t = D); A (unless
  pinned: hold = done = 0) starts at ``r``, frees the channel ``a_hold`` later and its data is in
  ``a_done``; B starts when the channel is free again; the tile's data is ready at the later ``done``;
* FETCH: ``max(ready, fetch_end[t - 1]) + fetch``;
* compute slot: ``max(fetch_end[t], comp_end[t - 1]) + (comp_last if k = n_k - 1 else comp_inner)``;
* on the last k only, STORE: ``max(comp_end[t], store_end) + store``, then DMA_WRITE:
  ``w = max(store_end, write_free)``, ``write_free = w + w_hold``, the tile is done at ``w + w_done``.

The GEMM ends when the last output tile is done.  The service times come from the transfer closed forms
(``kbfast.fast.maxplus_gemm``), so a GEMM whose transfers never overlap equals exact mode (P1).

Steady state: a max-plus recurrence becomes periodic after a transient: some ``p`` steps later every
quantity the next step reads has moved by the same amount.  :func:`pipeline` watches for that, at two
levels (the inner k tiles of an output tile, which are all alike; and whole output tiles), and jumps over
the whole periods at once, so a 2^20-tile GEMM costs a few hundred steps, not 2^20.  Busy times are counts
times service times, in closed form.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MAX_PERIOD = 8          # the longest cycle (in tiles) of the reads and FETCH the detector looks for
ROWS = MAX_PERIOD + 1   # snapshots kept: enough to compare the newest with the one MAX_PERIOD steps back
BUFFER = 1 << 14        # elements stored per stage before it must be periodic (else: tile by tile)
N_OUT = 8               # pipeline() returns: end, first_done, start, busy read, fetch, compute, store, write


@njit(cache=True, inline="always")
def _tile(D, t, t0, st, fe, a_hold, a_done, b_hold, b_done, fetch, comp):  # pragma: no cover - jitted
    """One tile through read, FETCH and compute; ``st`` = [read_free, comp_end, store_end, write_free,
    last done], ``fe`` = the last D fetch ends (ring, slot t mod D).  Without reads ``read_free`` keeps the
    gate time (the same max: fetch ends only grow), so it moves with the rest."""
    r = max(t0, st[0])
    if t >= D:
        r = max(r, fe[t % D])
    ready = r
    st[0] = r
    if a_hold > 0.0 or a_done > 0.0:
        st[0] = r + a_hold
        ready = r + a_done
        r = st[0]
    if b_hold > 0.0 or b_done > 0.0:
        b0 = max(r, st[0])
        st[0] = b0 + b_hold
        ready = max(ready, b0 + b_done)
    prev = fe[(t - 1) % D] if t >= 1 else -np.inf
    f = max(ready, prev) + fetch
    fe[t % D] = f
    st[1] = max(f, st[1]) + comp


@njit(cache=True, inline="always")
def _output(st, store, w_hold, w_done):  # pragma: no cover - jitted
    """The last k of an output tile: STORE, then DMA_WRITE."""
    st[2] = max(st[1], st[2]) + store
    w = max(st[2], st[3])
    st[3] = w + w_hold
    st[4] = w + w_done


@njit(cache=True)
def pipeline_full(n_mn, n_k, D, t0, a_hold, a_done, b_hold, b_done, fetch, comp_inner, comp_last, store, w_hold,
                  w_done):  # pragma: no cover - jitted
    """The recurrence tile by tile, O(T): (end, first_done); the reference for :func:`pipeline`."""
    st = np.array([-np.inf, -np.inf, -np.inf, -np.inf, -np.inf])
    fe = np.full(D, -np.inf)
    first = -np.inf
    t = 0
    for j in range(n_mn):
        for k in range(n_k):
            last = k == n_k - 1
            _tile(D, t, t0, st, fe, a_hold, a_done, b_hold, b_done, fetch, comp_last if last else comp_inner)
            t += 1
        _output(st, store, w_hold, w_done)
        if j == 0:
            first = st[4]
    return st[4], first


@njit(cache=True, inline="always")
def _at(vals, L0, P, inc, i):  # pragma: no cover - jitted
    """Element i of a sequence stored as ``vals[:L0]`` and periodic after: ``x[i] = x[i - P] + inc`` for
    ``i >= L0`` (P = 0: nothing beyond L0 is known)."""
    if i < L0:
        return vals[i]
    back = L0 - P + (i - L0) % P
    return vals[back] + ((i - L0) // P + 1) * inc


@njit(cache=True)
def _fetch_ends(T, D, t0, a_hold, a_done, b_hold, b_done, fetch, out):  # pragma: no cover - jitted
    """FETCH ends of tiles 0..T-1 (reads and FETCH are one group: the depth gate couples them), until their
    state shifts uniformly, p <= MAX_PERIOD steps apart: then ``x[t + p] = x[t] + inc`` for good (the map
    is the same every tile).  Returns (L0, P, inc) of the stored sequence ``out`` (P = 0: no period)."""
    st = np.array([-np.inf, -np.inf, -np.inf, -np.inf, -np.inf])
    fe = np.full(D, -np.inf)
    hist = np.empty((ROWS, 1 + D))
    cap = len(out)
    for t in range(min(T, cap)):
        _tile(D, t, t0, st, fe, a_hold, a_done, b_hold, b_done, fetch, 0.0)
        out[t] = fe[t % D]
        h = min(t, ROWS - 1)
        if t >= ROWS:
            hist[:-1] = hist[1:]
        hist[h, 0] = st[0]
        for i in range(D):
            hist[h, 1 + i] = fe[(t + 1 + i) % D]
        if t < D + 1:
            continue
        for p in range(1, min(h, MAX_PERIOD) + 1):
            d = hist[h, 0] - hist[h - p, 0]
            ok = np.isfinite(d)
            for i in range(1, 1 + D):
                if not ok:
                    break
                ok = abs(hist[h, i] - hist[h - p, i] - d) <= 1e-12 * max(abs(hist[h, i]), 1.0)
            if ok:
                return t + 1, p, d
    return min(T, cap), 0, 0.0


@njit(cache=True)
def _server(in_vals, in_L0, in_P, in_inc, stride, offset, N, serv, start, out):  # pragma: no cover - jitted
    """A FIFO server fed by a periodic sequence: ``y[i] = max(x[offset + i * stride], y[i - 1]) + serv[i mod
    len(serv)]`` (``y[-1] = start``), for i < N, stored in ``out`` until it is periodic for good.

    Its state is ``g[i] = y[i] - x(i)`` alone.  Once the input is periodic (period P steps of i, with the
    service pattern), ``g[i] = g[i - P]`` makes y periodic for good (the queue is stable); so does a
    queue that never emptied over the last period and grew over it (the server is the bottleneck: y
    advances by its own service time).  Returns (L0, P, inc), as :func:`_fetch_ends`."""
    ns = len(serv)
    if in_P > 0:
        q = in_P // np.gcd(in_P, stride)            # steps of i after which the input index moves by k * in_P
        P = q * ns // np.gcd(q, ns)
        i_start = max(0, (in_L0 - in_P - offset + stride - 1) // stride)   # input periodic from there
    else:
        P = 0
        i_start = N
    cap = len(out)
    prev = start
    last_idle = -1                                   # the last i whose input arrived after y[i - 1]
    for i in range(min(N, cap)):
        x = _at(in_vals, in_L0, in_P, in_inc, offset + i * stride)
        if x >= prev:
            last_idle = i
        prev = max(x, prev) + serv[i % ns]
        out[i] = prev
        j = i - P
        if P > 0 and j >= i_start + P:
            g_now = prev - x
            g_then = out[j] - _at(in_vals, in_L0, in_P, in_inc, offset + j * stride)
            if abs(g_now - g_then) <= 1e-12 * max(abs(prev), 1.0) or (g_now > g_then and last_idle <= j):
                return i + 1, P, prev - out[j]
    return min(N, cap), 0, 0.0


@njit(cache=True)
def pipeline(n_mn, n_k, D, t0, a_hold, a_done, b_hold, b_done, fetch, comp_inner, comp_last, store, w_hold,
             w_done):  # pragma: no cover - jitted
    """The recurrence stage by stage, each stage's sequence stored until it is periodic for good: reads and
    FETCH (one group), the compute slot, STORE, the write channel.  Equal to :func:`pipeline_full` (to
    rounding); O(transient + period) per stage.  Returns float64 [N_OUT]: end, first output tile done, start
    (t0), and the busy ns of the read channel, TCM read, compute slot, TCM write and write channel."""
    T = n_mn * n_k
    out = np.empty(N_OUT)
    out[2] = t0
    out[3] = T * (a_hold + b_hold)
    out[4] = T * fetch
    out[5] = n_mn * ((n_k - 1) * comp_inner + comp_last)
    out[6] = n_mn * store
    out[7] = n_mn * w_hold
    cap = min(T, BUFFER)
    f = np.empty(cap)
    fL, fP, finc = _fetch_ends(T, D, t0, a_hold, a_done, b_hold, b_done, fetch, f)
    # each stage reads the one before as a whole sequence: only a stage stored in full or periodic for good
    # feeds the next (else the rest runs tile by tile)
    if fL == T or fP > 0:
        serv = np.full(n_k, comp_inner)
        serv[n_k - 1] = comp_last
        c = np.empty(cap)
        cL, cP, cinc = _server(f, fL, fP, finc, 1, 0, T, serv, -np.inf, c)
        if cL == T or cP > 0:
            so = np.empty(min(n_mn, BUFFER))
            sL, sP, sinc = _server(c, cL, cP, cinc, n_k, n_k - 1, n_mn, np.array([store]), -np.inf, so)
            if sL == n_mn or sP > 0:
                wo = np.empty(min(n_mn, BUFFER))
                wL, wP, winc = _server(so, sL, sP, sinc, 1, 0, n_mn, np.array([w_hold]), -np.inf, wo)
                if wL == n_mn or wP > 0:
                    out[0] = _at(wo, wL, wP, winc, n_mn - 1) - w_hold + w_done
                    out[1] = wo[0] - w_hold + w_done
                    return out
    end, first = pipeline_full(n_mn, n_k, D, t0, a_hold, a_done, b_hold, b_done, fetch, comp_inner, comp_last,
                               store, w_hold, w_done)   # a transient longer than the buffers: tile by tile
    out[0] = end
    out[1] = first
    return out


@njit(cache=True)
def pipeline_batch(n_mn, n_k, D, t0, a_hold, a_done, b_hold, b_done, fetch, comp_inner, comp_last, store, w_hold,
                   w_done):  # pragma: no cover - jitted
    """:func:`pipeline` for every point of equal-length 1-D arrays; returns float64 [n, N_OUT]."""
    out = np.empty((len(n_mn), N_OUT))
    for i in range(len(n_mn)):
        out[i] = pipeline(n_mn[i], n_k[i], D[i], t0[i], a_hold[i], a_done[i], b_hold[i], b_done[i], fetch[i],
                          comp_inner[i], comp_last[i], store[i], w_hold[i], w_done[i])
    return out
