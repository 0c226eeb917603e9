"""Fast path of isolated GEMMs: stage service times from the transfer closed forms, then the tile pipeline's
max-plus recurrence with its steady state in closed form (kbfast.fast.pipeline).

Per GEMM (kbfast.tiling, kbfast.workloads.gemm): the A and B tile reads (PE_READ under
``hbm.read_response: accepted``) complete ``done`` after they start and hold the read channel ``hold =
done - response`` under ``pe.dma_read_release: accepted`` (the zero-byte response's path latency back to
the PE), else the whole ``done``; the C write holds its channel for its round trip; FETCH, GEMM, epilogues
and STORE take the plan's times.  Up-front operand loads (load_ref, load_load) run one after the other from
0, and the pipeline starts when they are done.

This equals exact mode when the GEMM's transfers never overlap: one output tile (its write follows every
read), or both operands pinned (P1, tests/test_gemm_fast.py).  With several output tiles and streamed
operands each C write shares the PE link and PCs with the next tiles' reads, which the recurrence leaves
out: an estimate, within a few per cent of exact on the bundled sweep (``kbfast sweep gemm --check``).
Service times depend on the system, not on the shape, so a batch of shapes on one system costs one set of
closed forms and one :func:`~kbfast.fast.pipeline.pipeline_batch` call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbfast.fast.batch import isolated_latencies
from kbfast.fast.pipeline import pipeline_batch
from kbfast.tiling import GemmPlan
from kbfast.topology.builder import Tables, reverse_route_edges
from kbfast.topology.routing import Router


@dataclass(frozen=True)
class TileTimes:
    """Service times of a GEMM's tile DMAs on one system, ns (see the module docstring); 0 for a pinned
    operand.  They depend on the tile and the endpoints, not on the GEMM's shape."""

    a_hold: float
    a_done: float
    b_hold: float
    b_done: float
    w_done: float


def response_ns(t: Tables, router: Router, pe_dma: int, ctrl: int) -> float:
    """A PE DMA's zero-byte response from ``ctrl`` back to ``pe_dma``: the reverse route's propagation and
    intermediate overheads, plus the PE's own overhead (kbfast.sim.fabric.ctrl_latency)."""
    rs = router.routes(np.array([pe_dma]), np.array([ctrl]), "pe_dma")
    rev = reverse_route_edges(t, rs.ptr, rs.edges)
    inner = t.edge_dst[rev][:-1]
    return float(t.edge_prop_ns[rev].sum() + t.node_overhead_ns[inner].sum() + t.node_overhead_ns[pe_dma])


def read_kind(t: Tables) -> str:
    """The isolated-latency kind of a PE read under ``hbm.read_response``."""
    return "pe_read" if t.spec.hbm.read_response == "accepted" else "pe_dma"


def tile_times(t: Tables, router: Router, plan: GemmPlan, pe_dma: int, own: int, src_b: int) -> TileTimes:
    """The tile DMAs' service times of ``plan`` on PE ``pe_dma`` (A and C in ``own``'s slice, B in
    ``src_b``'s)."""
    early = t.spec.pe.dma_read_release == "accepted"
    done = isolated_latencies(t, router, np.full(2, pe_dma), np.array([own, src_b]),
                              np.array([plan.a_tile_bytes, plan.b_tile_bytes]), kind=read_kind(t))
    w = isolated_latencies(t, router, np.array([pe_dma]), np.array([own]), np.array([plan.c_tile_bytes]))[0]

    def hold(ctrl: int, nbytes: int, d: float) -> float:
        """Until the controller took the last flit (the posted read's latency less its response), or ``d``."""
        if not early:
            return d
        posted = isolated_latencies(t, router, np.array([pe_dma]), np.array([ctrl]), np.array([nbytes]),
                                    kind="pe_read")[0]
        return float(posted) - response_ns(t, router, pe_dma, ctrl)

    a_done = 0.0 if plan.a_pinned else float(done[0])
    b_done = 0.0 if plan.b_pinned else float(done[1])
    return TileTimes(a_hold=0.0 if plan.a_pinned else hold(own, plan.a_tile_bytes, a_done), a_done=a_done,
                     b_hold=0.0 if plan.b_pinned else hold(src_b, plan.b_tile_bytes, b_done), b_done=b_done,
                     w_done=float(w))


def load_ns(t: Tables, router: Router, pe_dma: np.ndarray, ctrl: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Up-front operand loads (one blocking read each), isolated: 0 where ``nbytes`` is 0."""
    out = np.zeros(len(nbytes))
    some = np.flatnonzero(nbytes > 0)
    if len(some):
        out[some] = isolated_latencies(t, router, pe_dma[some], ctrl[some], nbytes[some], kind=read_kind(t))
    return out


def gemm_fast(plans: list[GemmPlan], tiles: list[TileTimes], t0: np.ndarray) -> np.ndarray:
    """Every GEMM's (latency, window, read, TCM read, compute, TCM write, write busy ns), one row each: the
    pipeline starts at ``t0`` (when its up-front loads are done); ``latency`` counts from 0, the window from
    ``t0``."""
    def col(get) -> np.ndarray:
        return np.array([get(p, s) for p, s in zip(plans, tiles)], np.float64)

    t0 = np.asarray(t0, np.float64)
    w = col(lambda p, s: s.w_done)
    out = pipeline_batch(
        np.array([p.n_out for p in plans], np.int64), np.array([p.k_tiles for p in plans], np.int64),
        np.array([p.depth for p in plans], np.int64), t0, col(lambda p, s: s.a_hold), col(lambda p, s: s.a_done),
        col(lambda p, s: s.b_hold), col(lambda p, s: s.b_done), col(lambda p, s: p.fetch_ns),
        col(lambda p, s: p.comp_inner_ns), col(lambda p, s: p.comp_last_ns), col(lambda p, s: p.store_ns), w, w)
    res = np.empty((len(plans), 7))
    res[:, 0] = out[:, 0]
    res[:, 1] = out[:, 0] - t0
    res[:, 2:] = out[:, 3:8]
    return res
