"""``kbfast search`` (kbfast.search, docs/search.md): the space and its pruning, constraints, the Pareto front
against a slow reference, and the winner's figures against its printed command."""

from __future__ import annotations

import io
import json
import shlex

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kbfast.cli.main import app
from kbfast.cli.search import csv_table, knob_label, wrapped
from kbfast.config.models import load_model
from kbfast.errors import KbfastError
from kbfast.report.formats import clean
from kbfast.search.front import check_objective, pareto, parse_constraint, rank
from kbfast.search import command
from kbfast.search.space import Space, parse_knob, parse_list, prune


def _naive_front(tps: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    """Row i is on the front when no row is at least as good on both and better on one, and no earlier row
    is identical (one of equal rows stands for them)."""
    n = len(tps)
    out = np.zeros(n, bool)
    for i in range(n):
        dominated = any((tps[j] >= tps[i] and tpot[j] <= tpot[i] and (tps[j] > tps[i] or tpot[j] < tpot[i]))
                        or (j < i and tps[j] == tps[i] and tpot[j] == tpot[i]) for j in range(n) if j != i)
        out[i] = not dominated
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=30))
def test_front_equals_the_naive_definition(points):
    tps, tpot = (np.array(x, float) for x in zip(*points))
    assert np.array_equal(pareto(tps, tpot), _naive_front(tps, tpot))


def test_rank_applies_constraints_and_picks_the_best():
    df = pd.DataFrame({"tokens_per_s": [100.0, 300.0, 200.0, 50.0], "tpot_ms": [1.0, 3.0, 2.0, 0.5],
                       "tokens_per_s_per_sip": [50.0, 150.0, 100.0, 25.0], "ttft_ms": np.nan,
                       "batch": [1, 4, 2, 1], "error": [None, None, None, "refused"]})
    out = rank(df, "tokens_per_s", [parse_constraint("tpot_ms<=2.5")])
    assert out["feasible"].tolist() == [True, False, True, False]
    assert out["front"].tolist() == [True, False, True, False]
    assert out["best"].tolist() == [False, False, True, False]
    assert rank(df, "tpot", [])["best"].tolist() == [True, False, False, False]


@pytest.mark.parametrize("text", ["tpot_ms=<3", "latency<=3", "ttft_ms<=fast", "batch"])
def test_bad_constraints_are_refused(text):
    with pytest.raises(KbfastError, match="--constraint"):
        parse_constraint(text)


def test_objective_and_lists_are_checked():
    with pytest.raises(KbfastError, match="--objective"):
        check_objective("speed")
    assert parse_list("1, 2,4", "--batch", int) == (1, 2, 4)
    for text in ("", "1,x", "0,2"):
        with pytest.raises(KbfastError, match="--batch"):
            parse_list(text, "--batch", int)
    with pytest.raises(KbfastError, match="tp_sips"):
        parse_list("tp_pes,tp_sips", "--layout", str, ("tp_pes", "tp_cubes"))
    assert parse_knob("link.ucie_conn.bw_gbs=64,128.5") == ("link.ucie_conn.bw_gbs", (64, 128.5))
    with pytest.raises(KbfastError, match="KEY=V1"):
        parse_knob("sips.count")


def test_space_is_the_product_and_pruning_counts_reasons(tiny):
    space = Space(("tp_cubes",), (1, 4), ("lrab", "hier2d"), ("none",), (False, True),
                  (("sips.count", (2, 4)),), pp=(1,), dp=(1,))
    cands = space.candidates()
    assert len(cands) == 2 * 2 * 2 * 2 and {c["set"]["sips.count"] for c in cands} == {2, 4}
    pruned = prune("ahbm_2sip", {}, load_model(tiny), cands, 64)
    assert pruned.counts == {"option needs another": 4}           # lrab with sequence parallelism
    assert len(pruned.kept) == 12 and "lrab does not" in pruned.examples["option needs another"]
    odd = prune("ahbm_2sip", {}, load_model(tiny), Space(("tp_cubes",), (1,), ("lrab",), ("none",),
                                                          (False,), pp=(1,), dp=(1,)).candidates(), 66)
    assert odd.counts == {"does not divide": 1} and not odd.kept
    big = prune("ahbm_2sip", {}, load_model("llama3_70b"), Space(("tp_cubes",), (64,), ("lrab",), ("none",),
                                                                 (False,), pp=(1,), dp=(1,)).candidates(), 131072)
    assert big.counts == {"memory: the HBM slice": 1}
    # with TTFT asked for, the prefill of --seq tokens is compiled too: 33 tokens do not divide over a ring of 4
    pre = prune("ahbm_2sip", {}, load_model(tiny), cands, 64, seq=33)
    assert pre.counts == {"option needs another": 4, "does not divide (the TTFT prefill)": 12} and not pre.kept


