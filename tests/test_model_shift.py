"""One evaluation of a stand-in for every attention length (kbfast.measure.shift, docs/models.md "Attention
shifts"): a point moved from its layer's base against the same point evaluated on its own."""

from __future__ import annotations

import numpy as np
import pytest

import kbfast.measure.model as mm
from kbfast import Router, build_tables, load_system
from kbfast.config.models import load_model
from kbfast.fast.evaluate import lower_schedule
from kbfast.ir import ProgramBuilder
from kbfast.measure import shift
from kbfast.measure.model import evaluate_piece
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.workloads.model import compile_model, shape_for


@pytest.fixture(scope="module")
def tray():
    t = build_tables(load_system("ahbm_2sip"))
    return t, Router(t)


@pytest.fixture
def fresh():
    """Empty memos before and after (pieces, plans, bases)."""
    for cache in (mm._PIECES, mm._PLANS, mm._BASES):
        cache.clear()
    yield
    for cache in (mm._PIECES, mm._PLANS, mm._BASES):
        cache.clear()


def _layer(t, router, attention_ns, gather=True, dma_in_attention=False, runs=None):
    """Four PEs of cube 0: each reads 4 KiB of its slice and computes (``qkv``), passes 2 KiB round the ring
    (``qkv gather``, optional), spends ``attention_ns`` (a list: one COMPUTE each, split in two runs by a ring
    exchange when it has two items), then passes 8 KiB round the ring and writes 4 KiB back."""
    b = ProgramBuilder(t, router, name="layer")
    pes = [b.pe_agent(pe_block(t, 0, 0, pe)) for pe in range(4)]
    ring = [b.channel(pes[k], pes[(k + 1) % 4]) for k in range(4)]

    def exchange(nbytes):
        for k, a in enumerate(pes):
            b.send(a, ring[k], nbytes)
        for k, a in enumerate(pes):
            b.recv(a, ring[k - 1], nbytes)

    for k, a in enumerate(pes):
        b.start(a)
        b.phase(a, "qkv")
        b.dma(a, hbm_ctrl(t, 0, 0, k), 4096, write=False)
        b.compute(a, 50.0 + 7.0 * k)
    if gather:
        for a in pes:
            b.phase(a, "qkv gather")
        exchange(2048)
    for a in pes:
        b.phase(a, "attention")
    for step, ns in enumerate(attention_ns):
        for k, a in enumerate(pes):
            b.compute(a, ns if runs is None or k < runs else 0.5 * ns)
            if dma_in_attention:
                b.dma(a, hbm_ctrl(t, 0, 0, k), 256, write=False)
        if step + 1 < len(attention_ns):
            exchange(64)
    for a in pes:
        b.phase(a, "all-reduce")
    exchange(8192)
    for k, a in enumerate(pes):
        b.dma(a, hbm_ctrl(t, 0, 0, k), 4096, write=True)
    return b.build()


def _same(a: shift.Times, b: shift.Times, rel=1e-12):
    for field in ("op_issue_ns", "op_end_ns", "agent_finish_ns"):
        x, y = getattr(a, field), getattr(b, field)
        assert np.allclose(x, y, rtol=rel, atol=0.0), (field, np.max(np.abs(x - y)))


@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("method", ["hybrid", "fluid"])
def test_moved_points_equal_their_own_evaluation(tray, fresh, gather, method):
    """Attention lengths around and far above the base's: every op's issue and end, and every finish, as the
    point's own replay (or fluid schedule) gives them, to 1e-12; one base serves them all."""
    t, router = tray
    for ns in (900.0, 2500.0, 40_000.0, 1e6 + 0.25):
        p = _layer(t, router, [ns], gather)
        moved = mm._stand_in("tray", p, None, method)
        own = mm._direct(p, None, method)
        assert moved.method == own.method
        _same(moved.point, own.point)
    assert len(mm._BASES) == 1 and next(iter(mm._BASES.values())) is not None


def test_two_runs_move_apart(tray, fresh):
    """Attention in two runs with an exchange between: each run moves what follows it."""
    t, router = tray
    for first, second in ((1500.0, 700.0), (9000.0, 700.0), (1500.0, 30_000.0)):
        p = _layer(t, router, [first, second])
        s = shift.split(p)
        assert s.runs == 2
        _same(mm._stand_in("tray", p, None, "hybrid").point, mm._direct(p, None, "hybrid").point)
    assert len(mm._BASES) == 1


def test_bounds_are_the_points_own(tray, fresh):
    """With bounds (the commands' lower and upper times: here the attention 10 % either side), the point moves
    and the bounds are the point's own schedules, bit for bit."""
    t, router = tray
    for ns in (3000.0, 60_000.0):
        p = _layer(t, router, [ns], gather=False)
        bounded = [_layer(t, router, [ns * f], gather=False) for f in (0.9, 1.1)]
        moved = mm._stand_in("tray", p, bounded, "hybrid")
        own = mm._direct(p, bounded, "hybrid")
        _same(moved.point, own.point)
        _same(moved.lower, own.lower, rel=0.0)
        _same(moved.upper, own.upper, rel=0.0)
    assert len(mm._BASES) == 1


