"""Flow-level schedule of a Program: agents, DMA channels and contention (design §6).

Each DMA is a *flow* whose isolated completion comes from the closed form
(``kbfast.fast.closed_form``).  Agents run their ops in program order with the
exact-mode rules for channels (capacity 1 per direction, held through the round
trip, FIFO), blocking/asynchronous ops, WAIT and COMPUTE.  Three modes:

* ``LOWER``: every flow takes its isolated latency (contention ignored, no
  read/write switch history): a lower bound of exact mode when each agent has
  its PE's resources to itself (``kbfast.fast.evaluate`` makes them private).
* ``POINT``: flows that share an edge with another flow of the Program drain
  their bytes as a fluid under max-min fair sharing of the shared edges (each
  flow also capped by its own bottleneck), from the moment their head reaches
  their first shared edge (``head``).  A flow ends at
  ``max(begin + L_iso, drain_end + (L_iso - head - bytes/bottleneck))``.  PC switch
  penalties follow the history of each controller.  A flow that never shares
  an edge while active keeps its isolated latency, so contention-free programs
  equal exact mode (parity P1).
* ``UPPER``: every flow takes ``L_iso + extra[o]``, where ``extra`` bounds the
  work that overlapping flows can put ahead of it (``kbfast.fast.bounds``).

The agents' rules are kbfast.sim.agents', inlined into the event loop (its module notes say why).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from kbfast.sim.heap import heap_new, heap_pop, heap_reset, unpack
from kbfast.sim.fabric import bottleneck, ctrl_latency, pc_of, pc_table_size
from kbfast.fast.closed_form import (D2H, H2D, PE_READ, PE_REQ, new_buf, new_pcs, reset_buf, reset_pcs,
                                     train_exit_last, transfer_end)
from kbfast.fast.waterfill import _rates
from kbfast.sim.agents import (EV_AGENT, EV_CHAN_FREE, EV_OP_DONE, OP_DMA_WRITE, OP_SEND, handle, ipcq_arrive,
                               new_state, push)

LOWER, POINT, UPPER = 0, 1, 2
# schedule event kinds (0..7 belong to kbfast.sim.agents)
EV_JOIN, EV_FLOW_DONE, EV_SOLO_DRAIN = np.int64(8), np.int64(9), np.int64(10)   # np.int64: see kbfast.sim.agents


Sharing = namedtuple("Sharing", [
    "sh_span",       # int64 [O, 2]  per op: its shared resources are sh_res[sh_span[o, 0]:sh_span[o, 1]]
    "sh_res",        # int64 [*]     shared resource ids (groups of wires or node workers the same flows use)
    "max_route",     # int           the longest route, in edges
    "res_cap",       # float64 [n_res]  per resource: capacity, B/ns
    "res_ovh",       # float64 [n_res]  per resource: overhead, ns (0 on a wire; weights in _w)
    "ch_iso_route",  # int64 [C]     per channel: a route of the same shape whose isolated latency it shares
    "dma_iso_op",    # int64 [O]     per PE DMA: the first DMA whose isolated latency it shares, else -1
                     #               (kbfast.fast.plan.dma_iso_ops)
])


@njit(cache=True)
def head_offsets(data_route, op_nbytes, fabric, shared_edge, shared_node, F):  # pragma: no cover - jitted
    """Zero-load time from a flow's start until its head reaches its first shared resource (0 if none):
    a shared edge, or a shared node worker (reached at the end of the edge into it).

    Source overhead, then per edge the first flit's serialization and propagation and the
    next node's overhead; a store-and-forward node on the way adds the rest of the train.

    Parameters: ``data_route`` int64 [O] (the route carrying each op's payload, or -1), ``op_nbytes``
    int64 [O], ``fabric`` (:class:`kbfast.sim.lowering.Fabric`), ``shared_edge`` bool [E] and
    ``shared_node`` bool [N] (in a shared resource), ``F`` the flit size in bytes.  Returns float64 [O], ns.
    """
    n_ovh, n_flit, _, e_src, e_dst, e_bw, _, e_prop, r_ptr, r_edges = fabric
    out = np.zeros(len(data_route))
    for o in range(len(data_route)):
        r = data_route[o]
        if r < 0 or op_nbytes[o] == 0:
            continue
        n = (op_nbytes[o] + F - 1) // F
        s0 = F if n > 1 else op_nbytes[o]
        t = n_ovh[e_src[r_edges[r_ptr[r]]]]
        bn = np.inf
        for k in range(r_ptr[r], r_ptr[r + 1]):
            e = r_edges[k]
            if shared_edge[e]:
                break
            bn = min(bn, e_bw[e])
            if shared_node[e_dst[e]]:
                t += s0 / e_bw[e] + e_prop[e]
                break
            t += s0 / e_bw[e] + e_prop[e] + n_ovh[e_dst[e]]
            if not n_flit[e_dst[e]]:
                t += (op_nbytes[o] - s0) / bn
                bn = np.inf
        else:
            t = 0.0
        out[o] = t
    return out


@njit(cache=True)
def schedule(mode, extra, share, head, iso, fabric, hbm, P, routes, sharing, W):  # pragma: no cover - jitted
    """:func:`schedule_inline` as a kernel of its own, for callers in Python, in the scratch ``W``
    (:func:`scratch` of a Program of the same shape, put back at its start here, so that one serves many
    runs); the contention flags returned are copies, ``W``'s own serve the next run.  A kernel inlines
    :func:`schedule_inline` instead: calling this one would make Numba optimise the event loop once more."""
    reset_scratch(W)
    S, o_contended, r_contended = schedule_inline(mode, extra, share, head, iso, fabric, hbm, P, routes, sharing,
                                                  new_state(P), W)
    return S, o_contended.copy(), r_contended.copy()


@njit(cache=True, inline="always")
def schedule_inline(mode, extra, share, head, iso, fabric, hbm, P, routes, sharing, S, W):  # pragma: no cover
    """Run the agents (kbfast.sim.agents) in the agents' state ``S`` and the scratch ``W``, both at their start
    (:func:`~kbfast.sim.agents.new_state` and :func:`scratch`, or a kernel's earlier ones put back with
    :func:`~kbfast.sim.agents.reset_state` and :func:`reset_scratch`: it runs many points without allocating);
    returns (S, op_contended, resource_contended).

    Parameters (docs/README.md "Kernel contracts"; the first four from :func:`kbfast.sim.lowering.lower`)
    ----------
    mode : int
        ``LOWER`` (no contention), ``POINT`` (fluid max-min sharing) or ``UPPER`` (plus ``extra``).
    extra : float64 [O]
        per op: the interference bound added to its isolated time in ``UPPER`` mode (0 otherwise).
    share : bool [O]
        per op: its payload route has a shared resource.
    head : float64 [O]
        per op: zero-load time until its head reaches its first shared resource (:func:`head_offsets`).
    iso : float64 [O, 1 + n_pcs]
        per op: memoised isolated latency (column 0, NaN = not computed yet) and, for a DMA, its last commit
        on each PC relative to its start (a posted read's bursts occupy the PCs after it); updated in place.
    fabric, hbm, P, routes : Fabric, Hbm, Prog, OpRoutes
        the Program's compact fabric, HBM constants, agents and ops, and routes.
    sharing : Sharing
        the shared resources of each flow (:func:`kbfast.fast.plan.plan_fast`).

    Returns the agents' state ``S`` (op and agent times), bool [O] whether each op shared a resource
    with another active flow, and bool [n_res] whether each resource was contended.

    ``iso`` memoises each flow's isolated latency (NaN = not yet computed) across the
    lower, point and upper runs of the same sizes.

    Every DMA and every IPCQ SEND's data is a flow.  Flow ``o``'s shared resources are
    ``sh_res[sh_span[o, 0]:sh_span[o, 1]]`` (stored once per route; each is a group of wires or of
    node workers that the same flows use, see ``kbfast.fast.plan._merge_identical``), with
    capacity ``res_cap`` and overhead ``res_ovh`` (0 on a wire; weights in :func:`_w`).

    POINT mode keeps the fluid small: a flow that meets no other in-flight flow on
    its shared resources runs *solo* at its bottleneck rate with a scheduled end;
    only when another flow joins one of its resources is it moved, with its
    remaining bytes, into the fluid set.  Trains leave their source FIFO: a flow
    joins only after the previous flow on its first edge has drained (conservative
    when the two routes part before their bottleneck).
    """
    _run(mode, extra, share, head, iso, fabric, hbm, P, S, W, routes, sharing)
    return S, W.o_contended, W.r_contended


Scratch = namedtuple("Scratch", [
    "pc_dir", "pc_avail", "pcs", "buf", "lat", "start", "rem", "rate", "bn", "fixed", "join_t", "ver", "solo", "in_fluid",
    "active", "users", "holder", "cap_rem", "weight", "r_contended", "o_contended", "eg_last",
    "eg_waiter", "drained", "heap", "pend", "mr", "mw", "m_ptr", "k_bn", "k_rate", "k_frozen", "route_nbytes",
    "route_iso", "route_bn", "uf", "res_first", "order", "c_ptr", "rel", "lat_free"])


@njit(cache=True)
def scratch(P, fabric, hbm, sharing):  # pragma: no cover - jitted
    """Fresh per-run arrays of :func:`_run` for Program ``P`` (per op, per shared resource, per edge; the event
    heap), at their start (:func:`reset_scratch`)."""
    n_entries = np.int64(0)
    for o in range(len(sharing.sh_span)):
        n_entries += sharing.sh_span[o, 1] - sharing.sh_span[o, 0]
    n_res, n_edges, n_pcs = len(sharing.res_cap), len(fabric.e_src), hbm.n_pcs
    n_pc_dir = pc_table_size(fabric.n_hbm, n_pcs)
    max_route, n_routes = sharing.max_route, len(fabric.r_ptr) - 1
    n_ops = len(P.op_code)
    W = Scratch(
        pc_dir=np.empty(n_pc_dir, np.int8), pc_avail=np.empty(n_pc_dir),
        pcs=new_pcs(n_pcs), buf=new_buf(max_route),
        lat=np.empty(n_ops), start=np.empty(n_ops), rem=np.empty(n_ops), rate=np.empty(n_ops),
        bn=np.empty(n_ops), fixed=np.empty(n_ops), join_t=np.empty(n_ops), ver=np.empty(n_ops, np.int64),
        solo=np.empty(n_ops, np.bool_), in_fluid=np.empty(n_ops, np.bool_), active=np.empty(n_ops, np.int64),
        users=np.empty(n_res, np.int64), holder=np.empty(n_res, np.int64),
        cap_rem=np.empty(n_res), weight=np.empty(n_res), r_contended=np.empty(n_res, np.bool_),
        o_contended=np.empty(n_ops, np.bool_),
        eg_last=np.empty(2 * n_edges, np.int64),   # per (first edge, virtual channel): the last train
        eg_waiter=np.empty(n_ops, np.int64), drained=np.empty(n_ops, np.bool_),
        heap=heap_new(6 * (len(P.a_start) + n_ops + len(P.ch_src)) + 16), pend=np.empty(n_ops + 1, np.int64),
        mr=np.empty(n_entries, np.int64), mw=np.empty(n_entries), m_ptr=np.empty(n_ops + 1, np.int64),
        k_bn=np.empty(n_ops), k_rate=np.empty(n_ops), k_frozen=np.empty(n_ops, np.bool_),
        route_nbytes=np.empty(n_routes, np.int64), route_iso=np.empty(n_routes),   # per route: last SEND's iso
        route_bn=np.empty(n_routes),                                               # and its bottleneck
        uf=np.empty(n_ops, np.int64), res_first=np.empty(n_res, np.int64),      # rate components
        order=np.empty(n_ops, np.int64), c_ptr=np.empty(n_ops + 1, np.int64),
        rel=np.empty(n_ops),                # per read freeing its channel early: end - release, ns
        lat_free=np.empty(n_ops))           # per DMA: its latency without waiting for busy PCs
    reset_scratch(W)
    return W


@njit(cache=True, _nrt=False)
def reset_scratch(W):  # pragma: no cover - jitted
    """Put the arrays of :func:`scratch` back at the start of a run (the others are written before they are
    read): PCs untouched and idle, no flow begun, every resource free, the queue and the memos empty."""
    W.pc_dir[:] = -1
    W.pc_avail[:] = -np.inf
    reset_pcs(W.pcs)
    reset_buf(W.buf)
    W.lat[:] = 0.0
    W.start[:] = 0.0
    W.rem[:] = 0.0
    W.rate[:] = 0.0
    W.bn[:] = np.inf
    W.fixed[:] = 0.0
    W.join_t[:] = 0.0
    W.ver[:] = 0
    W.solo[:] = False
    W.in_fluid[:] = False
    W.users[:] = 0
    W.holder[:] = -1
    W.cap_rem[:] = 0.0
    W.weight[:] = 0.0
    W.r_contended[:] = False
    W.o_contended[:] = False
    W.eg_last[:] = -1
    W.eg_waiter[:] = -1
    W.drained[:] = False
    heap_reset(W.heap)
    W.route_nbytes[:] = -1
    W.route_bn[:] = np.nan
    W.res_first[:] = -1
    W.rel[:] = -1.0
    W.lat_free[:] = 0.0


# No NRT (here and in the helpers the loop calls): the loop allocates nothing, and without
# NRT the inlined runtime helpers pay no atomic reference counting on the many arrays of
# P and S, which otherwise took most of the loop's time.  Allocation happens in schedule().
# One handler per event kind, inlined into the loop (a call would pass dozens of arrays per event).
@njit(cache=True, _nrt=False)
def _run(mode, extra, share, head, iso, fabric, hbm, P, S, W, routes, sharing):  # pragma: no cover - jitted
    """The event loop of :func:`schedule` (same parameters, plus the agents' state ``S`` and the scratch
    arrays ``W``)."""
    heap, active, rem, rate = W.heap, W.active, W.rem, W.rate
    n_active = np.int64(0)
    size = np.int64(0)
    seq = np.int64(0)
    for a in range(len(P.a_start)):
        size, seq = push(heap, size, seq, P.a_start[a], EV_AGENT, a, 0, 0)
    now = 0.0
    # The fluid set's remaining bytes are materialised lazily: ``rem`` holds them as of ``t_rem``,
    # and the rates (and the next drain time ``t_drain``) are recomputed once per instant, after
    # every event of that instant has changed the set ("dirty" implies t_rem == now).
    t_rem = 0.0
    t_drain = np.inf
    dirty = False
    while size > 0 or n_active > 0:
        t_heap = heap[0][0] if size > 0 else np.inf
        if dirty and t_heap > now:
            dirty = False
            _rates(active, n_active, rate, P.op_nbytes, sharing, W)
            t_drain = np.inf
            for k in range(n_active):
                o = active[k]
                t_drain = min(t_drain, now + rem[o] / rate[o])
        if n_active > 0 and not dirty and t_drain <= t_heap:
            t_rem = _advance(active, n_active, rem, rate, t_rem, t_drain)
            now = t_drain
            size, seq, n_active = _on_fluid_drain(now, P, W, sharing, head, size, seq, n_active)
            dirty = True
            continue
        t, payload = heap_pop(heap, size)
        size -= 1
        now = t
        kind, x, y, z = unpack(payload)
        n_pend = 0
        if kind == EV_JOIN:
            size, seq, n_active, t_rem, joined = _on_join(now, x, P, W, sharing, size, seq, n_active, t_rem)
            dirty = dirty or joined
            continue
        if kind == EV_SOLO_DRAIN:
            if y == W.ver[x] and W.solo[x]:
                W.solo[x] = False
                size, seq = _drained(x, now, max(W.start[x] + W.lat[x], now + W.fixed[x]), heap, size, seq,
                                     W.users, W.holder, sharing.sh_span, sharing.sh_res, W.drained, W.eg_waiter,
                                     W.start, head, W.ver, W.rel)
            continue
        if kind == EV_FLOW_DONE:
            if y != W.ver[x]:
                continue
            if P.op_code[x] == OP_SEND:
                size, seq = ipcq_arrive(x, now, P, S, heap, size, seq)
                continue
            kind = EV_OP_DONE   # a DMA's end: handled as the agents' own (one inlined copy of op_done)
        # kbfast.sim.agents; it raises on a kind nobody handles
        size, seq, n_pend = handle(kind, x, y, now, P, S, heap, size, seq, W.pend, np.int64(0))
        for k in range(n_pend):
            size, seq = _begin_flow(now, W.pend[k], mode, extra, share, head, iso, fabric, hbm, P, S, W, routes,
                                    sharing, size, seq)


@njit(cache=True, inline="always")
def _on_fluid_drain(now, P, W, sharing, head, size, seq, n_active):  # pragma: no cover - jitted
    """The fluid set has drained to ``now``: every flow with nothing left (or less than ``now`` can resolve:
    late in a long run, a tiny remainder's drain time rounds to ``now``, and the loop would make no
    progress) leaves it and ends (:func:`_drained`).  Returns (size, seq, n_active)."""
    active, rem, rate = W.active, W.rem, W.rate
    k = 0
    while k < n_active:
        o = active[k]
        if rem[o] <= 1e-9 * max(P.op_nbytes[o], 1) or now + rem[o] / rate[o] <= now:
            n_active -= 1
            active[k] = active[n_active]
            W.in_fluid[o] = False
            size, seq = _drained(o, now, max(W.start[o] + W.lat[o], now + W.fixed[o]), W.heap, size, seq, W.users,
                                 W.holder, sharing.sh_span, sharing.sh_res, W.drained, W.eg_waiter, W.start, head,
                                 W.ver, W.rel)
        else:
            k += 1
    return size, seq, n_active


@njit(cache=True, inline="always")
def _on_join(now, o, P, W, sharing, size, seq, n_active, t_rem):  # pragma: no cover - jitted
    """``EV_JOIN``: flow ``o``'s head reaches its first shared resource.  One pass over its resources counts
    the users; ``o`` holds those it is alone on (read only while ``o`` is solo: a stale holder that is not
    solo is skipped).  At its first shared resource ``o`` enters the fluid set, and every solo flow holding
    one of its resources follows it (a solo flow is the only user of each of its resources).  Alone on
    all of them, it runs solo at its bottleneck rate with a scheduled drain.
    Returns (size, seq, n_active, t_rem, whether the fluid set changed)."""
    sh_span, sh_res, users, holder, solo = sharing.sh_span, sharing.sh_res, W.users, W.holder, W.solo
    W.join_t[o] = now
    contended = False
    for j in range(sh_span[o, 0], sh_span[o, 1]):
        r = sh_res[j]
        users[r] += 1
        if users[r] == 1:
            holder[r] = o
            continue
        if not contended:
            contended = True
            t_rem = _advance(W.active, n_active, W.rem, W.rate, t_rem, now)
            W.in_fluid[o] = True
            W.active[n_active] = o
            n_active += 1
        g = holder[r]
        if g >= 0 and solo[g]:
            n_active = _pull(g, now, P, solo, W.in_fluid, W.rem, W.bn, W.join_t, W.ver, W.active, n_active)
    if not contended:
        solo[o] = True
        size, seq = push(W.heap, size, seq, now + P.op_nbytes[o] / W.bn[o], EV_SOLO_DRAIN, o, W.ver[o], 0)
    return size, seq, n_active, t_rem, contended


@njit(cache=True, inline="always")
def _begin_flow(now, o, mode, extra, share, head, iso, fabric, hbm, P, S, W, routes, sharing, size,
                seq):  # pragma: no cover - jitted
    """Begin flow ``o``, which an agent released at ``now``: its isolated latency (a SEND's data to the
    receiver's ``pe_dma``: source overhead, train, reassembly and its overhead; a DMA's from the closed
    form, with the PC history in ``POINT``), plus ``extra`` in ``UPPER``; then either its end is scheduled,
    or (``POINT``, on a shared resource) its head joins the fluid, FIFO behind the previous train of its
    source's virtual channel.  Returns (size, seq).

    Inlined into the event loop as one handler (a call would pass dozens of arrays per event), hence its
    length: the SEND, DMA and PC-history cases share the latency and the join below them."""
    n_ovh, n_flit, e_src, e_dst, e_c, e_prop, r_ptr, r_edges = fabric.n_ovh, fabric.n_flit, fabric.e_src, \
        fabric.e_dst, fabric.e_c, fabric.e_prop, fabric.r_ptr, fabric.r_edges
    n_pcs, F = hbm.n_pcs, hbm.flit_bytes
    lat, iso_pcs, buf = W.lat, W.pcs, W.buf
    nbytes = P.op_nbytes[o]
    W.start[o] = now
    if P.op_code[o] == OP_SEND:
        r = routes.ch_route[P.op_target[o]]
        if np.isnan(iso[o, 0]):
            q = sharing.ch_iso_route[P.op_target[o]]             # the first route of r's shape
            if W.route_nbytes[q] != nbytes:                      # else: a SEND of this size on that shape
                t_src = n_ovh[e_src[r_edges[r_ptr[q]]]]
                last, _, _ = train_exit_last(r_edges, r_ptr[q], r_ptr[q + 1], e_dst, e_c, e_prop, n_ovh, n_flit,
                                             t_src, nbytes, F, buf, 0)
                W.route_nbytes[q] = nbytes
                W.route_iso[q] = last + n_ovh[e_dst[r_edges[r_ptr[q + 1] - 1]]]
            iso[o, 0] = W.route_iso[q]
        lat[o] = iso[o, 0]
        route = r
    else:
        pc_dir, pc_avail, op_addr = W.pc_dir, W.pc_avail, routes.op_addr
        write = P.op_code[o] == OP_DMA_WRITE
        if P.a_host[S.op_agent[o]]:
            kind_t = H2D if write else D2H
        else:
            kind_t = PE_READ if (hbm.read_accept and not write) else PE_REQ
        fwd = routes.op_route[o]
        rev = routes.op_rroute[o]
        ctrl = fabric.n_hbm[e_dst[r_edges[r_ptr[fwd + 1] - 1]]]
        d = 0 if write else 1
        # POINT follows each controller's history: PC read/write direction (switch penalty) and
        # when each PC is free after a read whose bursts outlive it (PE_READ; concurrent flows'
        # commits are the fluid's business); LOWER and UPPER take none.  Without any of it the
        # isolated latency (and a read's per-PC finishes) are computed once per op.
        history = mode == POINT and ctrl >= 0
        busy = False
        waits = False
        if history:
            for q in range(n_pcs):
                g = ctrl * n_pcs + q
                iso_pcs[0, q] = hbm.switch_penalty_ns if (pc_dir[g] >= 0 and pc_dir[g] != d) else 0.0
                iso_pcs[1, q] = pc_avail[g] - now if pc_avail[g] > now else -np.inf
                waits = waits or iso_pcs[1, q] > -np.inf
                busy = busy or waits or iso_pcs[0, q] > 0.0
        record = history and kind_t == PE_READ and nbytes > 0
        g = sharing.dma_iso_op[o]       # o's memo is g's when g has it (the same inputs, at these bytes)
        same = g >= 0 and g != o and P.op_nbytes[g] == nbytes
        if not busy and same and np.isnan(iso[o, 0]) and not np.isnan(iso[g, 0]):
            for q in range(1 + n_pcs):
                iso[o, q] = iso[g, q]
        if busy or np.isnan(iso[o, 0]):
            if not history:         # no penalties, every PC idle (set only when the closed form runs)
                for q in range(n_pcs):
                    iso_pcs[0, q] = 0.0
                    iso_pcs[1, q] = -np.inf
            lat[o] = transfer_end(kind_t, 0.0, nbytes, op_addr[o], fwd, rev, fabric, hbm, iso_pcs, buf,
                                  0)      # memo 0: one set of tables per run
            if not busy:
                iso[o, 0] = lat[o]
                for q in range(n_pcs):
                    iso[o, 1 + q] = iso_pcs[2, q]
                if same and np.isnan(iso[g, 0]):
                    for q in range(1 + n_pcs):
                        iso[g, q] = iso[o, q]
        else:
            lat[o] = iso[o, 0]
            if record:
                for q in range(n_pcs):
                    iso_pcs[2, q] = iso[o, 1 + q]
        if record:
            for q in range(n_pcs):
                if iso_pcs[2, q] > -np.inf:
                    pc_avail[ctrl * n_pcs + q] = now + iso_pcs[2, q]
        # The part after the drain (the fluid's ``fixed``) excludes waiting for busy PCs: that wait
        # overlaps the drain; ``lat`` keeps it as the flow's earliest end.
        W.lat_free[o] = lat[o]
        if waits and share[o]:
            for q in range(n_pcs):
                iso_pcs[1, q] = -np.inf
            W.lat_free[o] = transfer_end(kind_t, 0.0, nbytes, op_addr[o], fwd, rev, fabric, hbm, iso_pcs, buf, 0)
        if mode == POINT:
            unit = hbm.burst_bytes if kind_t == D2H else F
            nunits = (nbytes + unit - 1) // unit
            for q in range(min(n_pcs, nunits)):
                pc = pc_of(op_addr[o] + q * hbm.burst_bytes, hbm.pc_shift, n_pcs)   # flit = burst here
                pc_dir[ctrl * n_pcs + pc] = d
        route = rev if kind_t == D2H else fwd
        a = S.op_agent[o]
        if P.read_release_early and not write and not P.a_host[a] and not (P.a_alone[a] and not P.op_async[o]):
            # The channel is free when the controller took the last flit: the end less the response.
            # (Not scheduled when no op can queue for it meanwhile: its agent is alone on its PE and
            # waits for this read, and the read's end frees the channel too, kbfast.sim.agents.op_done.)
            W.rel[o] = ctrl_latency(r_edges, r_ptr[rev], r_ptr[rev + 1], e_dst, e_prop, n_ovh) + \
                n_ovh[e_dst[r_edges[r_ptr[rev + 1] - 1]]]
    if mode == UPPER:
        lat[o] += extra[o]
    if mode == POINT and share[o] and nbytes > 0:
        bn = W.bn
        if np.isnan(W.route_bn[route]):
            W.route_bn[route] = bottleneck(r_edges, r_ptr[route], r_ptr[route + 1], fabric.e_bw)
        bn[o] = W.route_bn[route]
        W.fixed[o] = (W.lat_free[o] if P.op_code[o] != OP_SEND else lat[o]) - head[o] - nbytes / bn[o]
        W.rem[o] = nbytes
        # A source's trains leave in FIFO order per virtual channel; a PE's DMA (vc_compute)
        # and IPCQ (vc_comm) trains share its egress link (spec_ccl §2.8).
        vc = 2 * r_edges[r_ptr[route]] + (1 if P.op_code[o] == OP_SEND else 0)
        prev = W.eg_last[vc]
        W.eg_last[vc] = o
        if prev >= 0 and not W.drained[prev]:
            W.eg_waiter[prev] = o          # FIFO behind the previous train of this channel
        else:
            size, seq = push(W.heap, size, seq, now + head[o], EV_JOIN, o, 0, 0)
    else:
        size, seq = push(W.heap, size, seq, now + lat[o], EV_FLOW_DONE, o, W.ver[o], 0)
        if W.rel[o] >= 0.0:
            size, seq = push(W.heap, size, seq, now + lat[o] - W.rel[o], EV_CHAN_FREE, o, 0, 0)
    return size, seq


@njit(cache=True, _nrt=False)
def _advance(active, n_active, rem, rate, t_rem, t):  # pragma: no cover - jitted
    """Drain the fluid set at its current rates from ``t_rem`` to ``t``; returns the new ``t_rem``."""
    if t > t_rem:
        dt = t - t_rem
        for k in range(n_active):
            o = active[k]
            rem[o] -= rate[o] * dt
    return t


@njit(cache=True, _nrt=False, inline="always")
def _drained(o, now, end, heap, size, seq, users, holder, sh_span, sh_res, drained, eg_waiter, start, head,
             ver, rel):  # pragma: no cover - jitted
    """A flow's bytes have passed: free its resources, schedule its end (and an early channel release,
    ``rel``), release a train waiting behind it."""
    if rel[o] >= 0.0:
        size, seq = push(heap, size, seq, max(now, end - rel[o]), EV_CHAN_FREE, o, 0, 0)
    drained[o] = True
    for j in range(sh_span[o, 0], sh_span[o, 1]):
        r = sh_res[j]
        users[r] -= 1
        if holder[r] == o:
            holder[r] = -1
    size, seq = push(heap, size, seq, end, EV_FLOW_DONE, o, ver[o], 0)
    w = eg_waiter[o]
    if w >= 0:
        size, seq = push(heap, size, seq, max(now, start[w] + head[w]), EV_JOIN, w, 0, 0)
    return size, seq


@njit(cache=True)
def _pull(g, now, P, solo, in_fluid, rem, bn, join_t, ver, active, n_active):  # pragma: no cover - jitted
    """Move solo flow ``g`` into the fluid set: it has run at its bottleneck rate since it joined."""
    solo[g] = False                  # (its holder entries go stale)
    ver[g] += 1                      # its scheduled solo drain is void now
    rem[g] = max(P.op_nbytes[g] - bn[g] * (now - join_t[g]), 0.0)
    in_fluid[g] = True
    active[n_active] = g
    return n_active + 1
