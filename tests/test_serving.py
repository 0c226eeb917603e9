"""The serving loop (kbfast.serving, docs/serving.md): requests, the schedule against hand-derived cases,
step costs and their checks, a tiny model's run step by step against exact mode, and ``kbfast serve``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import TINY_MODEL
from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.config.models import load_model
from kbfast.errors import ConfigError, KbfastError
from kbfast.serving import serve
from kbfast.serving.costs import (DirectCosts, InterpolatedCosts, StepOptions, decode_shape, granules, memory,
                                  prefill_shape)
from kbfast.serving.report import _busy_segments, latencies, summary
from kbfast.serving.requests import MOST_TOKENS, Requests, parse_lengths, poisson, read_trace
from kbfast.serving.scheduler import simulate
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router


class Flat:
    """Step costs of a hand-derived case: a prefill ``p`` ns per token, a decode step ``d`` ns per user plus
    ``kv`` ns per KV token."""

    def __init__(self, p: float = 10.0, d: float = 5.0, kv: float = 0.0):
        self.p, self.d, self.kv = p, d, kv

    def prefill_ns(self, seq: int) -> float:
        return self.p * seq

    def decode_ns(self, batch: int, kv: int) -> float:
        return self.d * batch + self.kv * kv


def _requests(arrival, prompt, output) -> Requests:
    return Requests(np.asarray(arrival, float), np.asarray(prompt, np.int64), np.asarray(output, np.int64))


# -- requests ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, kind", [("512", "const"), ("uniform:1:9", "uniform"), ("normal:100:20", "normal"),
                                        ("lognormal:256:0.7", "lognormal")])
def test_lengths_draw_whole_tokens_deterministically(text, kind):
    d = parse_lengths(text, "--prompt-len")
    assert d.kind == kind
    a, b = (d.draw(np.random.default_rng(3), 2000) for _ in range(2))
    assert np.array_equal(a, b) and a.dtype == np.int64 and a.min() >= 1
    if kind == "uniform":
        assert set(a.tolist()) == set(range(1, 10))


@pytest.mark.parametrize("text", ["0", "-3", "fast", "uniform:9:1", "uniform:1.5:4", "normal:100", "zipf:1:2",
                                  "lognormal:0:1", "20000000", "uniform:1:1e30", "normal:1e30:1", "normal:inf:1",
                                  "normal:nan:1", "normal:100:nan", "lognormal:512:50"])
def test_bad_lengths_are_refused_with_the_flag(text):
    with pytest.raises(KbfastError, match="--output-len"):
        parse_lengths(text, "--output-len")


def test_long_tailed_draws_stay_within_the_longest_length():
    """A wide lognormal (SIGMA 8) puts a third of its raw draws above 10^7 tokens: they are drawn again."""
    got = parse_lengths("lognormal:100000:8", "--prompt-len").draw(np.random.default_rng(1), 1000)
    assert got.min() >= 1 and got.max() <= MOST_TOKENS and got.max() > MOST_TOKENS // 100


def test_poisson_arrivals_are_reproducible_and_have_the_rate():
    one, two = (poisson(50.0, 200.0, parse_lengths("64", "p"), parse_lengths("uniform:1:4", "o"), 7) for _ in range(2))
    assert np.array_equal(one.arrival_ns, two.arrival_ns) and np.array_equal(one.output, two.output)
    assert np.all(np.diff(one.arrival_ns) >= 0) and one.arrival_ns.max() < 200e9
    assert abs(len(one) / 200.0 - 50.0) < 4 * np.sqrt(50.0 / 200.0) * 10     # 10^4 arrivals: rate within 4 sigma


def test_trace_file_is_read_and_sorted(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0.5,10,2\n0.1,20,3\n")
    r = read_trace(path)
    assert r.arrival_ns.tolist() == [0.1e9, 0.5e9] and r.prompt.tolist() == [20, 10]


@pytest.mark.parametrize("text, key", [("arrival_s,prompt_len\n0,1\n", "output_len"),
                                       ("arrival_s,prompt_len,output_len\n0,1,0\n", "output_len (row 1)"),
                                       ("arrival_s,prompt_len,output_len\n-1,1,1\n", "arrival_s (row 1)"),
                                       ("arrival_s,prompt_len,output_len\n0,2.5,1\n", "prompt_len (row 1)"),
                                       ("arrival_s,prompt_len,output_len\n0,1,1\ninf,1,1\n", "arrival_s (row 2)"),
                                       ("arrival_s,prompt_len,output_len\n0,1e30,1\n", "prompt_len (row 1)")])
def test_bad_trace_names_file_and_key(tmp_path, text, key):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_trace(path)
    assert err.value.key == key and err.value.file == str(path)


# -- the loop, hand-derived -------------------------------------------------------------------------------
def test_two_requests_prefill_first_then_decode_together():
    """Both arrive at 0 (prompt 8, output 3): prefill r0 [0, 80], prefill r1 [80, 160], two decode steps of
    two users [160, 170], [170, 180]; r0's first token at 80, r1's at 160, both finish at 180."""
    s = simulate(_requests([0, 0], [8, 8], [3, 3]), Flat(), max_batch=4, capacity_tokens=100, granule=1)
    assert s.steps["kind"].tolist() == ["prefill", "prefill", "decode", "decode"]
    assert s.steps["end_ns"].tolist() == [80, 160, 170, 180]
    assert s.first_token_ns.tolist() == [80, 160] and s.finish_ns.tolist() == [180, 180]
    lat = latencies(s)
    assert lat["ttft_ns"].tolist() == [80, 160] and lat["tpot_ns"].tolist() == [50, 10]


def test_kv_capacity_holds_the_second_request_back():
    """Capacity 11 tokens: r0 (8 + 3) fills it, r1 waits for r0's finish at 90 (prefill 80, two decodes of 5),
    then runs alone: prefill [90, 170], decodes to 180."""
    s = simulate(_requests([0, 0], [8, 8], [3, 3]), Flat(), max_batch=4, capacity_tokens=11, granule=1)
    assert s.admitted_ns.tolist() == [0, 90]
    assert s.finish_ns.tolist() == [90, 180]
    assert s.steps["reserved_tokens"].max() == 11 and s.steps["batch"].max() == 1


def test_max_batch_and_refusals():
    """max_batch 1 runs one request at a time; a request needing more KV than the whole cache is refused."""
    s = simulate(_requests([0, 0, 0], [4, 4, 50], [2, 2, 2]), Flat(), max_batch=1, capacity_tokens=20, granule=1)
    assert s.refused.tolist() == [False, False, True]
    assert s.finish_ns[:2].tolist() == [45, 90] and np.isnan(s.finish_ns[2])
    out = summary(s)
    assert out["served"] == 2 and out["refused"] == 1 and out["decode_batch_max"] == 1


def test_idle_until_the_next_arrival_and_one_token_outputs():
    s = simulate(_requests([0, 1000], [4, 4], [1, 2]), Flat(), max_batch=4, capacity_tokens=100, granule=1)
    assert s.finish_ns.tolist() == [40, 1045]
    assert s.steps["start_ns"].tolist() == [0, 1000, 1040]


def test_decode_step_takes_the_mean_kv_in_granules():
    """Two users at KV lengths 9 and 12 (prompt + tokens made): mean 10.5, in granules of 4: 12."""
    assert decode_shape(2, 10.5, 4).kv_len == 12 and prefill_shape(9, 4).seq == 12 and granules(0, 4) == 4
    s = simulate(_requests([0, 0], [8, 11], [2, 2]), Flat(kv=1.0), max_batch=4, capacity_tokens=100, granule=4)
    dec = s.steps[s.steps["kind"] == "decode"]
    assert dec["tokens"].tolist() == [12] and dec["batch"].tolist() == [2]


def _naive_loop(req: Requests, costs, max_batch: int, cap: int) -> list[float]:
    """The module docstring's loop written out request by request, slowly: each request's finish."""
    n = len(req)
    state = ["future"] * n
    made = [0] * n
    finish = [np.nan] * n
    now, used = float(req.arrival_ns[0]), 0
    while any(s in ("future", "waiting", "admitted", "decoding") for s in state):
        for i in range(n):
            if state[i] == "future" and req.arrival_ns[i] <= now:
                state[i] = "waiting" if req.prompt[i] + req.output[i] <= cap else "refused"
        for i in range(n):
            if state[i] != "waiting":
                continue
            running = sum(s in ("admitted", "decoding") for s in state)
            if running >= max_batch or used + req.prompt[i] + req.output[i] > cap:
                break
            state[i], used = "admitted", used + int(req.prompt[i] + req.output[i])
        admitted = [i for i in range(n) if state[i] == "admitted"]
        decoding = [i for i in range(n) if state[i] == "decoding"]
        if admitted:
            i = admitted[0]
            now += costs.prefill_ns(int(req.prompt[i]))
            made[i] = 1
            state[i] = "decoding" if req.output[i] > 1 else "done"
            done = [] if req.output[i] > 1 else [i]
        elif decoding:
            kv = np.mean([req.prompt[i] + made[i] for i in decoding])
            now += costs.decode_ns(len(decoding), int(np.ceil(kv - 1e-9)))
            for i in decoding:
                made[i] += 1
            done = [i for i in decoding if made[i] == req.output[i]]
        else:
            now = min(float(req.arrival_ns[i]) for i in range(n) if state[i] == "future")
            continue
        for i in done:
            state[i], finish[i], used = "done", now, used - int(req.prompt[i] + req.output[i])
    return finish


def test_loop_equals_the_naive_loop():
    req = poisson(2e7, 2e-6, parse_lengths("uniform:1:40", "p"), parse_lengths("uniform:1:12", "o"), 11)
    assert len(req) > 20
    costs = Flat(p=3.0, d=7.0, kv=0.25)
    for max_batch, cap in ((4, 200), (16, 10_000), (1, 60)):
        s = simulate(req, costs, max_batch, cap, granule=1)
        assert np.array_equal(s.finish_ns, _naive_loop(req, costs, max_batch, cap), equal_nan=True)


# -- step costs on a tiny model ---------------------------------------------------------------------------
def test_kv_capacity_from_the_model_memory(tables, tiny):
    opts = StepOptions(load_model(tiny), "tp_cubes")
    m = memory(tables, opts, 8, 256)
    assert m.granule == 4                           # 8 heads over 32 cubes: rings of 4 cube pe0s
    # 2 layers x 1 KV head per group x 32 dims x 2 B x (K and V), over the ring's 4 PEs
    assert m.bytes_per_token == 2 * 1 * 32 * 2 * 2 // 4
    assert m.capacity_tokens == (m.hbm_slice - m.weights - m.activations) // m.bytes_per_token


def test_kv_capacity_of_a_model_whose_cache_is_tight(tables):
    """Llama-3-70B on the cube pe0s: 4.3 GiB of weights in a 6 GiB slice leave 44,144 tokens of KV cache (80
    layers x 1 KV head x 128 dims x 2 B x 2 per token; the ring is one PE).  The ring is found without
    compiling a step at a long KV length, which would not fit."""
    m = memory(tables, StepOptions(load_model("llama3_70b"), "tp_cubes"), 32, 1024)
    assert m.granule == 1 and m.bytes_per_token == 80 * 128 * 2 * 2
    assert m.capacity_tokens == (m.hbm_slice - m.weights - m.activations) // m.bytes_per_token == 44_144


def test_a_tight_kv_cache_times_grid_shapes_beyond_it(tmp_path):
    """96 layers of 256-dim KV heads in a 128 MiB slice: 1,3xx tokens of KV cache.  Four requests fit together
    (a 600-token prompt and three short ones), but the decode grid's corner, four users at the longest KV
    length, would not: it is timed all the same (the run holds its cache to the capacity itself).  A request
    longer than the whole cache is refused and left out of the grids; when none fits the run is refused."""
    path = tmp_path / "tight.yaml"
    path.write_text(TINY_MODEL.replace("layers: 2", "layers: 96").replace("head_dim: 32", "head_dim: 256"))
    t = build_tables(load_system("ahbm_2sip", {"hbm.total_gib_per_cube": 1}))
    opts = StepOptions(load_model(str(path)), "tp_cubes")
    req = _requests([0, 0, 0, 0, 0], [600, 32, 40, 48, 5000], [3, 3, 3, 3, 2])
    res = serve(t, Router(t), opts, req, max_batch=4)
    cap = res.memory.capacity_tokens
    assert 600 + 32 + 40 + 48 + 12 <= cap < min(4 * 603, 5002)
    assert res.schedule.refused.tolist() == [False] * 4 + [True] and summary(res.schedule)["served"] == 4
    assert res.costs.batches[-1] * res.costs.kvs[-1] > cap and res.costs.prompts[-1] == 600
    with pytest.raises(KbfastError, match="no request fits the KV cache"):
        serve(t, Router(t), opts, _requests([0], [5000], [2]), max_batch=4)


@pytest.fixture(scope="module")
def tiny_runs(tables, router, tiny):
    """The same requests served fast (interpolated) and exactly (every step shape replayed)."""
    opts = StepOptions(load_model(tiny), "tp_cubes")
    req = poisson(4e4, 3e-4, parse_lengths("uniform:8:64", "p"), parse_lengths("uniform:2:10", "o"), 5)
    fast = serve(tables, router, opts, req, max_batch=8)
    exact = serve(tables, router, opts, req, max_batch=8, mode="exact")
    return fast, exact, opts


def test_tiny_model_every_fast_step_within_5_percent_of_exact(tiny_runs, tables, router):
    """Each step of the fast run, its interpolated cost against its shape's exact evaluation."""
    fast, exact, opts = tiny_runs
    steps = fast.schedule.steps
    assert len(steps) > 20 and (steps["kind"] == "decode").any() and steps["batch"].max() > 1
    ex = exact.costs
    for r in steps.itertuples():
        want = ex.prefill_ns(r.tokens) if r.kind == "prefill" else ex.decode_ns(r.batch, r.tokens)
        assert abs((r.end_ns - r.start_ns) / want - 1) <= 0.05, r


