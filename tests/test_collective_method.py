"""The fast path's choice for the collective kinds (allreduce, collective, pe2pe): with ``method: hybrid`` (the
default of ``kbfast run``) a point whose flows meet is replayed exactly when the replay fits its budget; with
``fluid`` (the default in sweeps, whose all-reduce points are batched) it keeps the fluid schedule.  Every row
says how its point was made (kbfast.measure.methods), and the bounds are the fast path's either way."""

from __future__ import annotations

import dataclasses
import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

import kbfast.measure.collective as collective_kind
from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.measure.hybrid import run_hybrid
from kbfast.measure.registry import WORKLOADS, measure
from kbfast.sweep.batches import evaluate_batch, make_batches
from kbfast.sweep.spec import parse_spec
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce
from conftest import flat, refused

TREE = {"algorithm": "tree", "ranks": "all_pes", "size": 4096}   # the fluid is 6.7 % high here (docs/fast_path.md §6)


@pytest.fixture(scope="module")
def ahbm() -> tuple:
    t = build_tables(load_system("ahbm_2sip"))
    return t, Router(t)


def point(**fields) -> dict:
    return {**WORKLOADS["allreduce"].fields, "kind": "allreduce", **fields}


def test_hybrid_replays_a_contended_point_exactly_and_keeps_the_bounds(ahbm) -> None:
    t, r = ahbm
    c = allreduce(t, r, TREE["size"], TREE["algorithm"], TREE["ranks"])
    exact, fluid = run_exact(c.program).latency_ns(c.launch_ns)[0], run_fast(c.program).latency_ns(c.launch_ns)
    hy = measure(t, r, point(**TREE, method="hybrid"), "fast").row
    fl = measure(t, r, point(**TREE, method="fluid"), "fast").row
    assert hy["method"] == "exact replay" and fl["method"] == "fluid"
    assert hy["latency_ns"] == exact                                   # the replay's, bit for bit
    assert (fl["latency_ns"], fl["latency_lo_ns"], fl["latency_hi_ns"]) == tuple(fluid)
    assert (hy["latency_lo_ns"], hy["latency_hi_ns"]) == (fl["latency_lo_ns"], fl["latency_hi_ns"])
    assert fl["latency_ns"] > 1.05 * exact                             # what the replay spares the user
    assert measure(t, r, point(**TREE, method="hybrid"), "exact").row["method"] == "exact"


def test_the_network_choice_is_within_2_percent_where_the_fluid_is_not(ahbm) -> None:
    """``method: network``: the queueing network's point (never a replay), in the fast path's bounds; its
    sensitivities compare fluid variants with a fluid base, measured again, as a replayed point's do."""
    t, r = ahbm
    c = allreduce(t, r, TREE["size"], TREE["algorithm"], TREE["ranks"])
    exact = run_exact(c.program).latency_ns(c.launch_ns)[0]
    got = measure(t, r, point(**TREE, method="network"), "fast")
    fl = measure(t, r, point(**TREE, method="fluid"), "fast").row
    assert got.row["method"] == "network" and got.details["not_replayed"] == ""
    assert abs(got.row["latency_ns"] / exact - 1) < 0.02 < fl["latency_ns"] / exact - 1
    assert (got.row["latency_lo_ns"], got.row["latency_hi_ns"]) == (fl["latency_lo_ns"], fl["latency_hi_ns"])
    args = ["run", "collective", "--algorithm", "tree", "--ranks", "all_pes", "--size", "4KiB", "--topology",
            "ahbm_2sip", "--sensitivity", "--format", "json"]
    row = json.loads(CliRunner().invoke(app, [*args, "--method", "network"], catch_exceptions=False).stdout)
    assert row["method"] == "network" and "replay" not in row
    assert row["sensitivity_base_ns"] == pytest.approx(fl["latency_ns"], rel=1e-9)     # as JSON rounds it


def test_a_point_above_the_budget_keeps_the_fluid(ahbm, monkeypatch) -> None:
    t, r = ahbm
    monkeypatch.setattr(collective_kind, "POINT_BUDGET_EVENTS", 1_000)    # the tree's replay: 429,261 events
    row = measure(t, r, point(**TREE, method="hybrid"), "fast").row
    assert row["method"] == "fluid"
    assert row["latency_ns"] == measure(t, r, point(**TREE, method="fluid"), "fast").row["latency_ns"]


