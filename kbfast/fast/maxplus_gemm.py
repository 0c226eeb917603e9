"""Fast path of isolated GEMMs: stage service times from the transfer closed forms, then the tile pipeline's
max-plus recurrence with its steady state in closed form (kbfast.fast.pipeline).

Per GEMM (kbfast.ir.tiling, kbfast.workloads.gemm): the A and B tile reads (PE_READ under
``hbm.read_response: accepted``) complete ``done`` after they start and hold the read channel ``hold =
done - response`` under ``pe.dma_read_release: accepted`` (the zero-byte response's path latency back to
the PE), else the whole ``done``; the C write holds its channel for its round trip; FETCH, GEMM, epilogues
and STORE take the plan's times.  Up-front operand loads (load_ref, load_load) run one after the other from
0, and the pipeline starts when they are done.

This equals exact mode when the GEMM's transfers never overlap: one output tile (its write follows every
read), or both operands pinned (P1, tests/test_gemm_fast.py).  With several output tiles and streamed
operands each C write shares the PE link and PCs with the next tiles' reads, which the recurrence leaves
out: a lower bound, which kbfast.measure.gemm_steady completes with the writes' excess per output tile.
Service times depend on the system, not on the shape, so a batch of shapes on one system costs one set of
closed forms and one :func:`~kbfast.fast.pipeline.pipeline_batch` call.
"""

from __future__ import annotations

import numpy as np

from kbfast.fast.isolated import isolated_latencies
from kbfast.fast.pipeline import pipeline_batch
from kbfast.sim.fabric import ctrl_latency
from kbfast.sim.lowering import TransferRoutes
from kbfast.ir.tiling import GemmPlan
from kbfast.topology.builder import Tables


def response_ns(routes: TransferRoutes, pe_dma: int, ctrl: int) -> float:
    """A PE DMA's zero-byte response from ``ctrl`` back to ``pe_dma``: the reverse route's propagation and
    intermediate overheads, plus the PE's own overhead (kbfast.sim.fabric.ctrl_latency)."""
    t = routes.tables
    r = len(routes.keys) + int(routes.pair_index(np.array([pe_dma]), np.array([ctrl]))[0])
    return float(ctrl_latency(routes.r_edges, routes.r_ptr[r], routes.r_ptr[r + 1], routes.e_dst,
                              t.edge_prop_ns[routes.edges], t.node_overhead_ns[routes.nodes])
                 + t.node_overhead_ns[pe_dma])


def read_kind(t: Tables) -> str:
    """The isolated-latency kind of a PE read under ``hbm.read_response``."""
    return "pe_read" if t.spec.hbm.read_response == "accepted" else "pe_dma"