def test_pipeline_and_data_parallel_degrees_are_searched_and_pruned(tiny):
    """Users that do not divide over the replicas are pruned as "does not divide"; the rest compile, pp2 x dp2 on
    2 SIPs as groups of two rows of cubes (kbfast.workloads.parallel)."""
    cands = Space(("tp_cubes",), (1, 2), ("lrab",), ("none",), (False,), pp=(1, 2), dp=(1, 2)).candidates()
    assert len(cands) == 8 and {(c["pp"], c["dp"]) for c in cands} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    pruned = prune("ahbm_2sip", {}, load_model(tiny), cands, 64)
    kept = sorted((c["pp"], c["dp"], c["batch"]) for c in pruned.kept)
    assert kept == [(1, 1, 1), (1, 1, 2), (1, 2, 2), (2, 1, 1), (2, 1, 2), (2, 2, 2)]   # pp2 dp2: rows of cubes
    assert pruned.counts == {"does not divide": 2}     # 1 user over 2 replicas, twice


def test_an_untimed_candidate_is_neither_feasible_nor_infeasible_in_the_csv():
    """search.csv said feasible=False for a candidate its lower bound beat (never timed): read as "does not
    fit"; it is unknown, written blank."""
    table = pd.DataFrame({"set": [{}, {"sips.count": 2}], "timed": [True, False], "feasible": [True, False]})
    text = csv_table(table).to_csv(index=False)
    assert text.splitlines() == ["set,timed,feasible", ",True,True", "sips.count=2,False,"]


def test_knob_labels_tell_knobs_apart():
    keys = ("link.ucie_mesh.bw_gbs", "link.ucie_mesh.distance_mm", "fabric.ns_per_mm", "sips.count")
    assert [knob_label(k) for k in keys] == ["ucie_mesh.bw_gbs", "ucie_mesh.distance_mm", "fabric.ns_per_mm",
                                             "sips.count"]


def test_wrapped_commands_paste_as_one():
    """A command printed over lines pastes as one; each line fits the width, and no option is parted from its
    value (at 60 columns `--layout \\` ended a line and `tp_pes` began the next)."""
    cmd = "kbfast run model llama3_70b --phase decode --batch 16 --kv-len 4096 --layout tp_pes " \
          "--collective auto --overlap prefetch --set link.ucie_conn.bw_gbs=128"
    for width in (40, 60, 78, 120):
        text = wrapped(cmd, width)
        assert max(map(len, text.splitlines())) <= width and shlex.split(text.replace("\\\n", " ")) == shlex.split(cmd)
        for line in text.splitlines():       # every option of this command has a value: on the option's line
            assert not line.rstrip(" \\").split()[-1].startswith("--"), (width, line)
    assert wrapped(cmd, 200) == cmd


