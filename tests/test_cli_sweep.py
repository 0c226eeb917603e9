"""``kbfast sweep``, ``kbfast check`` and ``kbfast plot`` through the typer app."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
from typer.testing import CliRunner

from kbfast.cli.main import app
from kbfast.report.explain import BOUND_WORDS
from conftest import flat

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TINY = """\
name: tiny
topology: torus6
workload: {kind: allreduce, algorithm: lrab}
axes:
  - zip: {topology: [torus6, ring6]}
  - grid: {workload.size: [1KiB, 4KiB]}
"""


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def invoke(runner: CliRunner, *args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def assert_png(path: Path) -> None:
    assert path.is_file()
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="module")
def swept(runner: CliRunner, tiny_spec: Path, tmp_path_factory: pytest.TempPathFactory):
    """``kbfast sweep`` of the tiny spec (4 points) with one cross-checked point, as CSV."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    res = invoke(runner, "sweep", tiny_spec, "--out", out, "--check", "1", "--format", "csv")
    return res, out


# ----------------------------------------------------------------------------------------------------------------
def test_sweep_writes_results_summary_and_plots(swept) -> None:
    res, out = swept
    assert res.exit_code == 0, res.output
    text = flat(res.stdout)
    assert "tiny: latency per series" in text and "min, median and max over size" in text
    bound = set(pd.read_csv(out / "results.csv")["bound_by"].dropna())   # each answer said in words
    assert bound and all(f"bound by {b}: {BOUND_WORDS[b]}" in text for b in bound), bound
    assert "tiny: latency by size (ns)" in text
    assert "torus6" in text and "ring6" in text and "1 KiB" in text and "4 KiB" in text
    assert "fast vs exact: checked points 1" in text
    assert "4 points (4 evaluated)" in text
    assert "Traceback" not in res.output
    assert "━" not in res.stderr and res.stdout.rstrip().endswith("parity.png")   # no progress bar in a log
    df = pd.read_csv(out / "results.csv")
    assert list(df["point"]) == [0, 1, 2, 3] and df["error"].isna().all()
    assert df["rel_error"].notna().sum() == 1 and df["rel_error"].abs().max() < 0.05
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# Sweep tiny")
    assert all(f"Bound by {b}: {BOUND_WORDS[b]}." in summary for b in bound)
    assert "## Latency per series" in summary and "## Latency by size (ns)" in summary
    assert "## Fast vs exact" in summary and "## Errors (0 points)" in summary and "## Plots" in summary
    assert "topology=ring6" in summary          # a column of the by-size table names its input
    assert "- points: 4" in summary and "- errors: 0" in summary
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert pngs == ["busbw_vs_size.png", "latency_vs_size.png", "parity.png"]
    for name in pngs:
        assert f"(plots/{name})" in summary
        assert_png(out / "plots" / name)


def test_sweep_resume_and_existing_output(runner: CliRunner, swept, tiny_spec: Path, tmp_path: Path) -> None:
    out = shutil.copytree(swept[1], tmp_path / "out")      # leave the shared output as it is
    again = invoke(runner, "sweep", tiny_spec, "--out", out, "--format", "csv", "--no-plots")
    assert again.exit_code == 2 and "--resume" in flat(again.stderr) and "Traceback" not in again.output
    resumed = invoke(runner, "sweep", tiny_spec, "--out", out, "--check", "1", "--format", "csv", "--resume",
                     "--no-plots")
    assert resumed.exit_code == 0, resumed.output
    assert "4 points (0 evaluated)" in flat(resumed.stdout)


def test_plot_from_results(runner: CliRunner, swept, tmp_path: Path) -> None:
    _, out = swept
    png = tmp_path / "f.png"
    res = invoke(runner, "plot", out / "results.csv", "--x", "size", "--y", "busbw_gbps", "--hue", "topology",
                 "--out", png)
    assert res.exit_code == 0, res.output
    assert "plot written to" in flat(res.stdout) and "(busbw_gbps against size)" in flat(res.stdout)
    assert_png(png)


def test_plot_unknown_column(runner: CliRunner, swept, tmp_path: Path) -> None:
    _, out = swept
    res = invoke(runner, "plot", out / "results.csv", "--y", "latncy_ns", "--out", tmp_path / "f.png")
    assert res.exit_code == 2
    err = flat(res.stderr)
    assert "'latncy_ns' is not in the results" in err and "did you mean 'latency_ns'" in err
    assert "Traceback" not in res.output and not (tmp_path / "f.png").exists()