def test_a_dma_after_a_run_moves_with_what_follows(tray, fresh):
    """A DMA inside the attention phase splits it: the run before it moves the DMA with the rest."""
    t, router = tray
    for ns in (2000.0, 30_000.0):
        p = _layer(t, router, [ns], dma_in_attention=True)
        assert shift.split(p) is not None
        _same(mm._stand_in("tray", p, None, "hybrid").point, mm._direct(p, None, "hybrid").point)
    assert len(mm._BASES) == 1


def test_what_cannot_move_is_evaluated_as_it_is(tray, fresh):
    """Agents whose attention takes different times, or no attention phase: every run fixed, or no split,
    so the point is its own evaluation."""
    t, router = tray
    uneven = _layer(t, router, [2000.0], runs=2)
    s = shift.split(uneven)
    assert s is not None and not np.all(shift.spent(uneven, s) == shift.spent(uneven, s)[0])
    _same(mm._stand_in("tray", uneven, None, "hybrid").point, mm._direct(uneven, None, "hybrid").point, rel=0.0)
    assert not mm._BASES
    b = ProgramBuilder(t, router, name="none")
    a = b.pe_agent(pe_block(t, 0, 0, 0))
    b.start(a)
    b.compute(a, 5.0)
    assert shift.split(b.build()) is None


def test_a_short_run_between_exchanges_stays_fixed(tray, fresh):
    """A run too short to keep the fabric idle across it (the next exchange meets the last one) gets a ``B``
    above what the points spend in it, so it is fixed: the base keeps its time; the run before it moves."""
    t, router = tray
    p = _layer(t, router, [5000.0, 1.0])
    b_ns = shift.plan(p, shift.split(p), lower_schedule)
    assert b_ns[0] < 5000.0 and b_ns[1] > 1.0
    for first in (5000.0, 80_000.0):
        q = _layer(t, router, [first, 1.0])
        _same(mm._stand_in("tray", q, None, "hybrid").point, mm._direct(q, None, "hybrid").point)
    assert len(mm._BASES) == 1


def _decode(t, router, layout, collective, kv, batch=2):
    m = load_model("llama32_1b")
    return compile_model(t, m, shape_for(m, "decode", batch, None, kv), layout, collective=collective)[0]


@pytest.mark.parametrize("layout, collective", [("tp_pes", "lrab"), ("tp_cubes", "lrab"), ("tp_pes", "hier2d")])
def test_decode_layers_moved_against_their_own(tray, fresh, monkeypatch, layout, collective):
    """Llama-3.2-1B decode layers (with prefetches) at four KV lengths: the latency as the layer's own
    evaluation gives it (to 1e-9: a replay of the point itself may order two flits that tie exactly in the
    base the other way, by float rounding), the bounds and the rest bit for bit."""
    t, router = tray
    lens = (256, 1024, 4096, 16384)
    moved = [evaluate_piece(t, router, _decode(t, router, layout, collective, kv), "fast") for kv in lens]
    assert any(v is not None for v in mm._BASES.values())
    monkeypatch.setattr(shift, "split", lambda p: None)
    for kv, got in zip(lens, moved):
        own = evaluate_piece(t, router, _decode(t, router, layout, collective, kv), "fast")
        assert got.latency_ns == pytest.approx(own.latency_ns, rel=1e-9), kv
        assert (got.lo_ns, got.hi_ns, got.counts, got.method) == (own.lo_ns, own.hi_ns, own.counts, own.method)
        assert got.phase_ns.keys() == own.phase_ns.keys()


def test_moved_points_keep_parity_with_exact_mode(tray, fresh):
    """A moved point within 5 % of exact mode (every GEMM command's tiles replayed), inside its bounds, at a
    short and a long KV."""
    t, router = tray
    for kv in (256, 4096):
        piece = _decode(t, router, "tp_cubes", "lrab", kv, batch=1)
        fast, exact = evaluate_piece(t, router, piece, "fast"), evaluate_piece(t, router, piece, "exact")
        assert fast.lo_ns <= exact.latency_ns <= fast.hi_ns
        assert fast.latency_ns == pytest.approx(exact.latency_ns, rel=0.05)


def test_the_order_of_points_changes_no_bit(tray, fresh):
    """The base depends only on what the points share, so a sweep's figures do not depend on which point
    came first (bit for bit)."""
    t, router = tray
    lens = [512, 4096, 1024]

    def run(order):
        for cache in (mm._PIECES, mm._PLANS, mm._BASES):
            cache.clear()
        return {kv: evaluate_piece(t, router, _decode(t, router, "tp_pes", "lrab", kv), "fast") for kv in order}

    one, two = run(lens), run(lens[::-1])
    for kv in lens:
        assert (one[kv].latency_ns, one[kv].lo_ns, one[kv].hi_ns) == (two[kv].latency_ns, two[kv].lo_ns,
                                                                      two[kv].hi_ns)
        assert one[kv].breakdown == two[kv].breakdown and one[kv].phase_ns == two[kv].phase_ns
