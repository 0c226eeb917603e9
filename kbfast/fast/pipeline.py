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
(``kbfast.fast.gemm``), so a GEMM whose transfers never overlap equals exact mode (P1).

Steady state: a max-plus recurrence becomes periodic after a transient: some ``p`` steps later every
quantity the next step reads has moved by the same amount.  :func:`pipeline` watches for that, at two
levels (the inner k tiles of an output tile, which are all alike; and whole output tiles), and jumps over
the whole periods at once, so a 2^20-tile GEMM costs a few hundred steps, not 2^20.  Busy times are counts
times service times, in closed form.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MAX_PERIOD = 8          # the longest cycle (in steps) the steady-state detector looks for
ROWS = MAX_PERIOD + 1   # snapshots kept: enough to compare the newest with the one MAX_PERIOD steps back
N_OUT = 8               # pipeline() returns: end, first_done, start, busy read, fetch, compute, store, write
# bound stage codes (:func:`bound_stage`)
STAGES = ("dma_read", "tcm_read", "compute", "tcm_write", "dma_write", "depth")


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
def _snapshot(hist, h, st, fe, t, D, with_out):  # pragma: no cover - jitted
    """Row h of ``hist``: the state the next step reads (read_free, comp_end, the D fetch ends oldest first;
    with ``with_out`` also store_end, write_free, last done)."""
    hist[h, 0] = st[0]
    hist[h, 1] = st[1]
    for i in range(D):
        hist[h, 2 + i] = fe[(t + i) % D]
    n = 2 + D
    if with_out:
        hist[h, n] = st[2]
        hist[h, n + 1] = st[3]
        hist[h, n + 2] = st[4]
        n += 3
    return n


@njit(cache=True, inline="always")
def _shift(hist, h, p, n):  # pragma: no cover - jitted
    """The common move of every component from row h - p to row h, or NaN when they differ."""
    d = hist[h, 0] - hist[h - p, 0]
    if not np.isfinite(d):
        return np.nan
    tol = 1e-12 * max(abs(hist[h, 0]), 1.0)
    for i in range(1, n):
        e = hist[h, i] - hist[h - p, i]
        if not (abs(e - d) <= tol):
            return np.nan
    return d


@njit(cache=True, inline="always")
def _jump(st, fe, D, t, delta):  # pragma: no cover - jitted
    for i in range(5):
        st[i] += delta
    for i in range(D):
        fe[i] += delta


@njit(cache=True)
def pipeline(n_mn, n_k, D, t0, a_hold, a_done, b_hold, b_done, fetch, comp_inner, comp_last, store, w_hold,
             w_done):  # pragma: no cover - jitted
    """The recurrence with the steady state jumped over: equal to :func:`pipeline_full` (to rounding), in
    O(transient + period) steps per level.  Returns float64 [N_OUT]: end, first output tile done, start (t0),
    and the busy ns of the read channel, TCM read, compute slot, TCM write and write channel."""
    st = np.array([-np.inf, -np.inf, -np.inf, -np.inf, -np.inf])
    fe = np.full(D, -np.inf)
    width = 2 + D + 3
    inner = np.empty((ROWS, width))
    outer = np.empty((ROWS, width))
    first = -np.inf
    t = 0
    j = 0
    n_o = 0                                  # output-tile snapshots taken since the last jump
    while j < n_mn:
        # the inner k tiles of output tile j (all alike): detect their period, jump
        k = 0
        n_i = 0
        while k < n_k - 1:
            _tile(D, t, t0, st, fe, a_hold, a_done, b_hold, b_done, fetch, comp_inner)
            t += 1
            k += 1
            h = min(n_i, ROWS - 1)
            if n_i >= ROWS:                      # full: keep the last ROWS snapshots
                inner[:-1] = inner[1:]
            w = _snapshot(inner, h, st, fe, t, D, False)
            n_i += 1
            for p in range(1, min(h, MAX_PERIOD) + 1):
                d = _shift(inner, h, p, w)
                if np.isfinite(d):
                    q = (n_k - 1 - k) // p           # whole periods left among the inner tiles
                    if q > 0:
                        _jump(st, fe, D, t, q * d)
                        # the ring's slots follow t: advance t by whole periods (a multiple of p, not of D), so
                        # re-seat the window to its new phase
                        old = fe.copy()
                        for i in range(D):
                            fe[(t + q * p + i) % D] = old[(t + i) % D]
                        t += q * p
                        k += q * p
                        n_i = 0
                    break
        _tile(D, t, t0, st, fe, a_hold, a_done, b_hold, b_done, fetch, comp_last)
        t += 1
        _output(st, store, w_hold, w_done)
        if j == 0:
            first = st[4]
        j += 1
        # whole output tiles: detect their period, jump
        h = min(n_o, ROWS - 1)
        if n_o >= ROWS:
            outer[:-1] = outer[1:]
        w = _snapshot(outer, h, st, fe, t, D, True)
        n_o += 1
        for p in range(1, min(h, MAX_PERIOD) + 1):
            d = _shift(outer, h, p, w)
            if np.isfinite(d):
                q = (n_mn - j) // p
                if q > 0:
                    _jump(st, fe, D, t, q * d)
                    old = fe.copy()
                    steps = q * p * n_k
                    for i in range(D):
                        fe[(t + steps + i) % D] = old[(t + i) % D]
                    t += steps
                    j += q * p
                    n_o = 0
                break
    out = np.empty(N_OUT)
    T = n_mn * n_k
    out[0] = st[4]
    out[1] = first
    out[2] = t0
    out[3] = T * (a_hold + b_hold)
    out[4] = T * fetch
    out[5] = n_mn * ((n_k - 1) * comp_inner + comp_last)
    out[6] = n_mn * store
    out[7] = n_mn * w_hold
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