def test_check_names_each_point_by_its_axes(runner: CliRunner) -> None:
    """Two sampled points of seed36 (torus6 at 64 KiB, mesh6 at 2 KiB) were listed by size alone: a topology
    that varies in step with the size was left out as if it restated it."""
    res = invoke(runner, "check", "seed36", "--sample", "2")
    assert res.exit_code == 0, res.output
    header = next(line for line in res.stdout.splitlines() if line.startswith("point"))
    assert header.split()[:3] == ["point", "topology", "size"]


def test_check_prints_parity_table(runner: CliRunner, tiny_spec: Path, tmp_path: Path) -> None:
    csv = tmp_path / "parity.csv"
    res = invoke(runner, "check", tiny_spec, "--sample", "2", "--out", csv)
    assert res.exit_code == 0, res.output
    text = flat(res.stdout)
    assert "tiny: fast vs exact" in text
    assert re.search(r"fast \((ns|µs)\)", text) and re.search(r"exact \((ns|µs)\)", text) and "in bounds" in text
    assert "checked points 2" in text
    assert "e+" not in text and re.search(r"[+-]\d+\.\d\d %", text)   # ns with separators, errors in percent
    assert "columns: error = (fast - exact) / exact" in text             # a legend, not a line saying "error:"
    assert not re.search(r"^error:", res.stdout, re.M)
    df = pd.read_csv(csv)
    assert len(df) == 2 and df["exact_latency_ns"].notna().all() and (df["rel_error"].abs() < 0.05).all()
    # the suffix picks the format, as run's --links: the same table as Parquet
    res = invoke(runner, "check", tiny_spec, "--sample", "2", "--out", tmp_path / "parity.parquet")
    assert res.exit_code == 0, res.output
    parquet = pd.read_parquet(tmp_path / "parity.parquet")
    assert list(parquet.columns) == list(df.columns)
    pd.testing.assert_frame_equal(parquet[["exact_latency_ns", "rel_error"]], df[["exact_latency_ns", "rel_error"]])


HALF_BAD = """\
name: half_bad
topology: torus6
workload: {kind: allreduce, size: 1KiB}
axes:
  - grid: {sips.topology: [torus_2d, ring_1d]}
"""


def test_sweep_with_failed_points_exits_1(runner: CliRunner, tmp_path: Path) -> None:
    """A point that fails (ring_1d keeps torus6's sips.w) fails the run: exit 1 with the count and the first
    error, after the results, summary and the other point are written."""
    spec = tmp_path / "half_bad.yaml"
    spec.write_text(HALF_BAD)
    res = invoke(runner, "sweep", spec, "--out", tmp_path / "o", "--no-plots")
    assert res.exit_code == 1, res.output
    err = flat(res.stderr)
    assert "error: 1 of 2 points failed; the first, point 1:" in err and "sips.w" in err
    assert "'error' column" in err and "Traceback" not in res.output
    df = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert df["error"].isna().tolist() == [True, False] and df.loc[0, "latency_ns"] > 0
    assert (tmp_path / "o" / "summary.md").is_file()


@pytest.mark.parametrize("axis", ["[torus_2d, ring_1d]", "[ring_1d]"], ids=["one-fails", "all-fail"])
def test_check_with_failed_points_exits_1(runner: CliRunner, tmp_path: Path, axis: str) -> None:
    """check prints every point, failed or not, writes --out, and exits 1 with the count and the first error
    (every point failing had ended in a KeyError traceback)."""
    spec = tmp_path / "s.yaml"
    spec.write_text(HALF_BAD.replace("[torus_2d, ring_1d]", axis))
    csv = tmp_path / "parity.csv"
    res = invoke(runner, "check", spec, "--sample", "2", "--out", csv)
    assert res.exit_code == 1, res.output
    n = axis.count(",") + 1
    assert f"error: 1 of {n} points failed; the first, point {n - 1}:" in flat(res.stderr)
    assert "Traceback" not in res.output and "fast vs exact" in res.stdout
    df = pd.read_csv(csv)
    assert len(df) == n and df["error"].notna().sum() == 1
    if n == 2:
        assert df.loc[0, "exact_latency_ns"] > 0 and "checked points 1 of 2 drawn;" in flat(res.stdout)
    else:    # none checked: the summary still says how many were drawn
        assert "checked points 0 of 1 drawn; max abs rel error -" in flat(res.stdout)