@pytest.fixture(scope="module")
def searched(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("search_out")
    runner = CliRunner(env={"COLUMNS": "80"})
    args = ["search", tiny, "--pp", "1,2", "--dp", "1", "--batch", "1,4,8", "--layout", "tp_cubes", "--collective", "auto,lrab,hier2d",
            "--overlap", "prefetch", "--kv-len", "64", "--seq", "32", "--constraint", "tpot_ms<=0.05",
            "--out", str(out), "--plot", str(out / "front.png")]
    table = runner.invoke(app, args, catch_exceptions=False)
    js = runner.invoke(app, args + ["--format", "json", "--objective", "ttft"], catch_exceptions=False)
    return table, json.loads(js.stdout), pd.read_csv(out / "search.csv"), out


def test_search_prints_the_front_within_80_columns(searched):
    table, _, csv, out = searched
    assert table.exit_code == 0, table.output
    assert "--phase prefill --batch 1 --seq 32" not in table.stdout          # no TTFT asked for: no prefill
    assert "Pareto front" in table.stdout and "pruned, option needs another: 6" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    assert (out / "front.png").stat().st_size > 10_000
    feasible = csv["feasible"].fillna(False).astype(bool)
    assert csv["front"].any() and feasible[csv["best"]].all()
    assert (csv.loc[feasible, "tpot_ms"] <= 0.05).all()
    assert (csv["feasible"].isna() == ~csv["timed"]).all()     # untimed: unknown (blank), not "does not fit"


def test_the_best_equals_its_printed_command(searched):
    """The winner's step latency and TTFT are bit for bit (at the printed 12 digits) its commands'."""
    _, js, _, _ = searched
    best = js["best"][0]
    runner = CliRunner()
    args = shlex.split(best["command"])[1:] + ["--format", "json"]
    step = json.loads(runner.invoke(app, args, catch_exceptions=False).stdout)["step"]
    assert clean(best["latency_ns"]) == step["latency_ns"]
    assert clean(best["tokens_per_s"]) == step["tokens_per_s"]
    pre = shlex.split(best["ttft_command"])[1:] + ["--format", "json"]
    assert pre[pre.index("--phase") + 1] == "prefill" and pre[pre.index("--seq") + 1] == "32"
    ttft = json.loads(runner.invoke(app, pre, catch_exceptions=False).stdout)["step"]
    assert clean(best["ttft_ms"] * 1e6) == pytest.approx(ttft["time_to_first_token_ns"], rel=1e-12)


def test_search_csv_on_stdout_writes_knobs_as_its_file_does(tiny, tmp_path):
    args = ["search", tiny, "--pp", "1", "--dp", "1", "--batch", "4", "--layout", "tp_cubes", "--collective", "auto", "--overlap", "none",
            "--sequence-parallel", "off", "--kv-len", "64", "--knob", "sips.count=2", "--out", str(tmp_path),
            "--format", "csv"]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = pd.read_csv(io.StringIO(res.stdout))
    assert out["set"].tolist() == pd.read_csv(tmp_path / "search.csv")["set"].tolist() == ["sips.count=2"]


@pytest.mark.parametrize("args, text", [(["--objective", "speed"], "--objective"),
                                        (["--constraint", "tpot<3"], "--constraint"),
                                        (["--batch", "0"], "--batch"), (["--sequence-parallel", "maybe"],
                                                                        "--sequence-parallel"),
                                        (["--knob", "sips.count"], "--knob"), (["--knob", "sips.count="], "--knob"),
                                        (["--knob", "=2,4"], "--knob"),
                                        (["--knob", "sips.count=2", "--knob", "sips.count=4"], "given twice"),
                                        (["--knob", "sips.count=2,4", "--set", "sips.count=2"], "also given by"),
                                        (["--knob", "sip.mesh.w=2,4"], "--knob sip.mesh.w")])
def test_search_refuses_bad_input_with_exit_2(tiny, args, text):
    res = CliRunner().invoke(app, ["search", tiny, *args])
    assert res.exit_code == 2 and text in res.output and "Traceback" not in res.output


def test_expert_parallel_blocks_are_searched_for_a_mixture_of_experts(tiny_moe):
    """``--ep`` values are candidates of a mixture of experts; one that does not divide the experts and the PEs
    is pruned as "does not divide", and a dense model refuses any (every candidate pruned, "other")."""
    path = tiny_moe
    cands = Space(("tp_cubes",), (2,), ("lrab",), ("none",), (False,), pp=(1,), dp=(1,), ep=(4, 3)).candidates()
    pruned = prune("ahbm_2sip", {}, load_model(str(path)), cands, 64)
    assert [c["ep"] for c in pruned.kept] == [4] and pruned.counts == {"does not divide": 1}
    assert "--ep 4" in command(str(path), None, [], {**pruned.kept[0], "set": {}}, 64)
    dense = prune("ahbm_2sip", {}, load_model("llama32_1b"), cands, 64)
    assert not dense.kept and "dense FFN" in next(iter(dense.examples.values()))


# -- branch and bound (kbfast.search.bound) ------------------------------------------------------------------

def _naive_beaten(lo, users, sips, timed: pd.DataFrame, objective: str) -> np.ndarray:
    """Candidate i is beaten when a timed row, against the best case its bound allows, is at least as good on
    TPOT and tokens/s, better on one, and better by the objective (better: by more than ``STRICTLY``)."""
    from kbfast.search.bound import STRICTLY as eps
    out = []
    for bound, u, s in zip(lo, users, sips):
        tpot, tok = bound * 1e-6, u / (bound * 1e-9)
        mine = {"tpot_ms": tpot, "tokens_per_s": tok, "tokens_per_s_per_sip": tok / s}
        col = check_objective(objective)[0]
        hit = False
        for r in timed.itertuples():
            theirs = {"tpot_ms": r.tpot_ms, "tokens_per_s": r.tokens_per_s,
                      "tokens_per_s_per_sip": r.tokens_per_s_per_sip}
            as_good = theirs["tpot_ms"] <= tpot and theirs["tokens_per_s"] >= tok
            one_better = theirs["tpot_ms"] < tpot * (1 - eps) or theirs["tokens_per_s"] > tok * (1 + eps)
            by_objective = theirs[col] < mine[col] * (1 - eps) if col == "tpot_ms" else \
                theirs[col] > mine[col] * (1 + eps)
            hit |= as_good and one_better and by_objective
        out.append(hit and not np.isnan(bound))
    return np.array(out, bool)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2])), min_size=1,
                max_size=12),
       st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2])), max_size=8),
       st.sampled_from(["tokens_per_s", "tpot", "tokens_per_s_per_sip"]))
