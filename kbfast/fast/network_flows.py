"""The fluid queueing network's flows of a Program (kbfast.fast.network.Flows), built in one jitted pass.

Server ids by range, no dictionaries: link ``e`` is ``e``; the egress queue of (first edge ``e``, virtual
channel ``vc``) is ``E + 2 e + vc``; router ``v`` is ``3 E + v``; pseudo-channel ``q`` of controller ``c`` is
``3 E + N + c P + q`` (``E`` edges, ``N`` nodes, ``P`` PCs per controller).  Ids that no flow uses stay idle.
Per flow, the zero-load head delay ``d = s0 / bw + prop + overhead`` accumulates from one server to the next
(``s0``: the first flit), and ``T_iso`` is the flow's last byte leaving its last server when it is alone.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kbfast.fast.network import ROUTER, Flows
from kbfast.ir import Program
from kbfast.sim.agents import OP_SEND


@njit(cache=True)
def _add_place(places, K, sid, npb, n, flow, d, dt, saf, d0, late):  # pragma: no cover - jitted
    """Append place ``K``: flow ``flow`` (``n`` bytes) at server ``sid``, ``npb`` ns per byte.  ``d`` is the head
    delay from the flow's previous place (its ``k_delay``, with ``saf``: a store-and-forward node between) or,
    for its first, from the flow's start (``d0``); ``d - dt`` of it is spent ahead of the flit on the way
    (``late``, the read channel's correction).  Returns (K + 1, d0, late)."""
    k_srv, k_npb, k_delay, k_saf, k_need, k_flow = places
    if d0 < 0:
        d0 = d
    else:
        k_delay[K - 1] = d
        k_saf[K - 1] = saf
        late += d - dt
    k_srv[K] = sid
    k_npb[K] = npb
    k_need[K] = n
    k_flow[K] = flow
    return K + 1, d0, late


@njit(cache=True)
def _build(ops, data_route, op_code, op_nbytes, op_addr, n_ovh, n_flit, n_hbm, e_src, e_dst, e_bw, e_prop, r_ptr,
           r_edges, F, pc_shift, n_pcs, commit_ns, n_ctrl):  # pragma: no cover - jitted
    """The network's flows of ``ops`` (kbfast.fast.network.Flows' arrays, then per flow ``T_iso``), their servers
    by the module's ids.  A link is a server only where its load, the sum over its flows of the flow's narrowest
    link so far (prefix minimum of bandwidths, reset after a router or store-and-forward node) over its own
    bandwidth, passes 1: a link that can never queue only delays.  The first link of each flow is always one,
    as its egress queue's output."""
    E, N = len(e_src), len(n_ovh)
    S = 3 * E + N + n_ctrl * n_pcs
    n_ops = len(ops)
    transit = np.zeros(N, np.int64)
    for i in range(n_ops):
        r = data_route[ops[i]]
        for k in range(r_ptr[r], r_ptr[r + 1] - 1):
            transit[e_dst[r_edges[k]]] += 1
    router = np.zeros(N, np.bool_)
    for v in range(N):
        router[v] = transit[v] >= 2 and n_flit[v] and n_ovh[v] > 0
    load = np.zeros(E)
    for i in range(n_ops):
        r = data_route[ops[i]]
        most = np.inf
        for k in range(r_ptr[r], r_ptr[r + 1]):
            e = r_edges[k]
            if np.isfinite(e_bw[e]):
                load[e] += most / e_bw[e]
                most = min(most, e_bw[e])
            v = e_dst[e]
            if not n_flit[v] or router[v]:
                most = np.inf
    queued = load > 1.0 + 1e-12
    # sizes: per flow at most 2 + route length + n_pcs positions
    cap = 0
    for i in range(n_ops):
        r = data_route[ops[i]]
        cap += 2 * (r_ptr[r + 1] - r_ptr[r]) + 2 + n_pcs
    f_ptr = np.zeros(n_ops + 1, np.int64)
    f_nchain = np.zeros(n_ops, np.int64)
    f_n = np.zeros(n_ops)
    f_d0 = np.zeros(n_ops)
    f_ta = np.zeros(n_ops)
    f_tiso = np.zeros(n_ops)
    k_srv = np.zeros(cap, np.int64)
    k_npb = np.zeros(cap)
    k_delay = np.zeros(cap)
    k_saf = np.zeros(cap, np.bool_)
    k_need = np.zeros(cap)
    k_flow = np.zeros(cap, np.int64)
    places = (k_srv, k_npb, k_delay, k_saf, k_need, k_flow)
    s_kind = np.zeros(S, np.int8)
    s_ovh = np.zeros(S)
    for v in range(N):
        if router[v]:
            s_kind[3 * E + v] = ROUTER
            s_ovh[3 * E + v] = n_ovh[v]
    pcb = np.zeros(n_pcs, np.int64)
    K = 0
    for i in range(n_ops):
        o = ops[i]
        r = data_route[o]
        n = op_nbytes[o]
        s0 = F if n > F else n
        start = K
        d = n_ovh[e_src[r_edges[r_ptr[r]]]]
        d0 = -1.0
        dt = 0.0
        late = 0.0
        saf = False
        L = r_ptr[r + 1] - r_ptr[r]
        for kk in range(L):
            e = r_edges[r_ptr[r] + kk]
            if np.isfinite(e_bw[e]):
                server_link = kk == 0 or queued[e]
                for which in range(2):
                    if which == 0 and kk != 0:
                        continue
                    if which == 1 and not server_link:
                        continue
                    sid = E + 2 * e + (1 if op_code[o] == OP_SEND else 0) if which == 0 else e
                    K, d0, late = _add_place(places, K, sid, 1.0 / e_bw[e], n, i, d, dt, saf, d0, late)
                    d = 0.0
                    dt = 0.0
                    saf = False
                d += s0 / e_bw[e]
                if not server_link:
                    dt += s0 / e_bw[e]
            d += e_prop[e]
            dt += e_prop[e]
            v = e_dst[e]
            if kk + 1 < L and router[v]:
                K, d0, late = _add_place(places, K, 3 * E + v, 0.0, n, i, d, dt, saf, d0, late)
                d = 0.0
                dt = 0.0
                saf = False
                continue
            d += n_ovh[v]
            if kk + 1 < L and not n_flit[v]:
                saf = True
        n_chain = K - start
        ctrl = n_hbm[e_dst[r_edges[r_ptr[r + 1] - 1]]]
        n_pc = 0
        if ctrl >= 0:
            pcb[:] = 0
            addr = op_addr[o]
            nf = (n + F - 1) // F
            for j in range(nf):
                q = ((addr + j * F) >> pc_shift) % n_pcs
                pcb[q] += min(F, n - j * F)
            k_delay[K - 1] = d
            k_saf[K - 1] = saf
            for q in range(n_pcs):
                if pcb[q] > 0:
                    k_srv[K] = 3 * E + N + ctrl * n_pcs + q
                    k_npb[K] = commit_ns / F
                    k_need[K] = pcb[q]
                    k_flow[K] = i
                    K += 1
                    n_pc += 1
        # alone
        a0 = d0
        a1 = d0
        for j in range(n_chain):
            k = start + j
            if s_kind[k_srv[k]] == ROUTER:
                a0 = a0 + s_ovh[k_srv[k]]
                a1 = max(a1, a0)
            else:
                a1 = max(a1, a0 + n * k_npb[k])
            if j + 1 < n_chain:
                if k_saf[k]:
                    a0 = a1 + k_delay[k]
                    a1 = a0
                else:
                    a0 += k_delay[k]
                    a1 += k_delay[k]
        if n_pc > 0:
            best = -np.inf
            for j in range(n_chain, n_chain + n_pc):
                k = start + j
                best = max(best, max(a1 + d, a0 + d + k_need[k] * k_npb[k]))
            a1 = best
        f_ptr[i + 1] = K
        f_nchain[i] = n_chain
        f_n[i] = n
        f_d0[i] = d0
        f_ta[i] = dt - late
        f_tiso[i] = a1
    return (f_ptr, f_nchain, f_n, f_d0, f_ta, k_srv[:K].copy(), k_npb[:K].copy(), k_delay[:K].copy(),
            k_saf[:K].copy(), k_need[:K].copy(), k_flow[:K].copy(), s_kind, s_ovh, f_tiso)


def build_flows(p: Program, plan):
    """The flows of ``p``'s ops that share a resource (``plan.share``, kbfast.fast.plan) and move bytes:
    (Flows, the flow of each op or -1, the op of each flow, each flow's ``T_iso``)."""
    fabric, hbm = plan.lowered.fabric, plan.lowered.hbm
    ops = np.flatnonzero(plan.share & (p.op_nbytes > 0) & (plan.data_route >= 0)).astype(np.int64)
    n_ctrl = int(fabric.n_hbm.max(initial=-1)) + 1
    out = _build(ops, plan.data_route.astype(np.int64), p.op_code.astype(np.int64), p.op_nbytes.astype(np.int64),
                 plan.lowered.routes.op_addr.astype(np.int64), fabric.n_ovh, fabric.n_flit,
                 fabric.n_hbm.astype(np.int64), fabric.e_src.astype(np.int64), fabric.e_dst.astype(np.int64),
                 fabric.e_bw, fabric.e_prop, fabric.r_ptr, fabric.r_edges.astype(np.int64), np.int64(hbm.flit_bytes),
                 np.int64(hbm.pc_shift), np.int64(hbm.n_pcs), float(hbm.commit_ns), np.int64(n_ctrl))
    f_of_op = np.full(p.n_ops, -1, np.int64)
    f_of_op[ops] = np.arange(len(ops))
    return Flows(*out[:13]), f_of_op, ops, out[13]
