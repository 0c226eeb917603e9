"""Many configuration points of one Program in one jitted call (design §6 "batched").

A collective's op structure does not depend on the tile size, the IPCQ buffer
kind or the ring depth, so the Program is built (and symbolically checked) once
and planned once.  Each point then only rescales the message and tile DMA
sizes and the MATH durations and swaps the channels' slot tier and
``n_slots``; the kernel loops over points with no Python work per point and
runs the lower, point and upper schedules of each.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from kbfast.errors import KbfastError
from kbfast.fast.bounds import interference
from kbfast.fast.plan import plan_fast, run_bound
from kbfast.fast.runs import run_charges_all
from kbfast.fast.schedule import LOWER, POINT, UPPER, head_offsets, reset_scratch, schedule_inline, scratch
from kbfast.ir import BUFFER_KINDS, Op, Program
from kbfast.sim.agents import OP_MATH, Prog, new_state, reset_state


# The points, sorted by size, then buffer kind, then ``n_slots`` descending: per point the message size
# (float64, bytes), the IPCQ buffer kind (int64, index into BUFFER_KINDS) and the ring depth (int64).
SizePoints = namedtuple("SizePoints", ["sizes", "kinds", "n_slots"])

# How the Program's ops follow the size: per op its bytes per byte of size (0: fixed) ``ratio`` and a MATH
# op's elements per byte of size ``math_n`` (float64 [O]); the MATH cost ``max(math_ovh, n_elem *
# math_per_elem)`` and the element size ``elem_bytes``.
Scaling = namedtuple("Scaling", ["ratio", "math_n", "math_ovh", "math_per_elem", "elem_bytes"])

# Per buffer kind the slot tier's setup (ns) and bandwidth (GB/s), float64 [K]; per channel and buffer kind
# the PE <-> bank hop bandwidth ``hop_bw`` (float64 [C, K]).
SlotTiers = namedtuple("SlotTiers", ["setup", "bw", "hop_bw"])

# The size-independent plan of kbfast.fast.plan.plan_fast that the kernel reads (Plan's fields of the
# same names).
PlanArrays = namedtuple("PlanArrays", ["share", "data_route", "shared_edge", "shared_node"])


@njit(cache=True)
def _scaled(P, size, scale):  # pragma: no cover - jitted
    """Per op, for tile ``size``: bytes (moving ops scale with the size; a MATH op's element count) and arg
    (a MATH op's duration), by ``scale`` (:data:`Scaling`)."""
    ratio, math_n, math_ovh, math_per_elem, elem_bytes = (scale.ratio, scale.math_n, scale.math_ovh,
                                                          scale.math_per_elem, scale.elem_bytes)
    n_ops = len(P.op_code)
    nbytes = np.empty(n_ops, np.int64)
    arg = P.op_arg.copy()
    for o in range(n_ops):
        nbytes[o] = max(np.int64(size * ratio[o]), 1) if ratio[o] > 0.0 else P.op_nbytes[o]
        if P.op_code[o] == OP_MATH:
            n_elem = max(np.int64(size * math_n[o] / elem_bytes), 1)
            nbytes[o] = n_elem
            arg[o] = max(math_ovh, n_elem * math_per_elem)
    return nbytes, arg


@njit(cache=True)
def points_kernel(pts, scale, tiers, launch, plan, bounds, runs, fabric, hbm, P, routes,
                  sharing):  # pragma: no cover - jitted
    """Per point: (latency, lower, upper, contention, ring peak) with latency = max agent finish - launch.

    Points come sorted by size, then buffer kind, then ``n_slots`` descending.  What depends on the
    size only (bytes, head offsets, interference bound, isolated latencies) is computed once per
    distinct size.  A size and kind whose three runs blocked no SEND give the same runs for every
    ``n_slots`` above their ring peak (``kbfast.sim.agents``): those points reuse them.  One loop over the
    points, and one call site of the schedule (inlined into this kernel once): hence its length.

    Parameters
    ----------
    pts : SizePoints
        the points (sorted as above).
    scale : Scaling
        how the ops' bytes and MATH durations follow the size.
    tiers : SlotTiers
        per buffer kind the slot tier, per channel and kind the hop bandwidth.
    launch : float
        the launch time, ns: latencies count from it.
    plan : PlanArrays
        and ``bounds`` (BoundTables): the plan of :func:`kbfast.fast.plan.plan_fast` (size-independent).
    runs : RunCoefs
        the run bound's coefficients of ``bounds`` (:func:`kbfast.fast.plan.run_bound`).
    fabric, hbm, P, routes, sharing :
        the kernel inputs of :func:`kbfast.fast.schedule.schedule` (``P`` at the largest size).
    """
    sizes, kinds, n_slots = pts.sizes, pts.kinds, pts.n_slots
    tier_setup, tier_bw, hop_bw = tiers.setup, tiers.bw, tiers.hop_bw
    share, data_route, shared_edge, shared_node = plan.share, plan.data_route, plan.shared_edge, plan.shared_node
    n_pts = len(sizes)
    out = np.empty((n_pts, 5))
    n_ops = len(P.op_code)
    n_ch = len(P.ch_src)
    zero = np.zeros(n_ops)
    no_posted = np.zeros(n_ops, np.bool_)   # reads charged for commits too: valid, looser
    no_windows = np.bool_(False)            # not the literal False: one compiled interference for both callers
    no_offsets = np.zeros(len(bounds.res))  # whole windows (none are used here)
    iso = np.full((n_ops, 1 + hbm.n_pcs), np.nan)
    ch_nslots = np.empty(n_ch, np.int64)
    ch_setup = np.empty(n_ch)
    ch_tier_bw = np.empty(n_ch)
    ch_hop_bw = np.empty(n_ch)
    finish = np.empty(3)   # per mode: the last agent's finish
    S = new_state(P)       # the runs' state and scratch, put back at the start of each run
    W = scratch(P, fabric, hbm, sharing)
    free = -1              # index of the last point of this size and kind whose runs blocked no SEND
    for i in range(n_pts):
        new_size = i == 0 or sizes[i] != sizes[i - 1]
        if new_size:
            iso[:] = np.nan
            nbytes, arg = _scaled(P, sizes[i], scale)
            head = head_offsets(data_route, nbytes, fabric, shared_edge, shared_node, hbm.flit_bytes)
            extra = (interference(bounds, nbytes, hbm.flit_bytes, zero, zero, no_windows, zero, no_posted, runs.done,
                                  no_offsets, no_offsets)
                     + run_charges_all(bounds, runs, nbytes, hbm.flit_bytes))                    # window-free
        k = kinds[i]
        if new_size or k != kinds[i - 1]:
            free = -1
        if free >= 0 and n_slots[i] > out[free, 4]:
            out[i, :] = out[free, :]
            continue
        ch_nslots[:] = n_slots[i]
        ch_setup[:] = tier_setup[k]
        ch_tier_bw[:] = tier_bw[k]
        ch_hop_bw[:] = hop_bw[:, k]
        Pi = Prog(P.a_start, P.a_host, P.op_ptr, P.agent_ops, P.op_code, P.op_target, nbytes, P.op_async, arg,
                  P.ch_src, P.ch_dst, ch_nslots, ch_setup, ch_tier_bw, ch_hop_bw, P.ch_credit, P.ch_in_ptr,
                  P.ch_in_list, P.ch_msg_ptr, P.ch_msg_op, P.credit_blocking, P.poll_ns, P.a_pe, P.a_alone,
                  P.read_release_early)
        peak = 0
        for mode in (LOWER, POINT, UPPER):   # one call site: the schedule is inlined into this kernel once
            reset_state(S, Pi)
            reset_scratch(W)
            S, o_contended, _ = schedule_inline(mode, extra if mode == UPPER else zero, share, head, iso, fabric,
                                                hbm, Pi, routes, sharing, S, W)
            finish[mode] = S.a_finish.max()
            if mode == POINT:
                out[i, 3] = 1.0 if o_contended.any() else 0.0
            for c in range(n_ch):
                peak = max(peak, S.q_peak[c])
        f_lo = finish[LOWER]
        f_hi = finish[UPPER]
        f_pt = min(max(finish[POINT], f_lo), f_hi)
        out[i, 0] = f_pt - launch
        out[i, 1] = f_lo - launch
        out[i, 2] = f_hi - launch
        out[i, 4] = peak
        if peak < n_slots[i]:
            free = i
    return out


def evaluate_points(p: Program, hop_bw: np.ndarray, launch_ns: float, sizes, kinds, n_slots) -> np.ndarray:
    """Fast-path latency of Program ``p`` at every point (``sizes[i]``, buffer kind ``kinds[i]`` as an index
    of ``BUFFER_KINDS``, ``n_slots[i]``): an (n, 5) array of latency, lower bound, upper bound, contention
    (0/1) and ring peak, in the order of the inputs.

    ``p`` is built at the largest size; its moving ops (SEND, RECV, DMA_READ, DMA_WRITE) scale with the
    size, its MATH ops' element counts too.  The upper bound is the first (window-free) pass of
    ``kbfast.fast.bounds``, co-users paid once per run where the Program is small enough: valid, looser than
    ``run_fast``'s.  ``hop_bw`` is per channel and buffer kind the receiving PE's slot bank bandwidth
    (:func:`kbfast.sim.lowering.channel_hop_bws`).
    """
    sizes = np.asarray(sizes, np.int64)
    kinds = np.asarray(kinds, np.int64)
    slots = np.asarray(n_slots, np.int64)
    if np.any(sizes <= 0) or np.any(slots <= 0):
        raise KbfastError("sizes and n_slots must be > 0")
    t = p.tables
    ref = int(sizes.max())
    plan = plan_fast(p)
    moving = np.isin(p.op_code, (Op.SEND, Op.RECV, Op.DMA_READ, Op.DMA_WRITE))
    ratio = np.where(moving, p.op_nbytes / ref, 0.0)
    math_n = np.where(p.op_code == Op.MATH, p.op_nbytes * t.spec.pe.elem_bytes / ref, 0.0)
    tiers = [getattr(t.spec.ipcq.tiers, k) for k in BUFFER_KINDS]
    order = np.lexsort((-slots, kinds, sizes))
    out = np.empty((len(sizes), 5))
    pts = SizePoints(sizes=sizes[order].astype(np.float64), kinds=kinds[order], n_slots=slots[order])
    scale = Scaling(ratio=ratio, math_n=math_n, math_ovh=t.spec.pe.math_overhead_ns,
                    math_per_elem=t.spec.pe.math_ns_per_elem, elem_bytes=t.spec.pe.elem_bytes)
    tiers = SlotTiers(setup=np.array([x.setup_ns for x in tiers]), bw=np.array([x.bw_gbs for x in tiers]),
                      hop_bw=hop_bw)
    arrays = PlanArrays(share=plan.share, data_route=plan.data_route, shared_edge=plan.shared_edge,
                        shared_node=plan.shared_node)
    out[order] = points_kernel(pts, scale, tiers, launch_ns, arrays, plan.bounds, run_bound(plan.bounds),
                               *plan.kernel_inputs)
    return out