def dma_times(routes: TransferRoutes, plans: list[GemmPlan], nodes: list[tuple[int, int, int]]) -> np.ndarray:
    """Per GEMM (its plan, and its (pe_dma, own controller, B's controller)): a_hold, a_done, b_hold, b_done,
    w_done and the up-front loads' total (t0), as float64 [n, 6]; one batch of isolated latencies for all,
    over ``routes`` (:func:`kbfast.sim.lowering.tile_routes` of ``nodes``).

    Tile transfers are computed once per distinct (tile bytes, endpoints): they do not depend on the shape.
    A read's hold is its posted latency less its response under ``pe.dma_read_release: accepted``, else its
    ``done``."""
    t = routes.tables
    read = read_kind(t)
    early = t.spec.pe.dma_read_release == "accepted"
    src, dst, nb, kinds = [], [], [], []

    def add(s: int, d: int, n: int, k: str) -> int:
        """Append one isolated transfer; returns its index."""
        src.append(s)
        dst.append(d)
        nb.append(n)
        kinds.append(k)
        return len(src) - 1

    memo: dict[tuple, tuple[int, ...]] = {}
    slots = []
    for p, (pe, own, src_b) in zip(plans, nodes):
        key = (p.a_tile_bytes, p.b_tile_bytes, p.c_tile_bytes, pe, own, src_b)
        if key not in memo:
            a, b = add(pe, own, p.a_tile_bytes, read), add(pe, src_b, p.b_tile_bytes, read)
            posted = (a, b) if read == "pe_read" else (add(pe, own, p.a_tile_bytes, "pe_read"),
                                                       add(pe, src_b, p.b_tile_bytes, "pe_read"))
            memo[key] = (a, b, *posted, add(pe, own, p.c_tile_bytes, "pe_dma"))
        a_bytes, b_bytes, _ = p.operand_bytes()
        loads = (add(pe, own, a_bytes, read) if p.a_pinned else -1, add(pe, src_b, b_bytes, read) if p.b_pinned else -1)
        slots.append(memo[key] + loads)
    lat = isolated_latencies(routes, np.array(src, np.int64), np.array(dst, np.int64), np.array(nb, np.int64),
                             kind=kinds)
    resp: dict[tuple[int, int], float] = {}

    def response(pe: int, ctrl: int) -> float:
        """:func:`response_ns`, once per (PE, controller)."""
        if (pe, ctrl) not in resp:
            resp[pe, ctrl] = response_ns(routes, pe, ctrl)
        return resp[pe, ctrl]

    out = np.zeros((len(plans), 6))
    for i, (p, (pe, own, src_b), sl) in enumerate(zip(plans, nodes, slots)):
        if not p.a_pinned:
            out[i, 1] = lat[sl[0]]
            out[i, 0] = lat[sl[2]] - response(pe, own) if early else out[i, 1]
        if not p.b_pinned:
            out[i, 3] = lat[sl[1]]
            out[i, 2] = lat[sl[3]] - response(pe, src_b) if early else out[i, 3]
        out[i, 4] = lat[sl[4]]
        out[i, 5] = (lat[sl[5]] if sl[5] >= 0 else 0.0) + (lat[sl[6]] if sl[6] >= 0 else 0.0)
    return out


def gemm_fast(plans: list[GemmPlan], times: np.ndarray) -> np.ndarray:
    """Every GEMM's (latency, window, read, TCM read, compute, TCM write, write busy ns), one row each, from its
    :func:`dma_times` row: the pipeline starts when the up-front loads are done; ``latency`` counts from 0,
    the window from then."""
    def col(get) -> np.ndarray:
        """One float64 column, ``get(plan)`` per plan."""
        return np.array([get(p) for p in plans], np.float64)

    t0 = times[:, 5].copy()
    w = times[:, 4].copy()
    out = pipeline_batch(
        np.array([p.n_out for p in plans], np.int64), np.array([p.k_tiles for p in plans], np.int64),
        np.array([p.depth for p in plans], np.int64), t0, times[:, 0].copy(), times[:, 1].copy(),
        times[:, 2].copy(), times[:, 3].copy(), col(lambda p: p.fetch_ns), col(lambda p: p.comp_inner_ns),
        col(lambda p: p.comp_last_ns), col(lambda p: p.store_ns), w, w)
    res = np.empty((len(plans), 7))
    res[:, 0] = out[:, 0]
    res[:, 1] = out[:, 0] - t0
    res[:, 2:] = out[:, 3:8]
    return res


def gemm_upper(plans: list[GemmPlan], times: np.ndarray) -> np.ndarray:
    """An upper bound on each GEMM's :func:`gemm_fast` row where C writes overlap the next tiles' reads: the
    recurrence on :func:`upper_times`."""
    return gemm_fast(plans, upper_times(plans, times))


def upper_times(plans: list[GemmPlan], times: np.ndarray) -> np.ndarray:
    """The :func:`dma_times` rows of :func:`gemm_upper`.  The writer has one write in flight and the read
    channel one read, so a read can lose at most one whole write's time to C traffic and a write at most one
    whole read's: every read's hold and done grow by the write's ``w_done``, every write by the longer read's
    ``done``.  The recurrence is monotone in its service times, so the result bounds the overlapped pipeline
    from above (it equals the exact one without overlap)."""
    up = times.copy()
    w, r = times[:, 4].copy(), np.maximum(times[:, 1], times[:, 3])
    a_streamed = np.array([not p.a_pinned for p in plans], np.bool_)
    b_streamed = np.array([not p.b_pinned for p in plans], np.bool_)
    for col, streamed in ((0, a_streamed), (1, a_streamed), (2, b_streamed), (3, b_streamed)):
        up[:, col] += np.where(streamed, w, 0.0)
    up[:, 4] += r
    return up
