"""The fast path's choice for the collective kinds (allreduce, collective, pe2pe): with ``method: hybrid`` (the
default of ``kbfast run``) a point whose flows meet is replayed exactly when the replay fits its budget; with
``fluid`` (the default in sweeps, whose all-reduce points are batched) it keeps the fluid schedule.  Every row
says how its point was made (kbfast.measure.methods), and the bounds are the fast path's either way."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import kbfast.measure.collective as collective_kind
from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.measure.hybrid import run_hybrid
from kbfast.measure.registry import WORKLOADS, measure
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


def test_a_point_above_the_budget_keeps_the_fluid(ahbm, monkeypatch) -> None:
    t, r = ahbm
    monkeypatch.setattr(collective_kind, "POINT_BUDGET_EVENTS", 1_000)    # the tree's replay: 429,261 events
    row = measure(t, r, point(**TREE, method="hybrid"), "fast").row
    assert row["method"] == "fluid"
    assert row["latency_ns"] == measure(t, r, point(**TREE, method="fluid"), "fast").row["latency_ns"]


def test_a_point_whose_flows_never_meet_is_closed_form(ahbm) -> None:
    t, r = ahbm
    w = {**WORKLOADS["pe2pe"].fields, "kind": "pe2pe", "hop": "h3", "size": 4096}
    rows = [measure(t, r, {**w, "method": m}, "fast").row for m in ("hybrid", "fluid")]
    assert [x["method"] for x in rows] == ["closed form", "closed form"]
    assert rows[0]["latency_ns"] == rows[1]["latency_ns"]


@pytest.mark.parametrize("method", ["fluid", "hybrid"])
def test_a_sweep_batch_says_how_each_point_was_made(ahbm, method: str) -> None:
    """The batched kernel (fluid) names each point's method as the point's own fluid run does; a hybrid batch
    is measured point by point, each row equal to the point's own."""
    t, r = ahbm
    sizes = (16, 4096, 98304)
    systems = [t.spec] * len(sizes)
    ws = [point(size=s, method=method) for s in sizes]
    batch = WORKLOADS["allreduce"].measure_points(t, r, ws, systems)
    own = [measure(t, r, w, "fast").row for w in ws]
    assert [b["method"] for b in batch] == [o["method"] for o in own]
    assert {b["method"] for b in batch} <= ({"fluid", "closed form"} if method == "fluid"
                                           else {"exact replay", "fluid", "closed form"})
    if method == "hybrid":
        assert [b["latency_ns"] for b in batch] == [o["latency_ns"] for o in own]


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
    """Probe and traffic points carry the same column: ctrl_hot_3 (three issuers on one controller) is
    contended, so hybrid replays it and fluid schedules it; an isolated case is closed form either way."""
    t, r = ahbm
    w = {**WORKLOADS["probe"].fields, "kind": "probe", "size": 4096}
    got = {(case, m, mode): measure(t, r, {**w, "case": case, "method": m}, mode).row["method"]
           for case in ("ctrl_hot_3", "SAME_CUBE_PE_LOCAL") for m in ("hybrid", "fluid") for mode in ("fast", "exact")}
    assert got == {("ctrl_hot_3", "hybrid", "fast"): "exact replay", ("ctrl_hot_3", "fluid", "fast"): "fluid",
                   ("SAME_CUBE_PE_LOCAL", "hybrid", "fast"): "closed form",
                   ("SAME_CUBE_PE_LOCAL", "fluid", "fast"): "closed form"} | {
        (case, m, "exact"): "exact" for case in ("ctrl_hot_3", "SAME_CUBE_PE_LOCAL") for m in ("hybrid", "fluid")}


def test_a_replay_beyond_the_memory_limit_keeps_the_fluid(ahbm, monkeypatch) -> None:
    """A replay that would not fit the memory limit is not run: the point keeps the fluid estimate, as one
    beyond the event budget does (kbfast.measure.hybrid), instead of refusing the whole command."""
    t, r = ahbm
    c = allreduce(t, r, TREE["size"], TREE["algorithm"], TREE["ranks"])
    monkeypatch.setattr("kbfast.exact.replay.estimate_memory_bytes", lambda p: 1 << 60)   # an exabyte replay
    res = run_hybrid(c.program, collective_kind.POINT_BUDGET_EVENTS)
    assert res.method == "fluid"
    assert res.latency_ns(c.launch_ns)[0] == run_fast(c.program).latency_ns(c.launch_ns)[0]