def test_beaten_equals_the_naive_definition(cands, timed_rows, objective):
    from kbfast.search.bound import beaten
    lo = np.array([c[0] * 1e6 for c in cands], float)
    lo[::5] = np.nan                                         # a candidate without a bound is never beaten
    users, sips = (np.array([c[k] for c in cands]) for k in (1, 2))
    period = np.array([r[0] * 1e6 for r in timed_rows], float)
    tok = np.array([r[1] for r in timed_rows], float) / (period * 1e-9)
    timed = pd.DataFrame({"tpot_ms": period * 1e-6, "tokens_per_s": tok,
                          "tokens_per_s_per_sip": tok / np.array([r[2] for r in timed_rows], float)})
    assert np.array_equal(beaten(lo, users, sips, timed, objective), _naive_beaten(lo, users, sips, timed, objective))


def test_a_twin_within_rounding_does_not_beat_a_tight_bound():
    """A sweep keeps 12 digits: a timed twin whose rounded figures beat an exactly tight bound by rounding alone
    does not beat it (equal rows tie, and the first in candidate order stands for both)."""
    from kbfast.report.formats import clean_columns
    from kbfast.search.bound import beaten
    period = 277088.8466262316
    row = clean_columns(pd.DataFrame({"step_period_ns": [period], "tokens_per_s": [4 / (period * 1e-9)]}))
    timed = pd.DataFrame({"tpot_ms": row["step_period_ns"] * 1e-6, "tokens_per_s": row["tokens_per_s"]})
    timed["tokens_per_s_per_sip"] = timed["tokens_per_s"] / 2
    for objective in ("tokens_per_s", "tpot", "tokens_per_s_per_sip"):
        assert not beaten(row["step_period_ns"].to_numpy(), np.array([4]), np.array([2]), timed, objective)[0]


def test_leaders_are_the_smallest_bound_per_users_and_every_unbounded_one():
    from kbfast.search.bound import leaders
    base = {"layout": "tp_pes", "pp": 1, "dp": 1, "ep": None, "overlap": "none", "sequence_parallel": False,
            "set": {}}
    cands = [dict(base, collective=c, batch=b) for c, b in (("lrab", 4), ("hier2d", 4), ("auto", 4), ("lrab", 8))]
    assert leaders(cands, np.array([5.0, 3.0, np.nan, 9.0])) == [1, 2, 3]
    knobs = [dict(cands[0], set={"sips.count": 4})]
    assert leaders(cands + knobs, np.array([5.0, 3.0, 4.0, 9.0, 7.0])) == [1, 3, 4]


