"""Model workloads (docs/models.md): validation, the compiler's layouts and checks, fast vs exact parity."""

from __future__ import annotations

import io
import json
import re
import typing

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kbfast import Router, build_tables, load_system
from kbfast.cli.main import app
from kbfast.config.models import Collective, load_model, model_names
from kbfast.errors import ConfigError, KbfastError
from kbfast.ir import Op
from kbfast.measure.methods import FAST_CHOICES
from kbfast.measure.model import CommandTimer, command_timer, evaluate_piece, evaluate_step
from kbfast.topology.kinds import NodeKind
from kbfast.workloads.kernels import ScheduleError
from kbfast.workloads.model import build_piece, compile_model, shape_for
from kbfast.workloads.collectives.in_model import ALGORITHMS, CHOICES
from kbfast.workloads.commands import TimedLowering


@pytest.fixture(scope="module")
def tray():
    t = build_tables(load_system("ahbm_2sip"))
    return t, Router(t)


def _yaml(tmp_path, text: str):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


# -- validation ---------------------------------------------------------------------------------------------
def test_bundled_models_load():
    assert {"llama3_70b", "gpt3_175b", "llama32_1b", "tp_mlp", "gqa_llama70b_validation"} <= set(model_names())
    m = load_model("llama3_70b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab) == (80, 8192, 64, 8, 128, 28672, 128256)
    assert m.layer_params() == 8192 * 10240 + 8192 * 8192 + 8192 * 57344 + 28672 * 8192


@pytest.mark.parametrize("text, key, hint", [
    ("name: x\nkind: transformer\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 3\nhead_dim: 16\nffn: 128\n"
     "ffn_kind: swiglu\nnorm: rmsnorm\nvocab: 100\n", "kv_heads", "divisor"),
    ("name: x\nkind: transformer\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 4\nhead_dim: 16\nffn: 128\n"
     "ffn_kind: swiglu\nnorm: rmsnorm\nvocab: 100\nhiden: 3\n", "hiden", "hidden"),
    ("name: x\nkind: transfomer\n", "kind", "transformer"),
    ("name: x\nkind: mlp\nbatch: 0\ndims: [1, 2, 3]\n", "batch", ""),
])
def test_bad_model_names_file_key_and_value(tmp_path, text, key, hint):
    with pytest.raises(ConfigError) as err:
        load_model(_yaml(tmp_path, text))
    assert err.value.key == key and err.value.file.endswith("m.yaml")
    assert hint in str(err.value)


@pytest.mark.parametrize("old, new, hint", [("layers:", "layres:", "did you mean 'layers'?"),
                                             ("kind:", "knd:", "did you mean 'kind'")])
def test_misspelt_model_key_is_named(tmp_path, old, new, hint):
    """A misspelt key of a model was reported as the key it leaves missing (or as an unknown kind)."""
    from importlib import resources

    text = resources.files("kbfast.models").joinpath("llama32_1b.yaml").read_text()
    with pytest.raises(ConfigError) as err:
        load_model(_yaml(tmp_path, text.replace(old, new, 1)))
    assert err.value.key == new[:-1] and f"unknown key {new[:-1]!r}" in str(err.value) and hint in err.value.hint


def test_unknown_model_suggests():
    with pytest.raises(ConfigError, match="llama3_70b"):
        load_model("lama3_70b")


# -- layouts ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sips, ok", [(1, True), (2, True), (4, True), (6, False), (8, True), (16, True)])
def test_tp_mlp_world_size_must_divide_2048(sips, ok):
    t = build_tables(load_system("ahbm_2sip", {"sips.count": sips}))
    if ok:
        assert compile_model(t, load_model("tp_mlp"))[0].name == "mlp"
    else:
        with pytest.raises(KbfastError, match="must divide 2048"):
            compile_model(t, load_model("tp_mlp"))


def test_layout_that_does_not_fit_is_refused():
    t = build_tables(load_system("ahbm_2sip", {"sips.count": 1}))
    m = load_model("llama3_70b")
    with pytest.raises(KbfastError, match="does not fit"):
        compile_model(t, m, shape_for(m, "decode", 1, None, 4096), "tp_cubes")


def test_heads_that_do_not_divide_over_cubes_are_refused():
    t = build_tables(load_system("ahbm_2sip", {"sips.count": 6}))
    m = load_model("llama3_70b")
    with pytest.raises(KbfastError, match="cubes per query head"):
        compile_model(t, m, shape_for(m, "decode", 1, None, 4096))


def test_more_cubes_than_heads_groups_cubes_per_head():
    """64 heads on 8 SIPs' 128 cubes: a head per pair of cubes, its ring over their 16 PEs."""
    t = build_tables(load_system("ahbm_2sip", {"sips.count": 8}))
    m = load_model("llama3_70b")
    layer = compile_model(t, m, shape_for(m, "decode", 1, None, 4096), collective="lrab")[0]
    assert layer.info["layer"]["ring"] == 16
    assert layer.commands[layer.info["layer"]["qkv"]].plan.n == 3 * 128 // 16


def test_p2_grouped_heads_layer_within_5_percent():
    t = build_tables(load_system("ahbm_2sip", {"sips.count": 4}))
    m = load_model("llama32_1b")            # 32 heads on 64 cubes
    piece = compile_model(t, m, shape_for(m, "decode", 1, None, 512), collective="lrab")[0]
    assert piece.info["layer"]["ring"] == 16
    _parity(t, Router(t), piece)


def test_shape_rules():
    m = load_model("llama32_1b")
    assert shape_for(m, "decode", 2, None, None).kv_len == 4096
    assert shape_for(m, "prefill", 1, 512, None).kv_len == 512
    with pytest.raises(KbfastError, match="--seq must be 1"):
        shape_for(m, "decode", 1, 8, None)
    with pytest.raises(KbfastError, match="phase"):
        shape_for(m, "train", 1, None, None)


# -- symbolic checks and op counts --------------------------------------------------------------------------
def test_a_routers_command_timer_and_system_keys_serve_every_later_point(tray):
    """A sweep's points of one system share its Router's CommandTimer, whose route classes are kept per node
    array (read-only) and equal a fresh timer's; the system's keys are its spec's repr, made once."""
    t, router = tray
    timer = command_timer(t, router)
    assert command_timer(t, router) is timer
    nodes = np.flatnonzero(t.node_kind == NodeKind.PE_DMA)[::7]
    classes = timer.route_class(nodes)
    assert timer.route_class(nodes.copy()) is classes and not classes.flags.writeable
    assert np.array_equal(CommandTimer(t, router).route_class(nodes), classes)
    assert t.system_key == repr(t.spec) and t.system_key is t.system_key
    assert t.system_key_without_links == repr(t.spec.model_copy(update={"link": None}))


def test_decode_panels_run_two_gemms_per_rank(tray):
    t, router = tray
    pieces = {p.name: p for p in compile_model(t, load_model("gqa_llama70b_validation"))}
    for name, n in (("single_user_decode", 8), ("multi_user_decode", 4)):
        low = TimedLowering.untimed(pieces[name].commands)
        build_piece(t, router, pieces[name], low)           # the ring's symbolic check runs here
        assert low.counts["gemm"] == 2 * n
        assert low.counts["ipcq_send"] == low.counts["ipcq_recv"] == n * (n - 1)


def test_attention_ring_that_drops_a_block_fails_the_check(tray):
    t, router = tray
    piece = compile_model(t, load_model("gqa_llama70b_validation"))[2]

    def short_ring(tl):                # merges one partial too few
        acc = tl.contribution()
        current = acc
        for _ in range(tl.n_ranks - 2):
            yield tl.send("E", current)
            current = yield tl.recv("W")
            acc = tl.add(acc, current)
        return acc

    bad = type(piece)(**{**piece.__dict__, "kernel": short_ring})
    with pytest.raises(ScheduleError, match="ends without the contributions"):
        build_piece(t, router, bad, TimedLowering.untimed(bad.commands))


# -- parity -------------------------------------------------------------------------------------------------
def test_p1_single_pe_piece_equals_exact(tray, tmp_path):
    """One PE, one-output-tile GEMMs and a softmax, no collective: the fast path is exact."""
    t, router = tray
    m = load_model(_yaml(tmp_path, "name: one\nkind: attention_panels\nd_head: 32\nkv_len: 32\npanels:\n"
                                   "  p: {kernel: mesh_mlo, install: intracube_pe_ring, s_q: 1, n_ranks: 1, rank_axis: 0}\n"))
    piece = compile_model(t, m)[0]
    fast, exact = evaluate_piece(t, router, piece, "fast"), evaluate_piece(t, router, piece, "exact")
    assert fast.latency_ns == pytest.approx(exact.latency_ns, rel=1e-9)
    assert fast.counts == exact.counts


# known gaps of the fluid schedule, pinned at what they are: none today.  lrab's inter-SIP ring over 16 SIPs at
# 1 KiB was 10.5 % high while the switch links were unserialised (the whole train reached the switch at once and
# the schedule queued the ring's messages there); at their fitted 313.962 GB/s it is within 0.1 %.
FLUID_GAPS: dict[tuple[str, int], float] = {}


def _parity(t, router, piece):
    """The fast path within 5 % of exact mode, its bounds around exact, with every method: ``hybrid`` (the
    stand-in replayed exactly when it fits, the default), ``network`` (the stand-in in the queueing network) and
    ``fluid`` (the stand-in scheduled: what a point too large for the replay gets; FLUID_GAPS pins its known
    gaps).  Returns the hybrid and the exact result."""
    exact = evaluate_piece(t, router, piece, "exact")
    for method in FAST_CHOICES:
        fast = evaluate_piece(t, router, piece, "fast", method=method)
        assert fast.lo_ns <= exact.latency_ns <= fast.hi_ns, method
        gap = FLUID_GAPS.get((piece.name, t.layout.n_sips), 0.0) if method == "fluid" else 0.0
        err = abs(fast.latency_ns / exact.latency_ns - 1)
        assert err < 0.05 or gap - 0.005 < err < gap + 0.005, (method, fast.latency_ns, exact.latency_ns)
    return evaluate_piece(t, router, piece, "fast"), exact


@pytest.mark.parametrize("sips", [2, 4, 8, 16])
def test_p2_tp_mlp_within_5_percent(sips):
    t = build_tables(load_system("ahbm_2sip", {"sips.count": sips}))
    _parity(t, Router(t), compile_model(t, load_model("tp_mlp"))[0])


@pytest.mark.parametrize("collective", ["lrab", "hier2d"])
def test_p2_llama70b_decode_layer_within_5_percent(tray, collective):
    """The all-reduces auto chooses among on 256 PEs (kbfast.workloads.collectives.in_model), inside a decode
    layer."""
    t, router = tray
    m = load_model("llama3_70b")
    fast, exact = _parity(t, router, compile_model(t, m, shape_for(m, "decode", 1, None, 1024),
                                                   collective=collective)[0])
    assert fast.counts == exact.counts
    assert f"o all-reduce ({collective})" in exact.phase_ns


def test_p2_panels_within_5_percent(tray):
    t, router = tray
    for piece in compile_model(t, load_model("gqa_llama70b_validation")):
        _parity(t, router, piece)


@pytest.mark.parametrize("collective, layout", [("lrab", "tp_pes"), ("hier2d", "tp_pes"), ("ring_pipe", "tp_cubes"),
                                                ("hier2d", "tp_cubes")])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_p2_small_model_layer_within_5_percent(tray, collective, layout, phase):
    """Each all-reduce in a Llama-3.2-1B layer, on every PE or on the 32 cube pe0s (where auto may choose the
    flat ring)."""
    t, router = tray
    m = load_model("llama32_1b")
    shape = shape_for(m, phase, 1, 64 if phase == "prefill" else None, 256 if phase == "decode" else None)
    _parity(t, router, compile_model(t, m, shape, layout, collective=collective)[0])


# -- identical layers, properties ---------------------------------------------------------------------------
def test_layers_are_identical(tray):
    """Layer l's weights sit l aligned strides further; the strides are whole PC interleave periods, so every
    layer's Program differs only in addresses that map to the same PCs, and times alike."""
    t, router = tray
    m = load_model("llama32_1b")
    s = shape_for(m, "decode", 1, None, 512)
    first, last = (compile_model(t, m, s, layer=k, collective="lrab")[0] for k in (0, m.layers - 1))
    low = [TimedLowering(p.commands, lambda c, *_: np.ones(len(c))) for p in (first, last)]
    p0, p1 = (build_piece(t, router, p, lw) for p, lw in zip((first, last), low))
    for name in ("op_code", "op_target", "op_nbytes", "op_arg", "agent_ops", "route_edges"):
        assert np.array_equal(getattr(p0, name), getattr(p1, name)), name
    period = t.spec.hbm.burst_bytes * t.spec.hbm.pcs_per_pe
    shift = np.array([c1.b_addr - c0.b_addr for c0, c1 in zip(first.commands, last.commands)])
    assert np.all(shift % period == 0) and shift.max() > 0
    r0, r1 = (evaluate_piece(t, router, p, "fast") for p in (first, last))
    assert r0.latency_ns == r1.latency_ns and r0.breakdown == r1.breakdown


def test_larger_batch_is_never_faster(tray):
    t, router = tray
    m = load_model("llama32_1b")
    lat = [evaluate_step(t, router, m, shape_for(m, "decode", b, None, 512), layers=1).latency_ns()
           for b in (1, 2, 4)]
    assert lat == sorted(lat)


def test_longer_prefill_is_never_faster(tray):
    t, router = tray
    m = load_model("llama32_1b")
    lat = [evaluate_step(t, router, m, shape_for(m, "prefill", 1, seq, None), layers=1).latency_ns()
           for seq in (16, 32, 64)]
    assert lat == sorted(lat)


def test_more_link_bandwidth_is_never_slower():
    m = load_model("tp_mlp")
    lat = []
    for bw in (64, 128, 512):
        t = build_tables(load_system("ahbm_2sip", {"link.router_mesh.bw_gbs": bw, "link.ucie_conn.bw_gbs": bw}))
        lat.append(evaluate_step(t, Router(t), m).latency_ns())
    assert lat == sorted(lat, reverse=True)


# -- CLI ----------------------------------------------------------------------------------------------------
def test_cli_run_model_json():
    res = CliRunner().invoke(app, ["run", "model", "llama32_1b", "--layers", "2", "--kv-len", "512",
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output[res.output.index("{"):])
    assert rep["inputs"]["layers"] == 2 and rep["step"]["tokens_per_s"] > 0
    assert set(rep["critical_path_ns"]) >= {"gemm_compute", "hbm_stream", "math", "collective"}


def test_cli_run_model_csv_ends_with_the_step():
    """The CSV held the pieces only: the step's latency and tokens/s were in JSON and the tables alone."""
    args = ["run", "model", "llama32_1b", "--layers", "2", "--kv-len", "512"]
    rep = json.loads((res := CliRunner().invoke(app, [*args, "--format", "json"])).output[res.output.index("{"):])
    res = CliRunner().invoke(app, [*args, "--format", "csv"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(io.StringIO(res.output[res.output.index("piece,"):]), dtype_backend="numpy_nullable")
    assert list(df["piece"]) == [p["piece"] for p in rep["pieces"]] + ["step"]
    step = df.iloc[-1]
    assert step["fast_latency_ns"] == pytest.approx(rep["step"]["latency_ns"], rel=1e-11)
    assert step["tokens_per_s"] == pytest.approx(rep["step"]["tokens_per_s"], rel=1e-11)
    assert str(df["count[gemm]"].dtype) == "Int64"     # counts written whole (1536, not 1536.0) beside the blanks


@pytest.mark.parametrize("columns", [80, 60])
def test_cli_run_model_tables_scale_times(terminal, columns):
    """tp_mlp's step is 2.5 µs: the step prints it in µs (not 0.003 ms), the critical path in a unit that
    shows each part (not 0.000 everywhere), and every table fits the terminal."""
    res = terminal(columns).invoke(app, ["run", "model", "tp_mlp"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert max(map(len, out.splitlines())) <= columns and "(us)" not in out
    assert re.search(r"^latency\s+2\.495 µs$", out, re.M)
    crit = out[out.index("critical path"):out.index("one layer")]
    # the parts, 0 to 1,813 ns: ns, the smallest unit in which they stay below 10,000
    assert "time ns" in crit and re.search(r"^collective and fabric wait\s+1,813\.\d\s+72\.7 %$", crit, re.M)
    # the GEMMs wait on their tile reads: their span is HBM streaming but for the slot's busy stage's share
    assert re.search(r"^GEMM compute\s+155\.0\s+6\.2 %$", crit, re.M)
    assert re.search(r"^HBM streaming\s+527\.1\s+21\.1 %$", crit, re.M)
    assert re.search(r"^all-reduce \(lrab\)\s+2,495\.5\s+1,839\.3$", out, re.M)      # stage ends at / takes, ns


def test_cli_run_model_prefill_prints_times_scaled(terminal):
    res = terminal(80).invoke(app, ["run", "model", "llama32_1b", "--layers", "1",
                                                        "--kv-len", "512"])
    assert res.exit_code == 0, res.output
    assert re.search(r"^latency\s+\d[\d.,]* (µs|ms)$", res.stdout, re.M) and "(us)" not in res.stdout
    assert re.search(r"^MAC utilisation\s+\d+\.\d\d %$", res.stdout, re.M)


@pytest.mark.parametrize("args, words", [
    (["tp_mlp", "--set", "sips.count=6"], "must divide 2048"),
    (["llama32_1b", "--exact", "--compare"], "exclude each other"),
    (["llama32_1b", "--layers", "17"], "use 1 to 16"),
    (["tp_mlp", "--layers", "1"], "transformer"),
    (["tp_mlp", "--phase", "decode"], "--phase decode: applies to transformer models only"),
    (["tp_mlp", "--batch", "2", "--seq", "8"], "--batch 2: applies to transformer models only"),
    (["gqa_llama70b_validation", "--kv-len", "64"], "hint: drop --kv-len"),
])
def test_cli_run_model_refusals(args, words):
    res = CliRunner().invoke(app, ["run", "model", *args])
    assert res.exit_code == 2 and words in " ".join(res.output.split()), res.output


def test_trace_cache_gives_the_same_program(tray):
    """A piece built twice (the second from the cached, checked replay) has the same ops and channels; the
    cache key holds the sizes, so another shape is traced afresh."""
    from kbfast.workloads import symbolic

    t, router = tray
    m = load_model("llama32_1b")
    piece = compile_model(t, m, shape_for(m, "decode", 2, None, 256), collective="lrab")[0]
    symbolic._TRACED.clear()
    low = lambda: TimedLowering(piece.commands, lambda c, *_: np.full(len(c), 7.0))  # noqa: E731
    first, second = build_piece(t, router, piece, low()), build_piece(t, router, piece, low())
    assert len(symbolic._TRACED) == 1
    for name in ("op_code", "op_target", "op_nbytes", "op_arg", "op_phase", "agent_ops"):
        assert np.array_equal(getattr(first, name), getattr(second, name)), name
    assert np.array_equal(first.channels.src, second.channels.src)
    other = compile_model(t, m, shape_for(m, "decode", 4, None, 256), collective="lrab")[0]
    build_piece(t, router, other, TimedLowering.untimed(other.commands))
    assert len(symbolic._TRACED) == 2


def test_a_piece_that_does_not_change_is_evaluated_once(tray):
    """The LM head does not look at the KV length: two decode steps that differ only there share it, and
    their layers (which do look) differ."""
    t, router = tray
    m = load_model("llama32_1b")
    a, b = (evaluate_step(t, router, m, shape_for(m, "decode", 1, None, kv), layers=1) for kv in (256, 512))
    assert a.results["fast"][1] is b.results["fast"][1]
    assert a.results["fast"][0].latency_ns < b.results["fast"][0].latency_ns


def test_model_sweep_points_do_not_depend_on_their_batch(tmp_path):
    """A batch of model points (one system) gives each point what it gets alone."""
    from kbfast.sweep.batches import evaluate_batch, make_batches
    from kbfast.sweep.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntopology: ahbm_2sip\nworkload: {kind: model, model: llama32_1b, kv_len: 256}\n"
                    "axes: [{grid: {workload.batch: [1, 2], workload.layout: [tp_pes, tp_cubes]}}]\n")
    points = load_spec(path).points()
    together = make_batches(points, "fast")
    assert len(together) == 1
    joint = evaluate_batch(together[0]).rows
    from kbfast.measure.registry import forget
    forget()                                # alone, and cold: nothing carried over from the batch
    alone = [evaluate_batch(b).rows for b in make_batches(points, "fast", max_points=1)]
    cols = ["latency_ns", "latency_lo_ns", "latency_hi_ns", "tokens_per_s", "mac_util"]
    for i, row in enumerate(alone):
        assert joint[cols].iloc[i].tolist() == row[cols].iloc[0].tolist()


def test_model_sweep_rows_carry_only_what_the_model_reads(tmp_path):
    """A transformer's point names its phase and batch (the defaults filled in); the TP MLP's carries none."""
    from kbfast.sweep.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {kind: model}\naxes: [{grid: {workload.model: [llama32_1b, tp_mlp]}}]\n")
    w = [p.workload for p in load_spec(path).points()]
    assert (w[0]["phase"], w[0]["batch"]) == ("decode", 1) and (w[1]["phase"], w[1]["batch"]) == (None, None)


def test_documented_exact_runs_stay_below_the_warning_level():
    """Every `kbfast run model ... --exact | --compare` in docs/models.md builds an exact Program below
    kbfast.config.budget.WARN_BYTES (the prefill example at --seq 512 needed 56 M tile ops, about 19 GiB, and exited 2)."""
    import shlex
    from pathlib import Path

    from kbfast.config import budget
    from kbfast.ir import gemm_ops_count

    text = (Path(__file__).parents[1] / "docs" / "models.md").read_text()
    lines = [ln.split("#")[0] for ln in text.splitlines() if ln.startswith("kbfast run model ")]
    runs = [shlex.split(ln)[3:] for ln in lines if "--exact" in ln or "--compare" in ln]
    assert runs
    for args in runs:
        opts = dict(zip(args[1::2], args[2::2]))
        sets = dict(kv.split("=") for flag, kv in zip(args[1:], args[2:]) if flag == "--set")
        t = build_tables(load_system("ahbm_2sip", {k: int(v) for k, v in sets.items()}))
        r, m = Router(t), load_model(args[0])
        num = lambda f: int(opts[f]) if f in opts else None   # noqa: E731
        shape = shape_for(m, opts.get("--phase"), num("--batch"), num("--seq"), num("--kv-len"))
        for piece in compile_model(t, m, shape, collective="lrab"):
            lower = TimedLowering.untimed(piece.commands)
            p = build_piece(t, r, piece, lower)
            tile_ops = sum(gemm_ops_count(piece.commands[c].plan) for c in lower.command_id)
            assert budget.program_bytes(p.n_ops + tile_ops) < budget.WARN_BYTES, (args, piece.name)


def test_model_summary_scales_times_and_prints_utilisation_as_percent():
    """The sweep's model table: latency and TTFT in one unit scaled to the values (µs for a sub-ms step, not
    0.004 ms; none when a 25 ns and a 288 ms step share it), tokens/s with one decimal, MAC utilisation as a
    percent; the many-point form likewise."""
    from kbfast.report.sweep import table_view
    from kbfast.report.model import MAX_ROWS, model_summary

    df = pd.DataFrame({"model": "m", "phase": ["decode", "prefill"], "layout": "tp_pes", "n_sips": 2,
                       "latency_ns": [22_638.0, 384_889.0], "tokens_per_s": [44_173.64, float("nan")],
                       "time_to_first_token_ns": [float("nan"), 384_889.0], "mac_util": [0.014, 0.2],
                       "error": None})
    out = model_summary(df)
    assert list(out.columns) == ["latency (µs)", "tokens/s", "TTFT (µs)", "MAC util"]
    assert out["MAC util"].tolist() == ["1.4 %", "20.0 %"] and out["tokens/s"].iloc[0] == "44,173.6"
    assert out["latency (µs)"].tolist() == [22_638.0, 384_889.0]            # ns, printed in µs
    assert [r[1] for r in table_view(out).rows] == ["22.638", "384.889"]
    mixed = model_summary(df.assign(latency_ns=[25.0, 2.88e8], time_to_first_token_ns=[float("nan"), 2.88e8]))
    assert [r[1] for r in table_view(mixed).rows] == ["25.0 ns", "288.0 ms"]
    many = pd.concat([df.assign(batch=b) for b in range(MAX_ROWS)], ignore_index=True)
    table = model_summary(many)
    assert list(table.columns) == ["points", "min (µs)", "max (µs)", "max MAC util"]
    assert table["max MAC util"].tolist() == ["1.4 %", "20.0 %"]


def test_gemm_summary_prints_utilisation_as_percent():
    from kbfast.report.gemm import gemm_summary

    df = pd.DataFrame({"staging": ["load_ref", "load_ref"], "under_tile": [False, True], "mac_util": [0.461, 0.2],
                       "macs_per_ns": [1888.0, 800.0], "bound_stage": ["dma_read", "dma_read"], "error": None})
    out = gemm_summary(df)
    assert out.loc["load_ref", "util median"] == "33.1 %" and out.loc["load_ref", "util max"] == "46.1 %"


# -- collectives chosen per message (kbfast.workloads.collectives.in_model, kbfast.measure.model) -------------
def test_auto_runs_the_fastest_candidate_per_message(tray):
    """``auto`` times each algorithm alone on the piece's PEs for the piece's message and runs the fastest:
    a 1 MiB prefill all-reduce and the 8-byte sampling one may choose differently; fixing the chosen
    algorithm gives the same step, bit for bit."""
    t, router = tray
    m = load_model("llama32_1b")
    s = shape_for(m, "prefill", 1, 256, None)
    step = evaluate_step(t, router, m, s, layers=1)
    assert set(step.choices) == {"layer", "head"}
    for piece in step.pieces:
        c = step.choices[piece.name]
        assert set(c["candidates_ns"]) == set(ALGORITHMS) - {"ring_pipe"}     # 256 PEs: no flat ring
        assert c["chosen"] == min(c["candidates_ns"], key=c["candidates_ns"].get)
        assert piece.info[piece.allreduce]["collective"] == c["chosen"]
    assert step.choices["layer"]["bytes"] == 256 * m.hidden * 2 and step.choices["head"]["bytes"] == 8
    assert step.choices["layer"]["chosen"] != "lrab"          # a 1 MiB message: a pipelined ring wins
    assert step.choices["head"]["chosen"] == "lrab"           # 8 bytes: the fewest steps win
    fixed = evaluate_step(t, router, m, s, layers=1, collective=step.choices["layer"]["chosen"])
    assert fixed.results["fast"][0].latency_ns == step.results["fast"][0].latency_ns
    lrab = evaluate_step(t, router, m, s, layers=1, collective="lrab")
    assert lrab.results["fast"][0].latency_ns > step.results["fast"][0].latency_ns


def test_collective_option_is_checked_and_the_reference_mlp_keeps_lrab(tray):
    t, _ = tray
    assert load_model("tp_mlp").collective == "lrab" and load_model("llama3_70b").collective == "auto"
    assert compile_model(t, load_model("tp_mlp"))[0].info["mlp"]["collective"] == "lrab"
    with pytest.raises(KbfastError, match="unknown model collective 'rign_pipe'.*ring_pipe"):
        compile_model(t, load_model("tp_mlp"), collective="rign_pipe")
    with pytest.raises(KbfastError, match="--collective lrab: applies to models with an all-reduce"):
        compile_model(t, load_model("gqa_llama70b_validation"), collective="lrab")
    assert typing.get_args(Collective) == CHOICES


def test_model_sweep_takes_the_collective_as_an_axis(tmp_path):
    """``workload.collective`` is a sweep key: each point runs the algorithm it names (``collective_used``),
    and the attention panels, which have no all-reduce, refuse it by key."""
    from kbfast.sweep.batches import evaluate_batch, make_batches
    from kbfast.sweep.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntopology: ahbm_2sip\nworkload: {kind: model, model: tp_mlp}\n"
                    "axes: [{grid: {workload.collective: [lrab, hier2d, auto]}}]\n")
    rows = evaluate_batch(make_batches(load_spec(path).points(), "fast")[0]).rows
    assert rows["collective_used"].tolist()[:2] == ["lrab", "hier2d"]
    assert rows["collective_used"].iloc[2] in ALGORITHMS
    assert rows["latency_ns"].iloc[0] != rows["latency_ns"].iloc[1]
    path.write_text("name: s\ntopology: ahbm_2sip\nworkload: {kind: model, model: gqa_llama70b_validation, "
                    "collective: lrab}\n")
    with pytest.raises(ConfigError) as err:
        load_spec(path).points()
    assert err.value.key == "workload.collective"


# -- memory per PE: the HBM slice and the TCM budget (pe.tcm_kib) ---------------------------------------------
def test_a_that_does_not_fit_in_tcm_is_streamed(tray):
    """A 2048-token prefill's activations (32 MiB per PE) cannot be pinned in a 2 MiB TCM: the QKV and up GEMMs
    stream A tile by tile and the kernel loads nothing for them; every piece's largest GEMM fits its TCM."""
    t, router = tray
    m = load_model("llama3_70b")
    layer = compile_model(t, m, shape_for(m, "prefill", 1, 2048, None), collective="lrab")[0]
    L = layer.info["layer"]
    streamed = {name for name in ("qkv", "o", "up", "down") if not L["pinned"][L[name]]}
    assert streamed == {"qkv", "up"}
    mem = layer.memory
    assert mem["a_streamed"] == 2 and mem["tcm_pinned"] + mem["tcm_tiles"] <= mem["tcm"] == 2 << 20
    # per PE (2 query heads and a KV head per cube, over its 8 PEs): input and output, QKV, O, gate and up
    assert mem["activations"] == (2 * 8192 + (2 + 2) * 128 // 8 + 2 * 128 // 8 + 2 * 28672 // 256) * 2048 * 2
    lower = TimedLowering.untimed(layer.commands)
    p = build_piece(t, router, layer, lower)
    loads = (p.op_code == Op.DMA_READ) & (p.op_phase == list(p.phase_names).index("qkv"))
    assert not loads.any()                                   # qkv: no tile load of x, A streams


def test_parity_with_a_streamed(tmp_path):
    """A GEMM streaming A (a small TCM) keeps the fast path within 5 % of exact, both methods."""
    t = build_tables(load_system("ahbm_2sip", {"pe.tcm_kib": 64}))
    m = load_model("llama32_1b")
    layer = compile_model(t, m, shape_for(m, "prefill", 1, 64, None), collective="lrab")[0]
    assert layer.memory["a_streamed"] >= 2
    _parity(t, Router(t), layer)


def test_tile_buffers_over_the_tcm_are_refused(runner_model):
    res = runner_model("llama32_1b", "--set", "pe.tcm_kib=8")
    assert res.exit_code == 2
    err = " ".join(res.stderr.split())
    assert "GEMM's tile buffers take 18 KiB of TCM" in err and "over its 8 KiB (pe.tcm_kib 8)" in err, err


@pytest.fixture
def runner_model():
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["run", "model", *args])


# -- sequence parallelism ------------------------------------------------------------------------------------
@pytest.mark.parametrize("collective, layout", [("hier2d", "tp_pes"), ("ring_pipe", "tp_cubes")])
def test_p2_sequence_parallel_layer_within_5_percent(tray, collective, layout):
    """Reduce-scatter and all-gather around the norms: the norms work on the PE's 1/P, the gathers and
    scatters pass the symbolic check (every slice gathered once, every chunk summed once), and the fast path
    holds to exact."""
    t, router = tray
    m = load_model("llama32_1b")
    layer = compile_model(t, m, shape_for(m, "prefill", 1, 64, None), layout, collective=collective,
                          sequence_parallel=True)[0]
    fast, exact = _parity(t, router, layer)
    stages = list(exact.phase_ns)
    assert stages[:2] == ["norm", f"qkv all-gather ({collective})"]
    assert f"o reduce-scatter ({collective})" in stages and f"ffn reduce-scatter ({collective})" in stages
    assert not any("all-reduce" in s for s in stages)


def test_auto_remembers_its_choice_per_candidate_set(tray):
    """A step without sequence parallelism chooses first; the same message under it still chooses among the
    all-reduces that scatter (the remembered choice is keyed on the candidates too)."""
    t, router = tray
    m = load_model("llama32_1b")
    s = shape_for(m, "prefill", 1, 64, None)
    plain = evaluate_step(t, router, m, s, layers=1)
    sp = evaluate_step(t, router, m, s, layers=1, sequence_parallel=True)
    assert "lrab" in plain.choices["layer"]["candidates_ns"]
    assert set(sp.choices["layer"]["candidates_ns"]) == {"hier2d"}


def test_sequence_parallel_needs_a_scattering_collective(tray):
    t, router = tray
    m = load_model("llama32_1b")
    s = shape_for(m, "prefill", 1, 64, None)
    with pytest.raises(KbfastError, match="needs an all-reduce that splits.*lrab does not"):
        compile_model(t, m, s, collective="lrab", sequence_parallel=True)
    with pytest.raises(KbfastError, match="--sequence-parallel: applies to transformer models only"):
        compile_model(t, load_model("tp_mlp"), sequence_parallel=True)
    step = evaluate_step(t, router, m, s, layers=1, sequence_parallel=True)      # auto: no lrab for the layer
    assert set(step.choices["layer"]["candidates_ns"]) == {"hier2d"}
    assert "lrab" in step.choices["head"]["candidates_ns"]                        # the head keeps its all-reduce


@pytest.mark.parametrize("model, layout, collective, sp, hot",
                         [("tiny", "tp_cubes", "hier2d", False, None), ("tiny", "tp_cubes", "ring_pipe", True, None),
                          ("tiny", "tp_pes", "hier2d", True, None), ("tiny", "tp_pes", "ring_pipe", False, None),
                          ("tiny_moe", "tp_cubes", "hier2d", False, None), ("tiny_moe", "tp_cubes", "hier2d", True, 0.5)])
def test_one_trace_serves_every_rank_where_only_lrab_reads_the_rank(request, model, layout, collective, sp, hot):
    """Without lrab, a layer's and the LM head's ranks all run the same ops (kbfast.workloads.model.trace_roles):
    their Programs traced once equal those traced per cube and PE, op for op; with pipelines and replicas too;
    a mixture of experts' layer by its blocks (and ranks, with a hot expert)."""
    import dataclasses

    import kbfast.workloads.model as wm
    from kbfast.workloads.symbolic import forget_traces

    t = build_tables(load_system("ahbm_2sip"))
    r = Router(t)
    m = load_model(request.getfixturevalue(model))
    for pp, dp in ((1, 1), (2, 1), (1, 2)):
        pieces = compile_model(t, m, shape_for(m, "decode", 4, None, 64), layout, collective=collective,
                               sequence_parallel=sp or None, overlap="prefetch", pp=pp, dp=dp,
                               **({"hot_expert": hot} if hot else {}))
        for piece in pieces:
            progs = []
            for roles in (wm.trace_roles(piece), piece.roles):
                forget_traces()
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr(wm, "trace_roles", lambda p, roles=roles: roles)
                    lower = TimedLowering(piece.commands, lambda c, *_: np.full(len(c), 100.0))
                    progs.append(build_piece(t, r, piece, lower, 0.0))
            if piece.name in ("layer", "head"):
                fewer, every = (len(np.unique(x, axis=0)) for x in (wm.trace_roles(piece), piece.roles))
                assert (fewer <= every) if model == "tiny_moe" and piece.name == "layer" else fewer == 1 < every
            for f in dataclasses.fields(progs[0]):
                a, b = getattr(progs[0], f.name), getattr(progs[1], f.name)
                if isinstance(a, np.ndarray):
                    assert np.array_equal(a, b), (piece.name, pp, dp, f.name)


def test_the_memory_table_keeps_its_row_labels_whole_at_60_columns(terminal) -> None:
    """At 60 columns the memory table's values wrap between quantities, and its labels stay whole (rich gave the
    labels the squeeze: ``HBM: of the`` over ``slice`` beside two 15-character value columns)."""
    res = terminal(60).invoke(app, ["run", "model", "llama32_1b", "--layers", "1"], catch_exceptions=False)
    text = res.stdout[res.stdout.index("memory per working PE"):res.stdout.index("op counts")]
    for label in ("HBM: of the slice", "TCM: pinned operands", "TCM: of the budget", "GEMMs streaming A"):
        assert re.search(rf"^{label}\s", text, re.M), text
    assert max(map(len, res.stdout.splitlines())) <= 60