def test_progress_lines_when_stderr_is_no_terminal(runner: CliRunner, tiny_spec: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Redirected to a log, a sweep and a check print plain progress lines on stderr (here at every update:
    the interval set to 0), no bar; a long run had printed nothing until its end."""
    import kbfast.cli.sweep as cli_sweep

    monkeypatch.setattr(cli_sweep, "PROGRESS_EVERY_S", 0)
    res = invoke(runner, "sweep", tiny_spec, "--out", tmp_path / "o", "--no-plots")
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stderr.splitlines() if line.startswith("sweep tiny: ")]
    assert lines[0].startswith("sweep tiny: 0 / 4 points (0.0 %), ") and "━" not in res.stderr
    assert re.fullmatch(r"sweep tiny: 4 / 4 points \(100\.0 %\), [\d.,]+ points/s, [\d.]+ s elapsed", lines[-1])
    res = invoke(runner, "check", tiny_spec, "--sample", "2")
    assert res.exit_code == 0, res.output
    assert "check tiny: 0 / 2 points (0.0 %)" in res.stderr and "check tiny: 2 / 2 points (100.0 %)" in res.stderr


def test_progress_lines_are_spaced_by_the_interval() -> None:
    """Between the first and the last update, one line per interval at most; a timer tick prints the latest
    state when an interval passed without one (a long batch), with the rate and the time left."""
    from kbfast.cli.sweep import ProgressLines

    now, lines = [100.0], []
    p = ProgressLines("sweep x", 5.0, clock=lambda: now[0], write=lines.append)
    p.update(2, 12)                       # 2 points saved before (--resume): not in the rate
    now[0] += 1
    p.update(4, 12)                       # within the interval: no line
    p.tick()
    now[0] += 4
    p.tick()                              # 5 s since the last line
    now[0] += 2
    p.update(6, 12)
    p.update(12, 12)                      # the last update always prints
    now[0] += 10
    p.tick()                              # done: no more lines
    assert lines == ["sweep x: 2 / 12 points (16.7 %), 0 s elapsed",     # nothing done yet: no rate (was 0.00)
                     "sweep x: 4 / 12 points (33.3 %), 0.40 points/s, 5.0 s elapsed, about 20 s left",
                     "sweep x: 12 / 12 points (100.0 %), 1.43 points/s, 7.0 s elapsed"]


def test_the_progress_bar_follows_a_plan_that_grows(monkeypatch) -> None:
    """On a terminal the bar's total is the latest plan: a serving run's grid of step shapes refines and adds
    shapes, and the bar showed 30 / 24 (its first total) and no time left."""
    import io

    from rich.console import Console

    import kbfast.cli.sweep as sweep_cli

    seen = []

    class Recording(sweep_cli.Progress):
        def update(self, task_id, **fields) -> None:
            super().update(task_id, **fields)
            task = self.tasks[0]
            seen.append((task.completed, task.total))

    monkeypatch.setattr(sweep_cli, "Progress", Recording)
    monkeypatch.setattr(sweep_cli, "err_console", Console(file=io.StringIO(), force_terminal=True, width=80))
    with sweep_cli.progress_of("step shapes") as update:
        update(0, 24)
        update(12, 24)
        update(30, 40)                    # a refinement planned 16 more shapes
        update(40, 40)
    assert seen == [(12, 24), (30, 40), (40, 40)]


def test_a_progress_line_wider_than_the_terminal_breaks_between_its_parts() -> None:
    """Long waits read in minutes and hours, and a line that would pass 80 columns goes on, indented, on the
    next one, never broken inside a part."""
    from kbfast.cli.sweep import ProgressLines

    now, lines = [0.0], []
    p = ProgressLines("step shapes", 5.0, clock=lambda: now[0], write=lines.append, width=80)
    p.update(0, 1_000_000)
    now[0] = 1640.0
    p.update(100_000, 1_000_000)
    assert lines[1] == ("step shapes: 100,000 / 1,000,000 points (10.0 %), 61 points/s,\n"
                        "  27 min 20 s elapsed, about 4 h 06 min left")
    assert all(len(line) <= 80 for text in lines for line in text.splitlines())


@pytest.mark.parametrize(("body", "expected", "hint"), [
    (TINY.replace("axes:", "axis:"), "axis: unknown key", "did you mean 'axes'?"),
    (TINY.replace("workload.size", "workload.sise"), "workload.sise: unknown allreduce field 'sise'",
     "did you mean 'size'?"),
    (TINY + "  - grid: {ipcq.bufer_kind: [tcm, sram]}\n", "ipcq.bufer_kind: unknown key 'bufer_kind'",
     "did you mean 'buffer_kind'?"),
], ids=["top-level", "workload-field", "key-path"])
def test_spec_typo_exits_2(runner: CliRunner, tmp_path: Path, body: str, expected: str, hint: str) -> None:
    spec = tmp_path / "typo.yaml"
    spec.write_text(body)
    for command in ("sweep", "check"):
        res = invoke(runner, command, spec, "--out", tmp_path / ("out" if command == "sweep" else "p.csv"))
        assert res.exit_code == 2, res.output
        err = flat(res.stderr)
        assert "".join(err.split()).startswith(f"error:{spec}:")   # the message names the spec (rich may wrap it)
        assert expected in err and f"hint: {hint}" in err
        assert "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_sweep_missing_spec(runner: CliRunner, tmp_path: Path) -> None:
    res = invoke(runner, "sweep", tmp_path / "nope.yaml", "--out", tmp_path / "out")
    assert res.exit_code == 2
    err = flat(res.stderr)
    assert "no such sweep spec" in err and "seed36" in err and "Traceback" not in res.output


SLOTS = """\
name: slots
topology: torus6
workload: {kind: allreduce, algorithm: lrab}
axes:
  - grid:
      ipcq.buffer_kind: [tcm, sram, hbm]
      ipcq.n_slots: [1, 4]
      workload.size: [1KiB, 64KiB]
"""


def test_sweep_tables_read_at_80_columns(tmp_path: Path) -> None:
    """At 80 columns no header or cell is cut: the by-size table puts each input's value on its own header
    line; numbers keep kbfast's formats (no 3.000 counts); --check warns about the axis lrab ignores."""
    spec = tmp_path / "slots.yaml"
    spec.write_text(SLOTS)
    res = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o"),
                                                         "--check", "2", "--no-plots"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    assert "buffer_kind" in out and "n_slots" in out
    header = [line for line in out.splitlines() if "hbm" in line and "sram" in line and "tcm" in line]
    assert len(header) == 1 and "buffer_kind" in header[0]          # the by-size table's first header line
    assert re.search(r"\s2\s+0\s+\d", out)                       # points and failed as counts, not 2.000
    assert "warning: axis ipcq.n_slots" in flat(res.stderr) and "algorithm=lrab" in flat(res.stderr)
    note = "n_slots changed nothing: its values (1, 4) give the same results at every combination of the other inputs"
    assert note in flat(out) and "buffer_kind changed nothing" not in flat(out)
    assert note in flat((tmp_path / "o" / "summary.md").read_text())
    df = pd.read_parquet(tmp_path / "o" / "results.parquet")
    checked = df[df["rel_error"].notna()]
    assert len(checked) == 2 and (checked["n_slots"] == 1).all()    # one of each n_slots-only class
    assert "ipcq.n_slots" not in df and "n_slots" in df


def test_plot_names_what_it_folds(tmp_path: Path) -> None:
    """A plot that draws fewer inputs than vary names the folded ones; axis labels carry units."""
    from kbfast.report.sweep import axis_label, folded_inputs

    df = pd.DataFrame({"workload": "allreduce", "topology": ["a", "a", "b", "b"] * 2, "size": [1024, 4096] * 4,
                       "buffer_kind": ["tcm"] * 4 + ["hbm"] * 4, "latency_ns": range(8), "error": None})
    assert folded_inputs(df, "size", ["topology"]) == ["buffer_kind"]
    assert folded_inputs(df, "size", ["topology", "buffer_kind"]) == []
    assert axis_label("size", df) == "message size per rank (bytes)"
    assert axis_label("latency_ns") == "latency (ns)" and axis_label("busbw_gbps") == "bus bandwidth (GB/s)"
    assert axis_label("link.ucie_conn.bw_gbs") == "link.ucie_conn.bw_gbs (GB/s)"
    assert axis_label("mystery") == "mystery"


# -- tables at 80 columns ------------------------------------------------------------------------------------
def _gemm_results() -> pd.DataFrame:
    """GEMM sweep results shaped like the bundled spec's: shapes x staging x rate x (TCM, HBM) bandwidth, latencies
    from 100 ns to tens of ms."""
    rows = []
    for m in (16, 256, 4096):
        for n in (16, 4096):
            for k in (16, 4096):
                for staging in ("ref_ref", "load_ref", "load_load"):
                    for rate in (2048, 8192):
                        for tcm, hbm in ((512, 256), (256, 128)):
                            lat = 100.0 + m * n * k / rate * (512 / tcm) * (1.0 + 0.1 * len(staging))
                            rows.append({"workload": "gemm", "m": m, "n": n, "k": k, "staging": staging,
                                         "pe.gemm_macs_per_ns": rate, "pe.tcm_read_gbs": tcm, "pe.tcm_write_gbs": tcm,
                                         "link.router_hbm.bw_gbs": hbm, "latency_ns": lat,
                                         "macs_per_ns": m * n * k / lat, "mac_util": m * n * k / lat / rate,
                                         "under_tile": m < 32, "bound_stage": "dma_write", "error": None})
    return pd.DataFrame(rows)


def _model_results() -> pd.DataFrame:
    """Model sweep results shaped like llama70b's: SIPs x layout x UCIe bandwidth x phase, 3 ms to 2.8 s."""
    rows = []
    for sips in (2, 4, 8):
        for layout in ("tp_pes", "tp_cubes"):
            for bw in (64, 256):
                for phase, batch, base in (("decode", 1, 3.6e6), ("decode", 8, 11.1e6), ("prefill", 1, 2.7654321e9)):
                    lat = base * (1 + 0.3 * (layout == "tp_cubes")) * (64 / bw) ** 0.1 / sips ** 0.05
                    rows.append({"workload": "model", "model": "llama3_70b", "n_sips": sips, "sips.count": sips,
                                 "layout": layout, "link.ucie_conn.bw_gbs": bw, "phase": phase, "batch": batch,
                                 "latency_ns": lat, "mac_util": 0.05, "critical_path_collective_ns": lat / 2,
                                 "critical_path_gemm_compute_ns": lat / 3, "error": None})
    return pd.DataFrame(rows)


def _fragments(word: str) -> set[str]:
    """The header fragments a wrapped header may show of ``word``: runs of its whole pieces."""
    from kbfast.report.tables import _pieces

    pieces = [p for p, _ in _pieces(word)]
    return {"".join(pieces[i:j]) for i in range(len(pieces)) for j in range(i + 1, len(pieces) + 1)}


@pytest.mark.parametrize("results", [_gemm_results, _model_results], ids=["gemm", "model"])
def test_summary_tables_never_split_a_number_or_a_word(results, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns every cell of the latency-per-series and the workload's table is printed whole on one
    line, and a header breaks only between its pieces (after . _ - or at a space), never inside a word."""
    import io

    from rich.console import Console

    import kbfast.cli.sweep as cli
    from kbfast.report.sweep import detail_table, summary_table, table_view

    df = results()
    record = Console(width=80, file=io.StringIO(), record=True)
    monkeypatch.setattr(cli, "console", record)
    cli._print_summary(df, "s")
    out = record.export_text()
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    tokens = {t.strip() for t in re.split(r"\s{2,}|\n|[│┃]", out) if len(t.strip()) > 1}
    views = [table_view(t) for t in (summary_table(df), detail_table(df)[1])]
    for view in views:
        for row in view[2]:
            for cell in row:
                assert re.search(rf"(?<![\w.,]){re.escape(cell)}(?![\w.,])", out), cell      # whole, one line
    words = {w for view in views for head in view[0] for h in head for w in h.split(" ") if w}
    allowed = set().union(*map(_fragments, words), words)
    for word in words:
        broken = {t for t in tokens if word.startswith(t) or word.endswith(t)}
        assert broken <= allowed, (word, broken - allowed)


def test_a_table_too_wide_is_stacked(monkeypatch: pytest.MonkeyPatch) -> None:
    """When even the narrowest columns do not fit, the table is stacked, a block per row (its label, then a
    line per column), every number whole and within the width."""
    import io

    from rich.console import Console

    import kbfast.cli.sweep as cli

    wide = pd.DataFrame({f"metric_{i}": [123456.789 * (i + 1), 2.5] for i in range(12)},
                        index=pd.Index(["a_long_series_label", "b"], name="series"))
    record = Console(width=80, file=io.StringIO(), record=True)
    monkeypatch.setattr(cli, "console", record)
    cli._print_table(wide, "wide")
    lines = record.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert [line.strip() for line in lines if line.strip() in ("a_long_series_label", "b")] == ["a_long_series_label", "b"]
    assert any(re.fullmatch(r"\s*metric_11\s+1,481,481\.468\s*", line) for line in lines)


def test_summary_of_an_algorithm_axis() -> None:
    """An input that is both a standard column and a workload field (``algorithm``) is one series key: the
    summary of a sweep over algorithms groups by it (it used to fail on a duplicated column)."""
    from kbfast.report.sweep import input_columns, summary_table

    df = pd.DataFrame({"workload": "allreduce", "topology": "torus6", "algorithm": ["lrab", "ring"] * 2,
                       "size": [1024, 1024, 4096, 4096], "latency_ns": [2e3, 4e5, 3e3, 5e5], "error": None})
    assert input_columns(df).count("algorithm") == 1
    table = summary_table(df)
    assert list(table.index) == ["lrab", "ring"] and (table["points"] == 2).all()


def test_inputs_that_changed_nothing() -> None:
    """An input is reported as changing nothing only when, at every combination of the other inputs, all its
    values are there and give the same metrics; an input that merely restates another one is no witness."""
    from kbfast.report.sweep import inert_inputs, inert_notes

    base = pd.DataFrame({"workload": "allreduce", "topology": ["torus6", "ring6"] * 4,
                         "sip_topology": ["torus_2d", "ring_1d"] * 4, "n_slots": [1, 1, 4, 4] * 2,
                         "size": [1024] * 4 + [4096] * 4, "error": None})
    lat = base["size"] + 100 * (base["topology"] == "ring6")
    df = base.assign(latency_ns=lat, bottleneck_resource="fabric.switch0")
    assert inert_inputs(df) == {"n_slots": ["1", "4"]}
    notes = inert_notes(inert_inputs(df), {"ipcq.n_slots": "the allreduce workload with algorithm=lrab does not read it"})
    assert notes == ["n_slots changed nothing: its values (1, 4) give the same results at every combination of the "
                     "other inputs; the allreduce workload with algorithm=lrab does not read it."]
    assert inert_inputs(df.assign(latency_ns=lat + df["n_slots"])) == {}              # it changes the latency
    assert inert_inputs(df.assign(bottleneck_resource=df["n_slots"].astype(str))) == {}   # or any metric
    assert inert_inputs(df.iloc[:7]) == {}                       # a combination without both values proves nothing


# -- kbfast plot -------------------------------------------------------------------------------------------
def test_plot_of_a_folder_is_the_sweeps_own_plot(runner: CliRunner, swept, tmp_path: Path) -> None:
    """`kbfast plot DIR` reads the sweep's results table and, by default, draws the sweep's own latency plot
    pixel for pixel: one function, one style (scales, unit labels, title)."""
    _, out = swept
    png = tmp_path / "again.png"
    res = invoke(runner, "plot", out, "--out", png)
    assert res.exit_code == 0, res.output
    assert "(latency_ns against size)" in flat(res.stdout)
    assert (matplotlib.image.imread(png) == matplotlib.image.imread(out / "plots" / "latency_vs_size.png")).all()
    empty = tmp_path / "empty"
    empty.mkdir()
    res = invoke(runner, "plot", empty, "--out", tmp_path / "f.png")
    assert res.exit_code == 2 and "holds no results.parquet or results.csv" in flat(res.stderr)


def test_plot_refuses_text_values(runner: CliRunner, swept, tmp_path: Path) -> None:
    """A y column holding text (a latency written with its unit) is refused, naming the column and values."""
    df = pd.read_csv(swept[1] / "results.csv")
    df["latency_ns"] = df["latency_ns"].astype(object)
    df.loc[1, "latency_ns"] = "3.1 us"
    df.to_csv(tmp_path / "r.csv", index=False)
    res = invoke(runner, "plot", tmp_path / "r.csv", "--out", tmp_path / "f.png")
    assert res.exit_code == 2, res.output
    err = flat(res.stderr)
    assert "--y latency_ns: 1 of 4 values are text, not numbers ('3.1 us')" in err and "Traceback" not in res.output
    assert not (tmp_path / "f.png").exists()


@pytest.mark.parametrize(("results", "x"), [(_gemm_results, "m"), (_model_results, "n_sips")], ids=["gemm", "model"])
def test_plot_without_a_size_picks_a_varying_input(runner: CliRunner, tmp_path: Path, results, x: str) -> None:
    """GEMM and model results have no size: the default x is the numeric input with the most values, and the
    inputs beyond 12 lines are folded into medians (not refused)."""
    results().to_csv(tmp_path / "results.csv", index=False)
    res = invoke(runner, "plot", tmp_path, "--out", tmp_path / "f.png")
    assert res.exit_code == 0, res.output
    assert f"(latency_ns against {x})" in flat(res.stdout)
    assert_png(tmp_path / "f.png")


def test_plot_with_no_numeric_input_asks_for_x(runner: CliRunner, tmp_path: Path) -> None:
    pd.DataFrame({"workload": "probe", "case": ["A", "B"], "latency_ns": [1.0, 2.0], "error": None}) \
        .to_csv(tmp_path / "results.csv", index=False)
    res = invoke(runner, "plot", tmp_path / "results.csv", "--out", tmp_path / "f.png")
    assert res.exit_code == 2
    err = flat(res.stderr)
    assert "choose the x axis with --x" in err and "latency_ns" in err and "did you mean 'seed'" not in err


def test_stage_plot_names_what_distinguishes_each_panel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The GEMM stage breakdown draws one panel per staging and per setting of the other swept keys (the
    bandwidth pair), titled with it: no shape label repeats within a panel, no two panels share a title."""
    import kbfast.report.gemm as gemm

    df = _gemm_results()
    for i, r in enumerate(gemm.RESOURCES):
        df[f"busy[{r}]"] = 0.1 * (i + 1)
    keys, labels = gemm.settings(df)
    assert keys == ["pe.tcm_read_gbs", "pe.tcm_write_gbs", "link.router_hbm.bw_gbs"]
    assert set(labels) == {"tcm_read 512, tcm_write 512, router_hbm 256 GB/s",
                           "tcm_read 256, tcm_write 256, router_hbm 128 GB/s"}
    figures = []
    monkeypatch.setattr(gemm, "save_figure", lambda fig, out: figures.append(fig) or out)
    gemm.plot_stages(df, tmp_path / "stages.png")
    axes = figures[0].axes
    titles = [ax.get_title() for ax in axes]
    assert len(titles) == 6 and len(set(titles)) == 6
    assert all("router_hbm" in t for t in titles)
    for ax in axes:
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks == ["16x16x16", "4096x4096x4096"]              # the square shapes, once each
    assert "at 8192 MAC/ns" in figures[0].get_suptitle()


def test_plot_of_model_results_is_the_sweeps_own_plot(runner: CliRunner, tmp_path: Path) -> None:
    """A model sweep's latency plot and `kbfast plot` of its folder are one picture, pixel for pixel: both draw
    latency against SIPs (even where another input has more values) through kbfast.report.sweep.plot_xy."""
    from kbfast.report.sweep import default_plots

    df = _model_results()
    df = pd.concat([df, df[df["link.ucie_conn.bw_gbs"] == 64].assign(**{"link.ucie_conn.bw_gbs": 128})])
    df = df[df["n_sips"] != 8]                             # 2 SIP counts, 3 bandwidths
    df.to_csv(tmp_path / "results.csv", index=False)
    own = {p.name: p for p in default_plots(df, tmp_path / "plots")}
    res = invoke(runner, "plot", tmp_path, "--out", tmp_path / "f.png")
    assert res.exit_code == 0, res.output
    assert "(latency_ns against n_sips)" in flat(res.stdout)
    assert (tmp_path / "f.png").read_bytes() == own["latency_vs_sips.png"].read_bytes()