@pytest.fixture(scope="module")
def bounded_and_exhaustive(tiny, tmp_path_factory):
    """The tiny model's search, bounded (per objective) and exhaustive, over pipelines, replicas, every
    all-reduce (auto among them), both overlaps and sequence parallelism."""
    from kbfast.search import search
    space = Space(("tp_cubes",), (1, 4, 8), ("auto", "lrab", "hier2d", "ring_pipe"), ("prefetch", "none"),
                  (False, True), pp=(1, 2), dp=(1, 2))
    out = tmp_path_factory.mktemp("bounded")
    m = load_model(tiny)
    every = search(m, tiny, None, {}, [], space, "tokens_per_s", [], 64, 32, out / "every", exhaustive=True)
    runs = {}
    for objective, constraints in (("tokens_per_s", []), ("tpot", [parse_constraint("batch>=4")])):
        bounded = search(m, tiny, None, {}, [], space, objective, constraints, 64, 32, out / objective)
        runs[objective] = bounded, rank(every.table, objective, constraints), every
    return runs


@pytest.mark.parametrize("objective", ["tokens_per_s", "tpot"])
def test_bounds_leave_the_front_and_the_best_of_timing_every_candidate(bounded_and_exhaustive, objective):
    """The bounded search times fewer candidates and finds the same front and best; every point it times is the
    exhaustive search's, and every bound is at most its candidate's point."""
    res, every, whole = bounded_and_exhaustive[objective]
    bounded = res.table
    assert every["timed"].all() and res.n_beaten > 0 and whole.n_beaten == 0
    assert bounded["front"].tolist() == every["front"].tolist()
    assert bounded["best"].tolist() == every["best"].tolist()
    timed = bounded["timed"].to_numpy()
    assert np.array_equal(bounded.loc[timed, "tpot_ms"], every.loc[timed, "tpot_ms"])
    has = bounded["tpot_lo_ms"].notna()
    assert has[bounded["pp"] == 1].all()          # a pipeline replayed whole has none (the next test)
    assert (bounded.loc[has, "tpot_lo_ms"] <= every.loc[has, "tpot_ms"]).all()


def test_a_composed_pipeline_is_bounded_by_its_last_stage(tiny):
    """Composed by the recurrence (the fluid method), a pipeline's period is at least its last stage's
    micro-batches' layers and head at their lower bounds; replayed whole (hybrid, within the budget), it has no
    bound."""
    from kbfast.config import load_system
    from kbfast.measure.model import plan_step, run_step, step_lower_ns
    from kbfast.topology.builder import build_tables
    from kbfast.topology.routing import Router
    from kbfast.workloads.model import shape_for
    t = build_tables(load_system("ahbm_2sip"))
    r = Router(t)
    m = load_model(tiny)
    for method in ("fluid", "hybrid"):
        plan = plan_step(t, m, shape_for(m, "decode", 4, None, 64), "tp_cubes", None, method, "hier2d", pp=2)
        lo = step_lower_ns(t, r, plan)
        step = run_step(t, r, plan, bounds=False)
        if method == "fluid":
            assert step.pipeline_method() == "pipeline recurrence" and 0.5 * step.period_ns() < lo <= step.period_ns()
        else:
            assert step.pipeline_method() == "pipeline replayed whole" and np.isnan(lo)


def test_a_lower_bound_alone_is_a_sweep_field_exact_mode_refuses(tiny, tmp_path):
    """``workload.bounds: lower`` gives a point's ``period_lo_ns`` alone, at most its point; exact mode has no
    bound to give and says so in the point's error."""
    from kbfast.sweep.runner import run_sweep
    from kbfast.sweep.spec import parse_spec
    data = {"name": "lower", "topology": "ahbm_2sip", "axes": [{"grid": {"workload.bounds": ["lower", False]}}],
            "workload": {"kind": "model", "model": tiny, "layout": "tp_cubes", "batch": 4, "kv_len": 64}}
    df = run_sweep(parse_spec(data, "lower.yaml"), tmp_path / "fast").results
    assert 0 < df.loc[0, "period_lo_ns"] <= df.loc[1, "latency_ns"] and np.isnan(df.loc[0, "latency_ns"])
    data["axes"] = [{"grid": {"workload.bounds": ["lower"]}}]
    ex = run_sweep(parse_spec(data, "lower.yaml"), tmp_path / "exact", exact=True).results
    assert "exact mode has none to bound" in ex.loc[0, "error"]
