"""The fluid schedule's max-min fair rates: weighted water-filling over the shared resources, per connected
component of the flows that share them (``kbfast.fast.schedule``'s POINT mode; the slow reference is
``tests/naive.py``'s ``global_filling``)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

# The scratch arrays of :func:`_rates` (``kbfast.fast.schedule``'s run scratch has these fields, and more).
FillScratch = namedtuple("FillScratch", [
    "bn",           # float64 [O]  per op: its own bottleneck rate, B/ns
    "users",        # int64 [R]    per resource: joined, undrained flows on it
    "cap_rem",      # float64 [R]  per resource: capacity left (scratch)
    "weight",       # float64 [R]  per resource: summed weights of its unfrozen users (scratch)
    "r_contended",  # bool [R]     per resource: had two active users (set, never cleared here)
    "o_contended",  # bool [O]     per op: met a contended resource (set, never cleared here)
    "mr", "mw",     # int64, float64 [entries]  active flows' contended resources and weights (scratch)
    "m_ptr",        # int64 [O+1]  per active flow: its entries in mr / mw
    "k_bn", "k_rate", "k_frozen",   # per active flow: cap, rate, frozen (scratch)
    "uf", "res_first", "order", "c_ptr",   # union-find and the counting sort by component (scratch)
])


def fill_scratch(bn: np.ndarray, users: np.ndarray, n_entries: int) -> FillScratch:
    """Fresh :class:`FillScratch` for flows with bottlenecks ``bn`` over resources with ``users``."""
    n, n_res = len(bn), len(users)
    return FillScratch(bn=bn, users=users, cap_rem=np.zeros(n_res), weight=np.zeros(n_res),
                       r_contended=np.zeros(n_res, np.bool_), o_contended=np.zeros(n, np.bool_),
                       mr=np.empty(n_entries, np.int64), mw=np.empty(n_entries), m_ptr=np.empty(n + 1, np.int64),
                       k_bn=np.empty(n), k_rate=np.empty(n), k_frozen=np.empty(n, np.bool_),
                       uf=np.empty(n, np.int64), res_first=np.full(n_res, -1, np.int64), order=np.empty(n, np.int64),
                       c_ptr=np.empty(n + 1, np.int64))


@njit(cache=True, inline="always")
def _w(r, o, res_ovh, nbytes):  # pragma: no cover - jitted
    """Capacity flow ``o`` uses per B/ns on resource ``r``: 1 on a wire (``res_ovh = 0``), overhead / bytes
    on a worker."""
    return res_ovh[r] / max(nbytes[o], 1) if res_ovh[r] > 0.0 else 1.0


@njit(cache=True, _nrt=False)
def _rates(active, n_active, rate, nbytes, sharing, W):  # pragma: no cover - jitted
    """Max-min fair rates (water-filling) of the active flows ``active[:n_active]`` over their shared
    resources, into ``rate`` (per op); ``nbytes`` per op, the shared resources ``sharing``
    (:class:`~kbfast.fast.schedule.Sharing`: ``sh_span``, ``sh_res``, ``res_cap``, ``res_ovh``) and the
    scratch ``W`` (:data:`FillScratch`, or a namedtuple with its fields).

    A flow at rate ``x`` (B/ns) uses ``w * x`` of a resource's capacity: ``w = 1`` on a
    wire (capacity = bw), ``w = overhead / bytes`` on a node's serial worker (capacity 1).
    Each flow is also capped by its own bottleneck ``bn``.  A resource whose users could
    not exceed it even at their bottleneck rates cannot bind and is left out; flows that
    touch no binding resource run at ``bn``.

    ``users[r]`` counts the joined, undrained flows on ``r``; on a resource of an active flow
    they are all active (a solo flow shares nothing: one that would is moved into the fluid).
    Only resources with two or more active users can bind (a wire's one user runs at most
    at its bottleneck <= the wire's bw; a worker's one user pays its overhead in its isolated
    latency), so the filling runs on those entries only: active flow ``k``'s resources and
    weights are ``mr, mw[m_ptr[k]:m_ptr[k + 1]]``, and its cap, rate and state are ``k_bn[k]``,
    ``k_rate[k]``, ``k_frozen[k]`` (contiguous scratch: the passes below stay in cache).

    Max-min fairness decomposes over the connected components of the flows linked by those
    entries, so each component is filled on its own (union-find, then a stable counting sort by
    component into ``order`` / ``c_ptr``).  Within a component the operations run in the same
    order as a filling over all flows would run them, so the rates are the same bit for bit; a
    collective whose 16 k ranks contend in pairs then costs 16 k small fillings, not one filling
    with 16 k levels over every flow.
    """
    sh_span, sh_res, res_ovh, cap = sharing.sh_span, sharing.sh_res, sharing.res_ovh, sharing.res_cap
    bn, users, cap_rem, weight, r_contended, o_contended = W.bn, W.users, W.cap_rem, W.weight, W.r_contended, W.o_contended
    mr, mw, m_ptr, k_bn, k_rate, k_frozen = W.mr, W.mw, W.m_ptr, W.k_bn, W.k_rate, W.k_frozen
    uf, res_first, order, c_ptr = W.uf, W.res_first, W.order, W.c_ptr
    m = 0
    for k in range(n_active):
        o = active[k]
        m_ptr[k] = m
        k_bn[k] = bn[o]
        uf[k] = k
        hit = False
        for j in range(sh_span[o, 0], sh_span[o, 1]):
            r = sh_res[j]
            if users[r] > 1:
                r_contended[r] = True
                mr[m] = r
                mw[m] = _w(r, o, res_ovh, nbytes)
                m += 1
                cap_rem[r] = 0.0     # demand at bottleneck rates
                weight[r] = 0.0      # summed weights
                if res_first[r] < 0:
                    res_first[r] = k
                else:
                    _union(uf, k, res_first[r])
            hit = hit or r_contended[r]
        if hit:
            o_contended[o] = True
    m_ptr[n_active] = m
    for i in range(m):
        res_first[mr[i]] = -1
    # components: roots in order of their smallest member; members in active order
    for k in range(n_active + 1):
        c_ptr[k] = 0
    for k in range(n_active):
        c_ptr[_find(uf, k) + 1] += 1
    for k in range(n_active):
        c_ptr[k + 1] += c_ptr[k]
    for k in range(n_active):
        root = _find(uf, k)
        order[c_ptr[root]] = k
        c_ptr[root] += 1
    start = np.int64(0)
    for k in range(n_active):
        if _find(uf, k) != k:
            continue
        end = c_ptr[k]       # the counting sort advanced the root's pointer to its component's end
        _fill(order, start, end, m_ptr, mr, mw, k_bn, k_rate, k_frozen, cap, cap_rem, weight)
        start = end
    for k in range(n_active):
        rate[active[k]] = k_rate[k]


@njit(cache=True, _nrt=False, inline="always")
def _find(uf, k):  # pragma: no cover - jitted
    """The root of ``k`` in the union-find ``uf``, halving the path."""
    while uf[k] != k:
        uf[k] = uf[uf[k]]
        k = uf[k]
    return k


@njit(cache=True, _nrt=False, inline="always")
def _union(uf, a, b):  # pragma: no cover - jitted
    """Join the sets of ``a`` and ``b`` under the smaller root."""
    ra, rb = _find(uf, a), _find(uf, b)
    if ra < rb:
        uf[rb] = ra
    elif rb < ra:
        uf[ra] = rb


@njit(cache=True, _nrt=False)
def _fill(order, lo, hi, m_ptr, mr, mw, k_bn, k_rate, k_frozen, cap, cap_rem, weight):  # pragma: no cover
    """Water-filling of one component: the active flows ``order[lo:hi]`` (see :func:`_rates`)."""
    for q in range(lo, hi):
        k = order[q]
        for i in range(m_ptr[k], m_ptr[k + 1]):
            weight[mr[i]] += mw[i]
            cap_rem[mr[i]] += mw[i] * k_bn[k]
    left = 0
    for q in range(lo, hi):
        k = order[q]
        binds = False
        for i in range(m_ptr[k], m_ptr[k + 1]):
            if cap_rem[mr[i]] > cap[mr[i]] * (1.0 + 1e-12):
                binds = True
        k_frozen[k] = not binds
        if binds:
            left += 1
        else:
            k_rate[k] = k_bn[k]
    # Capacity left on binding resources, and the weights of their unfrozen users.
    for q in range(lo, hi):
        k = order[q]
        for i in range(m_ptr[k], m_ptr[k + 1]):
            cap_rem[mr[i]] = cap[mr[i]]
            weight[mr[i]] = 0.0
    for q in range(lo, hi):
        k = order[q]
        for i in range(m_ptr[k], m_ptr[k + 1]):
            if k_frozen[k]:
                cap_rem[mr[i]] -= mw[i] * k_rate[k]
            else:
                weight[mr[i]] += mw[i]
    while left > 0:
        level = np.inf
        best_res = -1
        best_flow = -1
        for q in range(lo, hi):
            k = order[q]
            if k_frozen[k]:
                continue
            if k_bn[k] < level:
                level = k_bn[k]
                best_flow = k
                best_res = -1
            for i in range(m_ptr[k], m_ptr[k + 1]):
                r = mr[i]
                if weight[r] > 0.0:
                    lv = cap_rem[r] / weight[r]
                    if lv < level:
                        level = lv
                        best_res = r
                        best_flow = -1
        level = max(level, 0.0)
        for q in range(lo, hi):
            k = order[q]
            if k_frozen[k]:
                continue
            hit = k == best_flow
            if best_res >= 0:
                for i in range(m_ptr[k], m_ptr[k + 1]):
                    if mr[i] == best_res:
                        hit = True
            if hit:
                k_frozen[k] = True
                k_rate[k] = level
                left -= 1
                for i in range(m_ptr[k], m_ptr[k + 1]):
                    cap_rem[mr[i]] -= mw[i] * level
                    weight[mr[i]] -= mw[i]