def test_tiny_model_percentiles_within_5_percent_of_exact(tiny_runs):
    fast, exact, _ = tiny_runs
    a, b = summary(fast.schedule), summary(exact.schedule)
    for key in ("ttft_p50_ns", "ttft_p99_ns", "tpot_p50_ns", "e2e_p90_ns"):
        assert abs(a[key] / b[key] - 1) <= 0.05, key
    assert a["served"] == b["served"] == len(fast.schedule.requests)


def test_interpolants_are_checked_at_held_out_shapes(tiny_runs):
    fast, _, _ = tiny_runs
    checks = fast.costs.checks
    last = max(c.round for c in checks)
    assert {c.kind for c in checks} == {"decode", "prefill"}
    assert all(c.ok for c in checks if c.round == last)
    grid = {(b, kv) for b in fast.costs.batches for kv in fast.costs.kvs}
    assert all((c.batch, c.tokens) not in grid for c in checks if c.kind == "decode" and c.round == 0)
    for c in checks:          # each check's direct figure is the shape's own evaluation
        assert c.direct_ns == fast.costs.direct(decode_shape(c.batch, c.tokens, 1) if c.kind == "decode"
                                                else prefill_shape(c.tokens, 1))


class FormulaDirect:
    """DirectCosts' interface over a formula with a GEMM tile edge at 4 users and a bend in the KV length; a
    shape is read only after an ``evaluate`` announced it (on ``--jobs`` N, a shape read first would be
    evaluated alone, in the parent)."""

    def __init__(self):
        self.t = SimpleNamespace(spec=SimpleNamespace(pe=SimpleNamespace(tile=SimpleNamespace(m=4))))
        self.memo = {}

    def evaluate(self, shapes):
        for s in shapes:
            tiles, bend = -(-s.batch // 4), max(s.kv_len - 300, 0) * 3.0
            self.memo.setdefault(s, 100.0 + 50.0 * tiles + s.batch * (s.kv_len + bend) if s.phase == "decode"
                                 else 10.0 * s.seq + s.seq ** 2 / 50)

    def __call__(self, shape):
        return self.memo[shape]

    decode_ns, prefill_ns = DirectCosts.decode_ns, DirectCosts.prefill_ns


def test_interpolants_read_only_announced_shapes_and_refuse_outside_the_grid():
    costs = InterpolatedCosts.build(FormulaDirect(), 10, (40, 900), (32, 800), 4)
    assert costs.checks and all(c.ok for c in costs.checks if c.round == costs.checks[-1].round)
    assert {4, 5, 8, 9} <= set(costs.batches)               # each side of the tile edges
    # the users' grid fills in: its KV lengths are then checked at the most users, where they weigh most
    assert costs.batches == list(range(1, 11))
    assert {c.batch for c in costs.checks if c.kind == "decode" and c.round == costs.checks[-1].round} == {10}
    assert costs.decode_ns(10, 900) == costs.direct.decode_ns(10, 900)
    for call in (lambda: costs.decode_ns(11, 100), lambda: costs.decode_ns(2, 904),
                 lambda: costs.decode_ns(2, 36), lambda: costs.prefill_ns(804), lambda: costs.prefill_ns(28)):
        with pytest.raises(ValueError, match="outside the interpolation grid"):
            call()


def test_direct_costs_evaluate_each_shape_once(tables, router, tiny):
    seen = []
    d = DirectCosts(tables, router, StepOptions(load_model(tiny), "tp_cubes"), progress=lambda k, n: seen.append(k))
    assert d.decode_ns(2, 16) == d.decode_ns(2, 16) and seen == [1]


def test_shapes_on_two_processes_equal_one(tables, router, tiny):
    """--jobs 2 evaluates on spawned workers, bit for bit what one process gives."""
    opts = StepOptions(load_model(tiny), "tp_cubes")
    shapes = [decode_shape(2, 16, 4), decode_shape(3, 40, 4), prefill_shape(24, 4)]
    with DirectCosts(tables, router, opts, jobs=2) as two:
        two.evaluate(shapes)
    one = DirectCosts(tables, router, opts)
    assert {s: one(s) for s in shapes} == two.memo


def test_serving_refuses_what_is_no_transformer(tables, router):
    req = _requests([0], [4], [2])
    with pytest.raises(KbfastError, match="transformer"):
        serve(tables, router, StepOptions(load_model("tp_mlp")), req, 4)


# -- the command ------------------------------------------------------------------------------------------
def test_kbfast_serve_prints_within_80_columns_and_writes_its_files(tiny, tmp_path):
    trace = tmp_path / "trace.csv"
    pd.DataFrame({"arrival_s": [0.0, 1e-5, 2e-5], "prompt_len": [16, 32, 8], "output_len": [4, 2, 3]}).to_csv(
        trace, index=False)
    runner = CliRunner(env={"COLUMNS": "80"})
    res = runner.invoke(app, ["serve", tiny, "--trace", str(trace), "--layout", "tp_cubes", "--plot",
                              str(tmp_path / "run.png"), "--steps", str(tmp_path / "steps.csv"), "--requests",
                              str(tmp_path / "req.parquet")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "time to first token" in res.output and "within ±2 %" in res.output
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    assert (tmp_path / "run.png").stat().st_size > 10_000
    assert len(pd.read_csv(tmp_path / "steps.csv")) >= 3 + 3
    assert pd.read_parquet(tmp_path / "req.parquet")["finish_ns"].notna().all()
    out = json.loads(CliRunner().invoke(app, ["serve", tiny, "--trace", str(trace), "--layout", "tp_cubes",
                                              "--format", "json"], catch_exceptions=False).stdout)
    assert out["summary"]["served"] == 3 and out["checks"]


def test_kbfast_serve_one_late_request_of_one_token(tiny, tmp_path):
    """A trace of one row arriving at 5 s whose one token the prefill makes: no decode step, no TPOT; the span
    starts at its arrival."""
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n5.0,16,1\n")
    res = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["serve", tiny, "--trace", str(trace), "--layout",
                                                        "tp_cubes", "--max-batch", "64"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "nan" not in res.stdout and "decode batch: mean / most" in res.stdout
    out = json.loads(CliRunner().invoke(app, ["serve", tiny, "--trace", str(trace), "--layout", "tp_cubes",
                                              "--format", "json"], catch_exceptions=False).stdout)["summary"]
    assert out["decode_steps"] == 0 and out["span_ns"] == out["ttft_p50_ns"] == out["e2e_p99_ns"]


def test_kbfast_serve_exits_1_when_an_interpolant_stays_over(tiny, tmp_path):
    """A tiny model's prompts of 64 to 1,000 tokens cross 32-token GEMM tile edges that four refinements do not
    all catch: the report is printed in full, the plot written, then exit 1 with the worst check named."""
    res = CliRunner().invoke(app, ["serve", tiny, "--layout", "tp_cubes", "--rate", "20000", "--duration", "0.002",
                                   "--plot", str(tmp_path / "run.png")])
    assert res.exit_code == 1, res.output
    assert " over" in res.stdout and "time to first token" in res.stdout and (tmp_path / "run.png").exists()
    assert "check failed" in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize("args, text", [(["--prompt-len", "uniform:5"], "--prompt-len"),
                                        (["--rate", "0"], "--rate"), (["--max-batch", "0"], "--max-batch"),
                                        (["--rate", "inf"], "--rate"), (["--duration", "1e20"], "--duration"),
                                        (["--rate", "1e-9"], "no request arrives"), (["--seed", "-1"], "--seed"),
                                        (["--steps", "x.txt"], "--steps"), (["--layout", "tp_sips"], "--layout"),
                                        (["--exact", "--method", "fluid"], "--exact runs no fast path; drop --method")])
def test_kbfast_serve_refuses_bad_input_with_exit_2(tiny, args, text):
    res = CliRunner().invoke(app, ["serve", tiny, *args])
    assert res.exit_code == 2 and text in res.output and "Traceback" not in res.output


def test_the_plot_draws_no_line_across_idle_time():
    """serve --plot joined one busy period's last step to the next one's first across the idle time between
    (a KV line rising through time when no request was held): steps back to back join, a gap breaks the line."""
    steps = pd.DataFrame({"start_ns": [0.0, 1e9, 5e9], "end_ns": [1e9, 2e9, 6e9]})
    x, y = _busy_segments(steps, np.array([10.0, 20.0, 30.0]), 0.0)
    np.testing.assert_array_equal(x, [0, 1, 1, 2, 2, 5, 6])
    np.testing.assert_array_equal(y, [10, 10, 20, 20, np.nan, 30, 30])