def test_run_says_why_a_contended_point_was_not_replayed(monkeypatch) -> None:
    """The ``replay`` row: the estimated events against the budget, or the budget the replay ran past."""
    monkeypatch.setattr(collective_kind, "POINT_BUDGET_EVENTS", 1_000)
    args = ["run", "collective", "--algorithm", "tree", "--ranks", "all_pes", "--size", "4KiB",
            "--topology", "ahbm_2sip"]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert re.search(r"replay +not run: ~[\d,]+ M? ?events > 1,000\b", res.stdout), res.stdout
    assert max(map(len, res.stdout.splitlines())) <= 80
    fluid = json.loads(CliRunner().invoke(app, [*args, "--method", "fluid", "--format", "json"]).stdout)
    assert "replay" not in fluid                                      # asked for the fluid: nothing to explain
    t = build_tables(load_system("ahbm_2sip"))
    c = allreduce(t, Router(t), 4096, "tree", "all_pes")
    monkeypatch.setattr("kbfast.measure.hybrid.replay_events_estimate", lambda p: 1_000)   # tries, runs past
    assert run_hybrid(c.program, 1_000).not_replayed == "stopped past 1,000 events"


def test_a_point_whose_flows_never_meet_is_closed_form(ahbm) -> None:
    t, r = ahbm
    w = {**WORKLOADS["pe2pe"].fields, "kind": "pe2pe", "hop": "h3", "size": 4096}
    rows = [measure(t, r, {**w, "method": m}, "fast").row for m in ("hybrid", "fluid")]
    assert [x["method"] for x in rows] == ["closed form", "closed form"]
    assert rows[0]["latency_ns"] == rows[1]["latency_ns"]


def test_a_sweep_batch_says_how_each_point_was_made(ahbm) -> None:
    """The batched kernel (fluid) names each point's method as the point's own fluid run does."""
    t, r = ahbm
    sizes = (16, 4096, 98304)
    ws = [point(size=s, method="fluid") for s in sizes]
    batch = WORKLOADS["allreduce"].measure_points(t, r, ws, [t.spec] * len(sizes))
    assert [b["method"] for b in batch] == [measure(t, r, w, "fast").row["method"] for w in ws]
    assert {b["method"] for b in batch} <= {"fluid", "closed form"}


@pytest.mark.parametrize("method", ["fluid", "hybrid", "network"])
def test_a_hybrid_all_reduce_sweep_measures_each_point_on_its_own(method: str) -> None:
    """Fluid all-reduce points that differ only in the IPCQ tier share one batched call; hybrid and network ones
    are not batched (the batched kernel is the fluid schedule): each is measured alone, on its own system, exactly
    as the registry measures it."""
    spec = parse_spec({"topology": "ahbm_2sip", "workload": {"kind": "allreduce", **TREE, "method": method},
                       "axes": [{"grid": {"ipcq.buffer_kind": ["tcm", "hbm"]}}]}, "s.yaml")
    points = spec.points()
    batches = make_batches(points, "fast")
    assert len(batches) == (1 if method == "fluid" else 2)
    df = pd.concat([evaluate_batch(b).rows for b in batches]).sort_values("point", ignore_index=True)
    assert df["error"].isna().all(), df["error"].tolist()
    if method != "fluid":
        for kind, row in zip(("tcm", "hbm"), df.itertuples()):
            t = build_tables(load_system("ahbm_2sip", overrides={"ipcq.buffer_kind": kind}))
            own = measure(t, Router(t), point(**TREE, method=method), "fast").row
            made = "exact replay" if method == "hybrid" else "network"
            assert (row.method, row.latency_ns) == (made, own["latency_ns"])
        assert df.loc[0, "latency_ns"] != df.loc[1, "latency_ns"]       # the tiers differ


def test_sensitivities_are_timed_on_the_fluid_schedule() -> None:
    """A replayed point's sensitivities compare fluid variants with a fluid base, measured again; the point
    itself stays the replay's."""
    row = json.loads(CliRunner().invoke(app, ["run", "collective", "--algorithm", "tree", "--ranks", "all_pes",
                                              "--size", "4KiB", "--topology", "ahbm_2sip", "--sensitivity",
                                              "--format", "json"], catch_exceptions=False).stdout)
    fluid = json.loads(CliRunner().invoke(app, ["run", "collective", "--algorithm", "tree", "--ranks", "all_pes",
                                                "--size", "4KiB", "--topology", "ahbm_2sip", "--method", "fluid",
                                                "--format", "json"], catch_exceptions=False).stdout)
    assert row["method"] == "exact replay" and row["latency_ns"] < fluid["latency_ns"]
    assert row["sensitivity_base_ns"] == fluid["latency_ns"]
    assert len(row["sensitivity"]) > 1
    for g in row["sensitivity"]:
        assert g["gain"] == pytest.approx(1 - g["latency_ns"] / fluid["latency_ns"], abs=1e-9)   # as JSON rounds it


def test_a_replayed_points_wall_time_counts_its_replay(ahbm, monkeypatch) -> None:
    t, r = ahbm
    c = allreduce(t, r, TREE["size"], TREE["algorithm"], TREE["ranks"])
    slow = lambda p, **kw: dataclasses.replace(run_exact(p, **kw), wall_s=1e3)   # noqa: E731 - a replay of 1000 s
    monkeypatch.setattr("kbfast.measure.hybrid.run_exact", slow)
    res = run_hybrid(c.program, collective_kind.POINT_BUDGET_EVENTS)
    assert res.method == "exact replay" and res.wall_s > 1e3


