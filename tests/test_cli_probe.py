"""``kbfast probe`` end to end through the typer app (exact evaluator, default topology)."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from kbfast.cli.main import app
from kbfast.report.formats import percent
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import SWEEP_SIZES, build_catalogue
from conftest import flat

COLUMNS = ["case", "nbytes", "n_issuers", "latency_ns", "makespan_ns", "effective_bw_gbps", "util_single",
           "util_aggregate"]


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    # A wide console, so rich does not wrap or ellipsize (the checks below also tolerate wrapping).
    return CliRunner(env={"COLUMNS": "200"})


def invoke(runner: CliRunner, *args: str):
    return runner.invoke(app, ["probe", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def catalogue_names(tables: Tables, router: Router) -> list[str]:
    """The default topology's catalogue, in catalogue order (what the CLI runs without --case)."""
    return list(build_catalogue(tables, router))


def test_list(runner: CliRunner, catalogue_names: list[str]) -> None:
    res = invoke(runner, "--list")
    assert res.exit_code == 0, res.output
    words = flat(res.stdout).split(" ")
    for name in catalogue_names:
        assert words.count(name) == 1, name
    for name in ("SAME_CUBE_PE_LOCAL", "REMOTE_CUBE_PE_REMOTE_WORST", "REMOTE_SIP", "H2D_CUBE0", "D2H_CUBE12",
                 "LAUNCH_NOOP", "all_pe_cube0_to_pe0"):
        assert name in catalogue_names
    assert re.search(r"^case\s+group\s+issuers\s+description", res.stdout, re.M)     # a table at any width
    assert re.search(r"^SAME_CUBE_PE_LOCAL\s+no_congestion\s+1\s+sip0.cube0.pe0", res.stdout, re.M)


def test_csv_all_cases(runner: CliRunner, catalogue_names: list[str]) -> None:
    res = invoke(runner, "--format", "csv")
    assert res.exit_code == 0, res.stderr
    df = pd.read_csv(io.StringIO(res.stdout))
    assert list(df.columns[:len(COLUMNS)]) == COLUMNS
    assert df["case"].tolist() == catalogue_names
    assert (df["nbytes"] == 16 * 1024).all()
    local = df.set_index("case").loc["SAME_CUBE_PE_LOCAL"]
    assert local["latency_ns"] == 77.0 and local["n_issuers"] == 1
    assert (df["util_aggregate"] <= 1.0 + 1e-9).all()
    assert "failed" not in res.stderr


