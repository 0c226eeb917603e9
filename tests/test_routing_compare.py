"""``kbfast.measure.routing_compare`` and ``kbfast topo compare-routing``: probe cases under every routing policy."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kbfast.cli import common
from kbfast.cli.main import app
from kbfast.measure.routing_compare import (COLUMNS, EXTRA_CASES, compare_routing, default_case_names, flow_routes,
                                           top_conns)
from kbfast.topology.builder import Tables
from kbfast.topology.kinds import EdgeKind, NodeKind
from kbfast.topology.names import node_name
from kbfast.topology.routing import POLICIES, Router
from kbfast.workloads.probe_catalogue import build_catalogue

CASES = ["ctrl_hot_2", "ucie_eastbound_8pe", "REMOTE_CUBE_PE_REMOTE_WORST"]
SIZES = [4096, 16384]


@pytest.fixture(scope="module")
def frame(tables: Tables) -> pd.DataFrame:
    return compare_routing(tables, CASES, SIZES)


def case_routes(t: Tables, case: str, policy: str) -> list[np.ndarray]:
    """The data routes of a catalogue case (endpoints from the configured policy) under ``policy``."""
    probe = build_catalogue(t, Router(t))[case]
    return flow_routes(probe.program(t, Router(t, policy=policy), 4096))


def endpoint_bus_uses(t: Tables, route: np.ndarray) -> list[tuple[str, str, str]]:
    """(connection, endpoint, connection) wherever a route goes connection -> UCIe endpoint -> connection of the
    same port, read off node kinds and names, independently of the module's own bus count."""
    out = []
    nodes = np.concatenate([[t.edge_src[route[0]]], t.edge_dst[route]])
    for a, b, c in zip(nodes, nodes[1:], nodes[2:]):
        if t.node_kind[b] == NodeKind.UCIE and t.node_kind[a] == NodeKind.UCIE_CONN == t.node_kind[c]:
            names = node_name(t, int(a)), node_name(t, int(b)), node_name(t, int(c))
            assert names[0].rsplit(".conn", 1)[0] == names[1] == names[2].rsplit(".conn", 1)[0]
            out.append(names)
    return out


def test_one_row_per_case_size_policy(frame: pd.DataFrame) -> None:
    assert list(frame.columns) == COLUMNS
    assert len(frame) == len(CASES) * len(SIZES) * len(POLICIES)
    keys = list(zip(frame["case"], frame["nbytes"], frame["policy"]))
    assert keys == [(c, n, p) for c in CASES for n in SIZES for p in POLICIES]
    assert (frame["exact_makespan_ns"] > 0).all() and (frame["fast_makespan_ns"] > 0).all()
    for col in ("fast", "fluid"):
        rel = (frame[f"{col}_makespan_ns"] - frame["exact_makespan_ns"]) / frame["exact_makespan_ns"]
        np.testing.assert_allclose(frame[f"{col}_rel_error"], rel)
    kb = frame[frame["policy"] == "kernbench"]
    assert (kb["exact_vs_kernbench"] == 0).all() and kb["same_routes_as_kernbench"].all()
    # Routes, and so every route column, do not depend on the size.
    route_cols = ["ucie_conns", "bus_passes", "max_edge", "max_edge_flows", "same_routes_as_kernbench"]
    assert (frame.groupby(["case", "policy"])[route_cols].nunique() == 1).all().all()


def test_default_cases(tables: Tables, router: Router) -> None:
    congestion = [n for n, c in build_catalogue(tables, router).items() if c.group == "congestion"]
    assert congestion and default_case_names(tables, router) == congestion + list(EXTRA_CASES)


def test_balanced_eastbound_never_uses_an_endpoint_as_a_bus(tables: Tables, frame: pd.DataFrame) -> None:
    routes = case_routes(tables, "ucie_eastbound_8pe", "balanced")
    assert len(routes) == 8
    for r in routes:
        assert endpoint_bus_uses(tables, r) == []
        assert (tables.edge_kind[r] == EdgeKind.UCIE_MESH).sum() == 1  # one crossing, cube0 -> cube1
    row = frame[(frame["case"] == "ucie_eastbound_8pe") & (frame["policy"] == "balanced")].iloc[0]
    assert row["bus_passes"] == 0
    # The four east connections of cube0 and the four west connections of cube1 carry two flows each.
    assert row["ucie_conns"] == "cube0.ucie-E.conn0..3 out x2, cube1.ucie-W.conn0..3 in x2"
    assert sum(row["ucie_edges"].values()) == 16
    assert row["ucie_edges"]["sip0.cube0.ucie-E.conn0 -> sip0.cube0.ucie-E"] == 2