def test_run_shows_the_method_and_refuses_an_unknown_one() -> None:
    runner = CliRunner()
    args = ["run", "collective", "--algorithm", "tree", "--ranks", "all_pes", "--size", "4KiB",
            "--topology", "ahbm_2sip"]
    res = runner.invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert "method exact replay" in flat(res.stdout)
    assert max(map(len, res.stdout.splitlines())) <= 80
    row = json.loads(runner.invoke(app, [*args, "--method", "fluid", "--format", "json"]).stdout)
    assert row["method"] == "fluid" and row["mode"] == "fast"
    refused(runner.invoke(app, [*args, "--method", "flud"]), "--method", "'flud'", "did you mean 'fluid'")
    ex = json.loads(runner.invoke(app, [*args, "--exact", "--format", "json"]).stdout)
    assert "method" not in ex and ex["mode"] == "exact"


def test_a_probe_row_says_how_its_point_was_made(ahbm) -> None:
    """Probe points carry the same column (traffic points share their measurement): ctrl_hot_3 (three issuers
    on one controller) is contended, so hybrid replays it and fluid schedules it; an isolated case is closed
    form either way."""
    t, r = ahbm
    w = {**WORKLOADS["probe"].fields, "kind": "probe", "size": 4096}
    got = {(case, m, mode): measure(t, r, {**w, "case": case, "method": m}, mode).row["method"]
           for case in ("ctrl_hot_3", "SAME_CUBE_PE_LOCAL") for m in ("hybrid", "fluid") for mode in ("fast", "exact")}
    assert got == {("ctrl_hot_3", "hybrid", "fast"): "exact replay", ("ctrl_hot_3", "fluid", "fast"): "fluid",
                   ("SAME_CUBE_PE_LOCAL", "hybrid", "fast"): "closed form",
                   ("SAME_CUBE_PE_LOCAL", "fluid", "fast"): "closed form"} | {
        (case, m, "exact"): "exact" for case in ("ctrl_hot_3", "SAME_CUBE_PE_LOCAL") for m in ("hybrid", "fluid")}


def test_a_replay_beyond_the_memory_limit_falls_back(ahbm, monkeypatch) -> None:
    """A replay that would not fit the memory limit is not run: the point is the queueing network's, as for one
    beyond the event budget (kbfast.measure.hybrid), and when the network does not fit either, the fluid
    estimate's, instead of refusing the whole command."""
    import kbfast.measure.hybrid as hybrid
    from kbfast.config.budget import MemoryBudgetError

    t, r = ahbm
    c = allreduce(t, r, TREE["size"], TREE["algorithm"], TREE["ranks"])
    ex = run_exact(c.program).latency_ns(c.launch_ns)[0]
    monkeypatch.delenv("KBFAST_MAX_MEMORY", raising=False)          # the default limit: what the machine has
    monkeypatch.setattr("kbfast.exact.replay.estimate_memory_bytes", lambda p: 1 << 60)   # an exabyte replay
    res = run_hybrid(c.program, collective_kind.POINT_BUDGET_EVENTS)
    assert res.method == "network" and res.not_replayed == "not run: over the memory limit"
    assert abs(res.latency_ns(c.launch_ns)[0] / ex - 1) < 0.02       # the fluid is 6.7 % high here

    def too_big(p, **kw):
        raise MemoryBudgetError("the queueing network would need about 1 EiB")
    monkeypatch.setattr(hybrid, "network_schedule", too_big)
    res = run_hybrid(c.program, collective_kind.POINT_BUDGET_EVENTS)
    assert res.method == "fluid" and res.not_replayed == "not run: over the memory limit"
    assert res.latency_ns(c.launch_ns)[0] == run_fast(c.program).latency_ns(c.launch_ns)[0]


def test_compare_and_trace_reuse_the_hybrids_replay(monkeypatch, tmp_path) -> None:
    """--compare and --trace on a replayed point replay it once: the exact half is the hybrid's replay."""
    import kbfast.cli.run as cli_run
    import kbfast.measure.hybrid as hybrid

    calls = []

    def counted(p, **kw):
        calls.append(p.name)
        return run_exact(p, **kw)
    for module in (hybrid, collective_kind, cli_run):
        monkeypatch.setattr(module, "run_exact", counted)
    args = ["run", "collective", "--algorithm", "tree", "--ranks", "all_pes", "--size", "4KiB", "--topology",
            "ahbm_2sip", "--format", "json"]
    row = json.loads(CliRunner().invoke(app, [*args, "--compare"], catch_exceptions=False).stdout)
    assert row["method"] == "exact replay" and row["exact_latency_ns"] == row["latency_ns"] and len(calls) == 1
    res = CliRunner().invoke(app, [*args, "--trace", str(tmp_path / "t.json")], catch_exceptions=False)
    assert res.exit_code == 0 and (tmp_path / "t.json").stat().st_size > 0 and len(calls) == 2
