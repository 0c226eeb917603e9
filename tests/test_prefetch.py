"""Overlap: GEMM tiles prefetched into TCM while a collective runs (docs/models.md "Overlap").

Hand-derived cases on one PE (exact mode), the stand-in's max-plus formula against exact mode, the TCM
the prefetches may fill, and fast against exact on model layers and steps.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.config.models import load_model
from kbfast.exact import run_exact
from kbfast.fast.maxplus_gemm import dma_times
from kbfast.ir import Op, ProgramBuilder, gemm_ops, gemm_ops_count
from kbfast.ir.tiling import plan_gemm
from kbfast.measure.model import CommandTimer, evaluate_piece, evaluate_step
from kbfast.sim.lowering import tile_routes
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.commands import GemmCommand, TileLowering, TimedLowering
from kbfast.workloads.gemm import gemm_nodes
from kbfast.workloads.model import build_piece, compile_model, shape_for

PE = "sip0.cube0.pe0"


@pytest.fixture(scope="module")
def tray():
    t = build_tables(load_system("ahbm_2sip"))
    return t, Router(t)


def _gemm_program(t, router, plan, pre: int, gap: float | None):
    """One PE: a prefetch of ``pre`` tiles, then after ``gap`` ns the GEMM (``gap`` None: the prefetch settled
    first).  Returns (the end of the GEMM, the prefetch's start, the GEMM's start) in exact mode."""
    dma, own, _ = gemm_nodes(t, PE)
    b = ProgramBuilder(t, router, name="prefetch")
    agent = b.pe_agent(dma)
    b.start(agent)
    a, bb, c = (own, 0), (own, 1 << 20), (own, 8 << 20)
    p0 = b.n_ops
    ids = b.prefetch(agent, plan, a, bb, pre, settle=gap is None)
    if gap is None:
        b.wait(agent, int(ids[-1]))
    elif gap:
        b.compute(agent, gap)
    s = b.n_ops
    done = b.gemm(agent, plan, a, bb, c, preloaded=pre, ready=None if gap is None else ids)
    res = run_exact(b.build())
    return res.op_end_ns[done], res.op_begin_ns[p0], res.op_begin_ns[s]


@pytest.mark.parametrize("m, n, k", [(1, 32, 2048), (32, 32, 4096), (1, 32, 640)])
@pytest.mark.parametrize("pre", [1, 7, 10])
def test_a_prefetched_gemm_ends_at_the_later_of_its_two_starts(tray, m, n, k, pre):
    """The tile pipeline is max-plus in the prefetch's start p0 and the command's s: end = max(s + A, p0 + B),
    A from the prefetch settled before s, B from s = p0 (what the fast path's stand-in runs,
    kbfast.workloads.commands.TimedLowering).  Exact mode, one output tile (no C write meets a read)."""
    t, router = tray
    plan = plan_gemm(t.spec.pe, m, n, k, a_pinned=True)
    pre = min(pre, plan.n_tile_total)
    end, _, s = _gemm_program(t, router, plan, pre, None)
    A = end - s
    end, p0, _ = _gemm_program(t, router, plan, pre, 0.0)
    B = end - p0
    for gap in (5.0, 40.0, 150.0, 1000.0):
        end, p0, s = _gemm_program(t, router, plan, pre, gap)
        assert end == pytest.approx(max(s + A, p0 + B), abs=1e-9), gap


def test_a_prefetch_alone_is_its_reads_back_to_back(tray):
    """Hand-derived: k reads of a B tile on the PE's read channel take (k - 1) x hold + done (their read times
    from kbfast.fast.maxplus_gemm.dma_times), and the GEMM with all its tiles in TCM reads nothing."""
    t, router = tray
    plan = plan_gemm(t.spec.pe, 1, 32, 1024, a_pinned=True)
    nodes = gemm_nodes(t, PE)
    times = dma_times(tile_routes(t, router, [nodes]), [plan], [nodes])[0]
    hold, done = times[2], times[3]
    timer = CommandTimer(t, router)
    cls = int(timer.route_class(np.array([nodes[0]]))[0])
    com = GemmCommand(plan, 0, 1 << 20, 8 << 20)
    for k in (1, 4, 16):
        alone = timer.time(com, cls, k, 2)
        assert alone[0] == pytest.approx((k - 1) * hold + done, rel=1e-9)
    T = plan.n_tile_total
    ops = gemm_ops(plan, 0, (nodes[1], 0), (nodes[1], 1 << 20), (nodes[1], 8 << 20), preloaded=T)
    assert not np.any(ops[0][0] == Op.DMA_READ) and len(ops[0][0]) == 1      # the reader only waits
    assert sum(len(x[0]) for x in ops) == gemm_ops_count(plan, T)


@pytest.mark.parametrize("pre, ready", [(0, False), (3, False), (3, True), (16, True)])
def test_op_counts_with_prefetched_tiles(tray, pre, ready):
    t, _ = tray
    plan = plan_gemm(t.spec.pe, 32, 64, 512, a_pinned=True)
    r = np.arange(100, 100 + pre) if ready else None
    ops = gemm_ops(plan, 0, (1, 0), (1, 0), (1, 0), preloaded=pre, ready=r)
    assert sum(len(x[0]) for x in ops) == gemm_ops_count(plan, pre, ready)
    fetcher = ops[1]
    waits = fetcher[1][fetcher[0] == Op.WAIT][1:]                     # after the marker's
    assert len(waits) == plan.n_tile_total - (0 if ready else pre)


@pytest.fixture(scope="module")
def layer(tray):
    t, router = tray
    m = load_model("llama32_1b")
    return compile_model(t, m, shape_for(m, "decode", 1, None, 256), collective="lrab")[0]


def test_the_prefetch_area_is_what_tcm_holds_beside_the_rest(tray, layer):
    """The area is the TCM budget less the largest command's pinned operand and tile buffers, the largest tile
    the kernel loads or stores, and the IPCQ slots in TCM; a prefetch fills at most the area."""
    t, router = tray
    low = TileLowering(layer.commands)
    p = build_piece(t, router, layer, low)
    held = max(sum(c.plan.tcm_bytes()) for c in layer.commands)
    per_pe = np.bincount(p.channels.dst, weights=(p.channels.n_slots * p.channels.slot_size).astype(float))
    L = layer.info["layer"]
    tile = L["x_bytes"]                                   # the all-reduce's tile, the largest load or store
    assert low.area == t.spec.pe.tcm_kib * 1024 - held - tile - int(per_pe.max())
    assert set(low.prefetched) == {L["up"], L["qkv"]}
    for c, k in low.prefetched.items():
        plan = layer.commands[c].plan
        assert 0 < k * plan.b_tile_bytes <= low.area and k <= plan.n_tile_total


def test_the_next_layers_prefetch_is_waited_for_at_the_end(tray, layer):
    """The QKV prefetch behind the FFN all-reduce is the next layer's: the layer's own QKV starts with those
    tiles in TCM (its reader skips them), and every PE's last op waits for the prefetch's reads."""
    t, router = tray
    low = TileLowering(layer.commands)
    p = build_piece(t, router, layer, low)
    L = layer.info["layer"]
    k = low.prefetched[L["qkv"]]
    for a in range(len(layer.nodes)):
        last = p.ops_of(a)[-1]
        assert p.op_code[last] == Op.WAIT
        settle = p.op_target[last]
        assert p.op_code[settle] == Op.WAIT and p.op_target[settle] == -1            # WAIT_ALL on the reader
        reads = np.arange(settle - k, settle)
        assert np.all(p.op_code[reads] == Op.DMA_READ)


@pytest.mark.parametrize("layout, collective", [("tp_pes", "lrab"), ("tp_cubes", "hier2d"), ("tp_pes", "hier2d")])
def test_p2_prefetching_layer_within_5_percent(tray, layout, collective):
    """A Llama-3.2-1B decode layer under --overlap prefetch, every prefetch as large as TCM allows (no
    collective window: the hardest case for the stand-in): both fast methods within 5 % of exact, bounds
    around exact."""
    t, router = tray
    m = load_model("llama32_1b")
    piece = compile_model(t, m, shape_for(m, "decode", 1, None, 256), layout, collective=collective)[0]
    exact = evaluate_piece(t, router, piece, "exact")
    assert exact.prefetch["tcm_prefetch"] > 0
    for method in ("hybrid", "fluid"):
        fast = evaluate_piece(t, router, piece, "fast", method=method)
        assert fast.lo_ns <= exact.latency_ns <= fast.hi_ns, method
        assert abs(fast.latency_ns / exact.latency_ns - 1) < 0.05, (method, fast.latency_ns, exact.latency_ns)
        assert fast.counts == exact.counts


@pytest.mark.parametrize("sp", [False, True])
def test_p2_prefetching_step_within_5_percent(tray, sp):
    """The step as kbfast runs it: each prefetch limited to what streams while its collective runs."""
    t, router = tray
    m = load_model("llama32_1b")
    step = evaluate_step(t, router, m, shape_for(m, "decode", 1, None, 256), layers=1, modes=("fast", "exact"),
                         collective="hier2d", sequence_parallel=sp or None)
    most = step.pieces[0].info["layer"]["prefetch_most"]
    assert set(most) == {"up", "qkv"} and min(most.values()) > 0
    fast, exact = step.latency_ns("fast"), step.latency_ns("exact")
    assert abs(fast / exact - 1) < 0.05


@pytest.mark.parametrize("batch", [1, 4])
def test_prefetch_is_never_slower_than_none(tray, batch):
    t, router = tray
    m = load_model("llama32_1b")
    lat = {ov: evaluate_step(t, router, m, shape_for(m, "decode", batch, None, 256), layers=1, collective="lrab",
                             overlap=ov).latency_ns() for ov in ("none", "prefetch")}
    assert lat["prefetch"] <= lat["none"]


def test_overlap_none_issues_no_prefetch(tray):
    t, router = tray
    m = load_model("llama32_1b")
    piece = compile_model(t, m, shape_for(m, "decode", 1, None, 256), collective="lrab", overlap="none")[0]
    low = TimedLowering.untimed(piece.commands)
    build_piece(t, router, piece, low)
    assert low.prefetched == {} and low.prefetch_bytes() == {}


@pytest.mark.parametrize("args, words", [
    (["llama32_1b", "--overlap", "eager"], "not one of prefetch, none"),
    (["tp_mlp", "--overlap", "none"], "--overlap none: applies to transformer models only"),
])
def test_cli_overlap_refusals(args, words):
    res = CliRunner().invoke(app, ["run", "model", *args])
    assert res.exit_code == 2 and words in res.output, res.output


def test_model_sweep_takes_the_overlap_as_an_axis(tmp_path):
    """``workload.overlap`` is a sweep key a transformer reads and the TP MLP refuses by key."""
    from kbfast.errors import ConfigError
    from kbfast.sweep.batches import evaluate_batch, make_batches
    from kbfast.sweep.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntopology: ahbm_2sip\nworkload: {kind: model, model: llama32_1b, kv_len: 256, "
                    "layers: 1, collective: lrab}\naxes: [{grid: {workload.overlap: [none, prefetch]}}]\n")
    rows = evaluate_batch(make_batches(load_spec(path).points(), "fast")[0]).rows
    assert rows["overlap"].tolist() == ["none", "prefetch"]
    assert rows["latency_ns"].iloc[1] < rows["latency_ns"].iloc[0]
    path.write_text("name: s\ntopology: ahbm_2sip\nworkload: {kind: model, model: tp_mlp, overlap: none}\n")
    with pytest.raises(ConfigError) as err:
        load_spec(path).points()
    assert err.value.key == "workload.overlap"