def test_json_all_checks_pass(runner: CliRunner, catalogue_names: list[str]) -> None:
    res = invoke(runner, "--format", "json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out) == {"rows", "checks"}
    assert [r["case"] for r in out["rows"]] == catalogue_names
    assert set(COLUMNS) <= set(out["rows"][0])
    assert len(out["checks"]) >= 5
    assert all(c["passed"] for c in out["checks"]), [c for c in out["checks"] if not c["passed"]]
    names = {c["name"] for c in out["checks"]}
    assert {"distance order at 16 KiB", "local < same half < cross half at 16 KiB",
            "launch: every PE starts at the barrier at 16 KiB"} <= names


def test_case_with_two_sizes(runner: CliRunner) -> None:
    res = invoke(runner, "--case", "SAME_CUBE_PE_LOCAL", "--size", "4KiB", "--size", "16KiB", "--format", "csv")
    assert res.exit_code == 0, res.stderr
    df = pd.read_csv(io.StringIO(res.stdout))
    assert len(df) == 2
    assert df["case"].tolist() == ["SAME_CUBE_PE_LOCAL"] * 2
    assert df["nbytes"].tolist() == [4096, 16384]
    assert df["latency_ns"].tolist() == [29.0, 77.0]        # n_flits + 13 (spec_memory §10.2 B)


def test_table_format(runner: CliRunner) -> None:
    res = invoke(runner, "--case", "SAME_CUBE_PE_LOCAL")
    assert res.exit_code == 0, res.stderr
    out = flat(res.stdout)
    assert "probe (fast path, 16 KiB per issuer)" in out and "77.0" in out and "PASS" in out and "FAIL" not in out
    res = invoke(runner, "--case", "SAME_CUBE_PE_LOCAL", "--exact")
    assert res.exit_code == 0, res.stderr
    assert "probe (exact replay, 16 KiB per issuer)" in flat(res.stdout) and "77.0" in flat(res.stdout)


@pytest.mark.parametrize("columns", [80, 60])
def test_table_shows_bounds_breakdown_and_method(terminal, columns: int) -> None:
    """The screen shows what csv has: the fast path's bounds and method per row, and the latency breakdown of
    the single-issuer cases (docs/probes.md section 3), each table within the terminal's width."""
    res = invoke(terminal(columns), "--case", "REMOTE_SIP", "--case", "ctrl_hot_2")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert max(map(len, out.splitlines())) <= columns
    bounds = out[out.index("fast path bounds (ns) and method"):out.index("latency breakdown")]
    assert re.search(r"^ctrl_hot_2\s+(92\.0\s+673\.0\s+)?102\.0\s+683\.0\s+replay$", bounds, re.M)
    assert re.search(r"^REMOTE_SIP\s+(409\.0\s+){2,4}closed$", bounds, re.M)
    assert "closed = closed form, replay = exact replay" in flat(bounds)
    # marked loose with its ratio: 673 / 146 ns; REMOTE_SIP, an isolated transfer, is exact (1.0x), not listed
    assert "loose bounds (the farther bound over the point, beyond 4x): ctrl_hot_2 4.6x" in flat(out)
    breakdown = out[out.index("latency breakdown (ns)"):]
    assert re.search(r"^case\s+setup\s+mesh\s+ucie\s+fabric\s+wire\s+hbm\s+rest$", breakdown, re.M)
    assert re.search(r"^REMOTE_SIP\s+0\.0\s+14\.0\s+34\.0\s+245\.0\s+126\.0\s+8\.0\s+-18\.0$", breakdown, re.M)
    assert "ctrl_hot_2" not in breakdown.split("busiest link")[0]          # two issuers: no breakdown


def test_default_table_fits_80_columns_with_numbers_whole(terminal) -> None:
    wide = invoke(terminal(200))
    res = invoke(terminal(80))
    assert res.exit_code == 0 == wide.exit_code, res.stderr
    assert max(map(len, res.stdout.splitlines())) <= 80
    numbers = re.compile(r"-?[\d,]+\.\d+(?: %)?")
    assert sorted(numbers.findall(res.stdout)) == sorted(numbers.findall(wide.stdout))
    assert "sip_hotspot_pe0" in res.stdout and "93.250" in res.stdout       # the widest bound, whole


def test_latency_and_makespan_share_one_unit(runner: CliRunner) -> None:
    """A row's latency and makespan read side by side: one unit for both columns, the one the larger needs (the
    hot spot's 15.6 us makespan puts the 77 ns local latency in us too)."""
    res = invoke(runner, "--case", "SAME_CUBE_PE_LOCAL", "--case", "sip_hotspot_pe0")
    assert res.exit_code == 0, res.stderr
    head = res.stdout.splitlines()
    assert re.search(r"^case\s+n\s+µs\s+µs\s+GB/s", "\n".join(head), re.M)
    assert re.search(r"^SAME_CUBE_PE_LOCAL\s+1\s+0\.077\s+0\.077\s", res.stdout, re.M)
    assert re.search(r"^sip_hotspot_pe0\s+128\s+8\.120\s+15\.623\s", res.stdout, re.M)


def test_compare_columns(runner: CliRunner) -> None:
    res = invoke(runner, "--case", "ctrl_hot_2", "--case", "REMOTE_SIP", "--compare", "--format", "csv")
    assert res.exit_code == 0, res.stderr
    df = pd.read_csv(io.StringIO(res.stdout))
    for col in ("exact_latency_ns", "exact_makespan_ns", "rel_error", "latency_lo_ns", "latency_hi_ns",
                "contention"):
        assert col in df.columns
    row = df.set_index("case").loc["REMOTE_SIP"]
    assert row["rel_error"] == pytest.approx(0.0, abs=1e-12) and not row["contention"]   # isolated: P1
    assert df.set_index("case").loc["ctrl_hot_2", "contention"]
    # the table's two time columns say what they time
    table = invoke(runner, "--case", "ctrl_hot_2", "--compare")
    assert "probe (fast path vs exact, 16 KiB per issuer): makespan" in table.stdout


def test_unknown_case(runner: CliRunner) -> None:
    res = invoke(runner, "--case", "SAME_CUBE_PE_LOCL")
    assert res.exit_code == 2
    err = flat(res.stderr)
    assert "unknown probe case 'SAME_CUBE_PE_LOCL'" in err
    assert "did you mean" in err and "'SAME_CUBE_PE_LOCAL'" in err
    assert "Traceback" not in res.output
    lower = invoke(runner, "--case", "remote_sip")        # the case ids are upper case: a near miss in lower
    assert lower.exit_code == 2 and "did you mean 'REMOTE_SIP'?" in flat(lower.stderr)


def test_bad_size(runner: CliRunner) -> None:
    res = invoke(runner, "--case", "SAME_CUBE_PE_LOCAL", "--size", "16 parsecs")
    assert res.exit_code == 2
    assert "not understood" in flat(res.stderr)


def test_sweep_one_case(runner: CliRunner) -> None:
    res = invoke(runner, "--case", "REMOTE_CUBE_PE_REMOTE_BEST", "--sweep", "--format", "csv")
    assert res.exit_code == 0, res.stderr
    df = pd.read_csv(io.StringIO(res.stdout))
    assert df["nbytes"].tolist() == list(SWEEP_SIZES)
    assert len(df) == 5
    assert df["latency_ns"].is_monotonic_increasing
    assert (df["util_single"] == df["util_aggregate"]).all()


@pytest.mark.parametrize("args, words", [(["--size", "0"], "must be > 0 bytes"),
                                         (["--exact", "--compare"], "exclude each other"),
                                         (["--exact", "--method", "network"], "--exact runs no fast path")])
def test_bad_probe_flags_are_refused(runner: CliRunner, args: list[str], words: str) -> None:
    res = invoke(runner, "--case", "SAME_CUBE_PE_LOCAL", *args)
    assert res.exit_code == 2 and words in flat(res.stderr), res.output


@pytest.mark.parametrize("mode", [[], ["--method", "fluid"], ["--exact"]])
def test_the_screen_the_links_file_and_the_heat_map_give_one_utilisation(runner: CliRunner, tmp_path,
                                                                          monkeypatch, mode: list[str]) -> None:
    """A link's utilisation is its busy time over the row's makespan, from the evaluation behind the row: the
    busiest link's share on screen, in --links and on --heatmap is one number (docs/bottlenecks.md).  The
    hybrid default replays ucie_eastbound_8pe exactly; its files once came from the fluid estimate instead
    (91.9 % on screen, 84.9 % in the files)."""
    drawn = {}

    def draw(t, edges, out, label, sip=None):
        drawn["edges"] = edges
        return out

    monkeypatch.setattr("kbfast.cli.probe.plot_link_heatmap", draw)
    args = ["--case", "ucie_eastbound_8pe", *mode]
    res = invoke(runner, *args, "--links", str(tmp_path / "l.csv"), "--heatmap", str(tmp_path / "h.png"))
    assert res.exit_code == 0, res.output
    row = json.loads(invoke(runner, *args, "--format", "json").stdout)["rows"][0]
    links = pd.read_csv(tmp_path / "l.csv")
    top = links.loc[links["utilization"].idxmax()]
    assert (top["src"], top["dst"]) == ("sip0.cube1.ucie-W.conn0", "sip0.cube1.r0c0")
    assert top["utilization"] == pytest.approx(row["bottleneck_utilization"], rel=1e-9)
    assert top["utilization"] == pytest.approx(top["busy_ns"] / row["makespan_ns"], rel=1e-9)
    assert drawn["edges"]["utilization"].max() == pytest.approx(row["bottleneck_utilization"], rel=1e-9)
    assert percent(row["bottleneck_utilization"]) in flat(res.stdout)