def test_kernbench_remote_worst_uses_the_zero_length_bus(tables: Tables, frame: pd.DataFrame) -> None:
    (route,) = case_routes(tables, "REMOTE_CUBE_PE_REMOTE_WORST", "kernbench")
    uses = endpoint_bus_uses(tables, route)
    assert uses, "kernbench should route REMOTE_CUBE_PE_REMOTE_WORST through a UCIe endpoint as a bus"
    rows = frame[frame["case"] == "REMOTE_CUBE_PE_REMOTE_WORST"].drop_duplicates("policy").set_index("policy")
    assert rows.loc["kernbench", "bus_passes"] == len(uses)
    assert rows.loc["balanced", "bus_passes"] == 0
    # The bus shows as "out" and "in" on one port of one cube in the compact text.
    conn, endpoint, _ = uses[0]
    short = endpoint.removeprefix("sip0.")
    assert f"{short}.conn{conn.rsplit('.conn', 1)[1]} out" in rows.loc["kernbench", "ucie_conns"]


def test_top_conns() -> None:
    text = "cube0.ucie-N.conn0 out x3, cube0.ucie-N.conn3 in x4, cube1.ucie-W.conn0..3 in x2"
    assert top_conns(text, 5) == text.split(", ")
    assert top_conns(text, 2) == ["cube0.ucie-N.conn3 in x4", "cube0.ucie-N.conn0 out x3", "+1 more"]
    assert top_conns("", 3) == []


# ----------------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def cli(runner: CliRunner, *args: str):
    return runner.invoke(app, ["topo", "compare-routing", *args])


def test_cli_csv_and_json_parse(runner: CliRunner) -> None:
    res = cli(runner, "--case", "ucie_eastbound_8pe", "--size", "4KiB", "--format", "csv")
    assert res.exit_code == 0, (res.output, res.exception)
    df = pd.read_csv(io.StringIO(res.stdout))
    assert list(df.columns) == COLUMNS
    assert df["policy"].tolist() == list(POLICIES) and (df["nbytes"] == 4096).all()
    edges = [json.loads(s) for s in df["ucie_edges"]]
    assert all(isinstance(e, dict) and e for e in edges)

    res = cli(runner, "--case", "ucie_eastbound_8pe", "--case", "REMOTE_SIP", "--size", "4KiB", "--format", "json")
    assert res.exit_code == 0, (res.output, res.exception)
    rows = json.loads(res.stdout)["rows"]
    assert [(r["case"], r["policy"]) for r in rows] == [(c, p) for c in ("ucie_eastbound_8pe", "REMOTE_SIP")
                                                         for p in POLICIES]
    assert set(COLUMNS) == set(rows[0]) and isinstance(rows[0]["ucie_edges"], dict)


def test_cli_table_fits_80_columns(runner: CliRunner, monkeypatch) -> None:
    monkeypatch.setattr(common.console, "width", 80)
    res = cli(runner, "--case", "sip_hotspot_pe0", "--case", "REMOTE_CUBE_PE_REMOTE_WORST", "--size", "4KiB")
    assert res.exit_code == 0, (res.output, res.exception)
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "sip_hotspot_pe0  (congestion, 128 flows)" in lines
    assert "REMOTE_CUBE_PE_REMOTE_WORST  (no_congestion, 1 flow)" in lines
    assert "more (--format csv lists all)" in res.stdout


@pytest.mark.parametrize("args, words", [
    (["--case", "no_such_case"], ["unknown probe case", "no_such_case"]),
    (["--case", "ucie_eastbound_8p"], ["ucie_eastbound_8p", "did you mean", "ucie_eastbound_8pe"]),
    (["--size", "16QB"], ["16QB"]),
    (["--set", "routing.policy=shortest"], ["routing.policy"]),
])
def test_cli_bad_input_exits_2(runner: CliRunner, monkeypatch, args: list[str], words: list[str]) -> None:
    monkeypatch.setattr(common.err_console, "width", 1000)
    res = cli(runner, *args)
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.stdout == "" and res.stderr.startswith("error:")
    for w in words:
        assert w in res.stderr
