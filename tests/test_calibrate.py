"""``kbfast calibrate`` (design §12): the row registry, the fit, parameter sets and the command line."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from kbfast.calibrate import (COLUMNS, FILE_COLUMNS, LATENCY_ROWS, ROWS, Bench, all_ok, derive, evaluate_rows, fit,
                              parse_fit, reference_table)
from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.config.loader import (PARAM_SET_DIR_ENV, load_raw, param_set_dirs, param_set_names, read_param_set,
                                 user_param_set_dir)
from kbfast.config.schema import SystemSpec
from kbfast.errors import ConfigError
from kbfast.report.formats import clean
from kbfast.sweep.runner import run_sweep
from kbfast.sweep.spec import parse_spec
from conftest import flat

TRUE = {"fabric.ns_per_mm": 0.4, "link.io_conn.bw_gbs": 200.0}   # the perturbed "truth" of the recovery test
MOVES = "link.ucie_internal.bw_gbs"   # a key the default fit moves (the worst cross-cube row is 1.40 % low)
MOVES_DEFAULT = 512.0


@pytest.fixture(scope="module")
def rows(spec: SystemSpec) -> pd.DataFrame:
    """Every reference row on the default topology, both modes."""
    return evaluate_rows(spec)


@pytest.fixture()
def sets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private parameter-set folder, searched before the packaged one, so tests never write calibration/."""
    folder = tmp_path / "sets"
    monkeypatch.setenv(PARAM_SET_DIR_ENV, str(folder))
    return folder


def invoke(*args: str, columns: int = 200):
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(app, ["calibrate", *args], catch_exceptions=False)


# ----------------------------------------------------------------------------------------------------------------
# The registry.

def test_every_reference_row_is_evaluated(rows: pd.DataFrame) -> None:
    ref = reference_table()
    assert list(rows["case"]) == list(ref.index) and sorted(ROWS) == sorted(ref.index)
    assert list(rows.columns) == COLUMNS
    assert set(rows["status"]) <= {"ok", "off", "retired"}


def test_default_topology_passes(rows: pd.DataFrame) -> None:
    assert all_ok(rows), rows[rows["status"] == "off"]
    by = rows.set_index("case")
    assert by.loc["pe_dma_local_16k", "fast"] == by.loc["pe_dma_local_16k", "exact"] == 77.0
    for case in LATENCY_ROWS:   # isolated transfers: fast == exact (parity P1)
        assert by.loc[case, "fast"] == pytest.approx(by.loc[case, "exact"], rel=1e-12)   # float order only
        assert abs(by.loc[case, "exact_err"]) <= 0.03
        assert by.loc[case, "exact_err"] == pytest.approx(by.loc[case, "exact"] / by.loc[case, "reference"] - 1)
    assert by.loc["pe_dma_distance_order_16k", "exact_err"] is True
    assert by.loc["pe_dma_distance_order_16k", "exact"].startswith("77.0 < ")


def test_retired_row_reports_the_gap(rows: pd.DataFrame) -> None:
    r = rows.set_index("case").loc["ipcq_vs_dma_intercube"]
    assert r["status"] == "retired" and r["fast_err"] is None and r["exact_err"] is None
    assert r["exact"] == pytest.approx(-12.375)     # IPCQ is below raw DMA at every size


def test_collective_rows_follow_the_band_semantics(rows: pd.DataFrame) -> None:
    by = rows.set_index("case")
    for preset in ("torus", "ring", "mesh"):
        r = by.loc[f"allreduce_center_vs_corner_{preset}"]
        assert r["status"] == "ok" and -0.30 <= r["exact"] <= -0.02 and abs(r["fast"] - r["exact"]) < 0.01
        assert "retired" in r["criterion"]                 # the size of the gain is shown, not judged
    assert 17200 < by.loc["allreduce_torus_96k_latest", "exact"] < 30000
    assert "retired" in by.loc["allreduce_buffer_kind_64k", "criterion"]


class _Swapped(Bench):
    """A bench whose measurements break the orderings the collective rows judge: the corner root beats the
    centre, and the buffer kinds come out in the reverse order."""

    def allreduce_ns(self, sips, algorithm, nbytes, kind="tcm", mode="exact"):
        return {"lrab": 2.0, "lrab_corner": 1.0}[algorithm] * {"tcm": 3.0, "hbm": 2.0, "sram": 1.0}[kind]


def test_the_collective_rows_can_fail(spec: SystemSpec) -> None:
    """Their orderings are checks that fail when broken (the magnitudes are retired, not the rows)."""
    ref = reference_table()
    for case in ("allreduce_center_vs_corner_torus", "allreduce_buffer_kind_64k"):
        assert ROWS[case].measure(_Swapped(spec), "fast", ref).ok is False, case
        assert ROWS[case].measure(Bench(spec), "fast", ref).ok is True, case


def test_a_row_beyond_3_percent_is_off(spec: SystemSpec) -> None:
    df = evaluate_rows(derive(spec, {"fabric.ns_per_mm": 2.5}), modes=("fast",))
    r = df.set_index("case").loc["pe_dma_remote_cube_worst_16k"]
    assert r["status"] == "off" and r["fast_err"] > 0.03 and r["exact"] is None
    assert not all_ok(df)


# ----------------------------------------------------------------------------------------------------------------
# The fit.

def test_fit_recovers_perturbed_parameters(spec: SystemSpec) -> None:
    truth = Bench(derive(spec, TRUE))
    ref = reference_table()
    target = {c: ROWS[c].measure(truth, "fast", ref, 1.0).value for c in LATENCY_ROWS}
    res = fit(spec, parse_fit(list(TRUE), spec), reference=target)
    assert res.fitted == list(TRUE)
    for key, value in TRUE.items():
        assert res.values[key] == pytest.approx(value, rel=1e-3), res
    assert max(abs(e) for e in res.after.values()) < 1e-6
    assert res.before["pe_dma_remote_cube_worst_16k"] < -0.01          # 0.4 ns/mm adds wire time
    assert res.sensitivity["link.io_conn.bw_gbs"]["pe_dma_local_16k"] == 0.0
    assert res.sensitivity["fabric.ns_per_mm"]["pe_dma_remote_cube_worst_16k"] > 0


def test_a_key_that_moves_no_row_is_not_fitted(spec: SystemSpec) -> None:
    # with ns_per_mm = 0 the cube width reaches latency only through routes, and a step does not change them
    res = fit(spec, parse_fit(["cube.geometry.w_mm", "fabric.ns_per_mm"], spec))
    assert res.fitted == ["fabric.ns_per_mm"] and res.sensitivity["cube.geometry.w_mm"] is None
    assert res.values["cube.geometry.w_mm"] == 16.0


def test_parse_fit_bounds(spec: SystemSpec) -> None:
    (p,) = parse_fit(["link.io_conn.bw_gbs=64:1024"], spec)
    assert (p.lo, p.hi, p.start) == (64.0, 1024.0, 512.0)
    (q,) = parse_fit(["link.io_conn.bw_gbs=600:700"], spec)
    assert q.start == 600.0                  # the start is clipped into the bounds


@pytest.mark.parametrize(("arg", "words"), [
    ("fabric.ns_per_mmm", ["fabric.ns_per_mmm", "did you mean 'ns_per_mm'"]),
    ("fabric.ns_per_mm=5:1", ["fabric.ns_per_mm", "LO < HI", "5:1"]),
    ("fabric.ns_per_mm=a:b", ["fabric.ns_per_mm", "LO:HI", "a:b"]),
    ("link.io_conn.bw_gbs=0:100", ["link.io_conn.bw_gbs", "greater than 0"]),
    ("hbm.efficiency", ["hbm.efficiency", "no default bounds", "hbm.efficiency=LO:HI"]),
    ("sips.topology", ["sips.topology", "not a continuous parameter"]),
    ("sip.cube_mesh.w", ["sip.cube_mesh.w", "not a continuous parameter"]),
])
def test_bad_fit_keys_and_bounds_exit_2(arg: str, words: list[str]) -> None:
    res = invoke("--mode", "fast", "--fit", arg)
    assert res.exit_code == 2
    msg = flat(res.stderr)
    assert msg.startswith("error: --fit: ")
    for w in words:
        assert w in msg, msg


def test_option_misuse_exits_2() -> None:
    assert "need --fit" in flat(invoke("fabric.ns_per_mm").stderr)
    res = invoke("--save", "x")
    assert res.exit_code == 2 and "--save needs --fit" in res.stderr


# ----------------------------------------------------------------------------------------------------------------
# The command line.

def test_table_reads_at_80_columns() -> None:
    res = invoke(columns=80)
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = res.stdout
    for case in ROWS:
        assert re.search(rf"^{case} ", text, re.M), case       # whole ids, never cut
    assert "-1.40 %" in text and "0.00 %" in text
    assert "565.0 ns" in text and "77.0 < 82.0 < 127.0 < 204.5 < 565.0 ns" in flat(text)
    assert re.search(r"^case\s+reference\s+fast\s+exact\s+status\s*$", text, re.M)
    for case, status in (("ipcq_vs_dma_intercube", "retired"), ("pe_dma_local_16k", "ok")):
        assert re.search(rf"^{case}\s.*\s{status}\s*$", text, re.M), case          # a status is never cut
    assert re.search(r"^allreduce_torus_96k_latest\s+< 30\.00 µs\s+22\.74 µs\s+22\.82 µs\s+ok\s*$", text, re.M)
    assert re.search(r"^allreduce_center_vs_corner_torus\s+-22\.0 %\s+-18\.8 %", text, re.M)   # a fraction: %
    assert " us" not in text and "1.765 µs" in text


def test_table_stacks_at_60_columns(terminal) -> None:
    """Too narrow for the columns side by side: one block per row, a status and a figure always whole."""
    res = terminal(60).invoke(app, ["calibrate"], catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    text = res.stdout
    assert max(len(line) for line in text.splitlines()) <= 60
    block = text[text.index("\nipcq_vs_dma_intercube\n"):]
    assert re.search(r"^  status\s+retired\s*$", block, re.M)
    assert re.search(r"^  fast\s+-12\.4 ns\s*$", block, re.M)
    for case in ROWS:
        assert re.search(rf"^{case}\s*$", text, re.M), case
    # the checks table keeps its case ids whole (they folded: allreduce_center_vs_corner_t / orus)
    assert re.search(r"^allreduce_center_vs_corner_torus\s+centre < corner", text, re.M)


def test_fit_tables_at_80_columns(sets_dir: Path) -> None:
    res = invoke("--mode", "fast", "--fit", MOVES, columns=80)
    assert res.exit_code == 0, res.stderr
    text = res.stdout
    assert max(len(line) for line in text.splitlines()) <= 80
    assert re.search(r"^pe_dma_remote_cube_worst_16k\s+573\.0 ns\s+-1\.40 %\s+[-+]\d+\.\d\d %\s*$", text, re.M)
    assert re.search(r"^link\.ucie_internal\.bw_gbs\s+512\s+\d+(\.\d+)?\s+32\.\.2048\s*$", text, re.M)


def test_csv_and_json(rows: pd.DataFrame) -> None:
    res = invoke("--mode", "fast", "--format", "csv")
    assert res.exit_code == 0, res.stderr
    df = pd.read_csv(io.StringIO(res.stdout))
    assert list(df.columns) == FILE_COLUMNS and list(df["case"]) == list(rows["case"])
    # a type per column: numbers where numbers are, text in its own column, a pass or fail in _ok
    assert all(df[c].dtype == float for c in ("reference", "fast", "exact", "fast_err", "exact_err"))
    text = df.set_index("case").loc["pe_dma_distance_order_16k"]
    assert np.isnan(text["fast"]) and text["fast_text"].endswith(" ns") and text["fast_ok"] == True  # noqa: E712
    assert np.isnan(text["fast_err"]) and text["reference_text"] == "strictly increasing"
    assert df["exact"].isna().all()
    lat = df.set_index("case").loc[list(LATENCY_ROWS)]
    assert [float(v) for v in lat["fast"]] == list(rows.set_index("case").loc[list(LATENCY_ROWS), "fast"])
    out = json.loads(invoke("--mode", "exact", "--format", "json").stdout)
    assert out["ok"] is True and out["modes"] == ["exact"] and out["fit"] is None
    assert out["param_set"] == "kernbench-2026-11"
    by = {r["case"]: r for r in out["rows"]}
    assert by["pe_dma_remote_cube_worst_16k"]["exact_err"] == rows.set_index("case").loc[
        "pe_dma_remote_cube_worst_16k", "exact_err"]
    assert by["ipcq_vs_dma_intercube"]["status"] == "retired"


def test_exit_1_when_a_row_is_off() -> None:
    res = invoke("--mode", "fast", "--set", "fabric.ns_per_mm=2.5")
    assert res.exit_code == 1
    assert "pe_dma_remote_cube_worst_16k" in flat(res.stderr) and "off" in res.stdout


def test_unknown_param_set_exits_2(sets_dir: Path) -> None:
    res = invoke("--mode", "fast", "--set", "param_set=nope")
    assert res.exit_code == 2
    msg = flat(res.stderr)
    for w in ("--set: param_set", "'nope'", "nope.yaml", str(sets_dir), "kernbench-2026-11"):
        assert w in msg, msg


# ----------------------------------------------------------------------------------------------------------------
# Parameter sets.

def test_save_load_and_results(sets_dir: Path, tmp_path: Path) -> None:
    res = invoke("--mode", "fast", "--fit", MOVES, "--save", "t-fit", "--format", "json")
    assert res.exit_code == 0, res.stderr
    path = sets_dir / "t-fit.yaml"
    doc = yaml.safe_load(path.read_text())
    fitted = json.loads(res.stdout)["fit"]["values"][MOVES]
    assert doc["name"] == "t-fit" and doc["values"] == {MOVES: fitted} and fitted != MOVES_DEFAULT
    prov = doc["provenance"]
    assert prov["rows"] == list(LATENCY_ROWS) and prov["topology"] == "ahbm_2sip" and prov["mode"] == "fast"
    assert set(prov["residuals"]["pe_dma_remote_sip_16k"]) == {"reference", "before", "after"}
    assert json.loads(res.stdout)["param_set"] == "t-fit"
    # a second save of the name is refused; with --overwrite it replaces it, deterministic: the same bytes
    first = path.read_bytes()
    again = invoke("--mode", "fast", "--fit", MOVES, "--save", "t-fit", "--format", "csv")
    assert again.exit_code == 2 and "a parameter set of that name exists" in flat(again.stderr)
    assert invoke("--mode", "fast", "--fit", MOVES, "--save", "t-fit", "--overwrite",
                  "--format", "csv").exit_code == 0
    assert path.read_bytes() == first
    assert "t-fit" in param_set_names()

    # a topology names the set; --set param_set names it too; --set overrides still win
    topo = tmp_path / "fitted.yaml"
    topo.write_text("base: ahbm_2sip\nname: fitted\nparam_set: t-fit\n")
    spec = load_system(topo)
    assert spec.param_set == "t-fit" and spec.link.ucie_internal.bw_gbs == fitted
    assert load_system(overrides={"param_set": "t-fit"}).link.ucie_internal.bw_gbs == fitted
    assert load_system(topo, {MOVES: 256}).link.ucie_internal.bw_gbs == 256
    assert load_system().link.ucie_internal.bw_gbs == MOVES_DEFAULT

    # the set shows in a sweep's param_set column, and changes the result
    sweep = parse_spec({"name": "cal", "topology": str(topo), "workload": {"kind": "probe", "case": "REMOTE_SIP"},
                        "axes": [{"zip": {"topology": [str(topo), "ahbm_2sip"]}}]}, str(tmp_path / "cal.yaml"))
    df = run_sweep(sweep, tmp_path / "out").results
    assert list(df["param_set"]) == ["t-fit", load_system().param_set]      # a saved set, or the system's own
    assert df["latency_ns"].iloc[0] != df["latency_ns"].iloc[1]
    assert df["latency_ns"].iloc[0] == clean(Bench(spec).probe_ns("REMOTE_SIP", 16 * 1024, "fast"))  # as files hold it


def test_a_set_carries_the_overrides_it_was_fitted_with(sets_dir: Path) -> None:
    """The fitted values hold only on the system they were fitted on: a set saved under --set keeps those
    overrides as values, so loading it alone gives that system back."""
    res = invoke("--mode", "fast", "--set", "cube.geometry.w_mm=14", "--set", "cube.pe_layout.pe_pitch_mm=2",
                 "--fit", MOVES, "--save", "t-narrow", "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = yaml.safe_load((sets_dir / "t-narrow.yaml").read_text())
    fitted = json.loads(res.stdout)["fit"]["values"][MOVES]
    assert doc["values"] == {"cube.geometry.w_mm": 14, "cube.pe_layout.pe_pitch_mm": 2, MOVES: fitted}
    assert doc["provenance"]["overrides"] == {"cube.geometry.w_mm": 14, "cube.pe_layout.pe_pitch_mm": 2}
    assert "with cube.geometry.w_mm=14, cube.pe_layout.pe_pitch_mm=2" in doc["description"]
    spec = load_system(overrides={"param_set": "t-narrow"})
    assert spec.cube.geometry.w_mm == 14 and spec.link.ucie_internal.bw_gbs == fitted


def _raw_value(data: dict, key: str):
    for part in key.split("."):
        data = data[part]
    return data


def test_the_shipped_sets() -> None:
    """kbfast ships the fitted IO links as kernbench-2026-11 (every preset loads it) and the same fit on the 14 mm
    floor plan; ahbm_2sip.yaml writes the same values, so the file reads as it runs; the fit solved the two rows
    it fitted (docs/calibration.md, "Parameter sets")."""
    package = param_set_dirs()[-1]
    shipped = read_param_set(package / "kernbench-2026-11.yaml")
    assert set(shipped) == {"link.pcie.bw_gbs", "link.io_conn.bw_gbs"}
    raw = load_raw("ahbm_2sip")[1]
    assert raw["param_set"] == "kernbench-2026-11"
    assert {k: _raw_value(raw, k) for k in shipped} == shipped
    narrow = read_param_set(package / "kernbench-2026-11-14mm.yaml")
    assert narrow == {"cube.geometry.w_mm": 14, "cube.pe_layout.pe_pitch_mm": 2, **shipped}
    for name in ("kernbench-2026-11", "kernbench-2026-11-14mm"):
        residuals = yaml.safe_load((package / f"{name}.yaml").read_text())["provenance"]["residuals"]
        for row in ("pe_dma_remote_sip_16k", "host_write_64k"):
            assert abs(residuals[row]["after"]) < 1e-6, (name, row)
    assert load_system().link.pcie.bw_gbs == shipped["link.pcie.bw_gbs"]


def test_the_14mm_set_moves_only_the_worst_cross_cube_route() -> None:
    """The two floor-plan readings differ, with no wire propagation, only through the routes: of the public rows
    only REMOTE_CUBE_PE_REMOTE_WORST moves, 565 -> 590 ns (docs/calibration.md, "Geometry")."""
    narrow = Bench(load_system(overrides={"param_set": "kernbench-2026-11-14mm"}))
    wide = Bench(load_system())
    for case, ns_wide, ns_narrow in (("SAME_CUBE_PE_LOCAL", 77.0, 77.0), ("REMOTE_SIP", 409.0, 409.0),
                                     ("REMOTE_CUBE_PE_REMOTE_WORST", 565.0, 590.0)):
        assert wide.probe_ns(case, 16 * 1024, "exact") == pytest.approx(ns_wide, abs=1e-3)
        assert narrow.probe_ns(case, 16 * 1024, "exact") == pytest.approx(ns_narrow, abs=1e-3)


def test_save_refuses_a_topologys_label_before_fitting(sets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A set saved under kernbench-2026-11, the label every preset's param_set names, would change every later
    default run while topo show printed the same label.  Refused before the
    fit runs, unless --overwrite."""
    monkeypatch.setattr("kbfast.cli.calibrate.fit", lambda *a, **k: pytest.fail("fitted before the refusal"))
    res = invoke("--fit", "link.io_conn.bw_gbs=64:512", "--save", "kernbench-2026-11")
    msg = flat(res.stderr)
    assert res.exit_code == 2 and "Traceback" not in res.stderr
    for w in ("--save: param_set: it is the param_set label of ahbm_2sip", "mesh6", "torus16",
              "'kernbench-2026-11'", "--overwrite"):
        assert w in msg, msg
    assert not sets_dir.exists() or not list(sets_dir.glob("*.yaml"))
    # a label only the --topology file uses is refused too
    topo = sets_dir.parent / "mine.yaml"
    topo.write_text("base: ahbm_2sip\nname: mine\nparam_set: my-label\n")
    res = invoke("--topology", str(topo), "--fit", "link.io_conn.bw_gbs", "--save", "my-label")
    assert res.exit_code == 2 and "param_set label of " + str(topo) in flat(res.stderr)


def test_save_checks_its_folder_before_fitting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kbfast.cli.calibrate.fit", lambda *a, **k: pytest.fail("fitted before the refusal"))
    (tmp_path / "file").write_text("")
    for folder, words in ((tmp_path / "file", "is a file, not a parameter-set folder"),
                          (tmp_path / "file" / "sets", "cannot write parameter sets to")):
        monkeypatch.setenv(PARAM_SET_DIR_ENV, str(folder))
        res = invoke("--fit", "link.io_conn.bw_gbs", "--save", "t-x")
        assert res.exit_code == 2 and words in flat(res.stderr) and PARAM_SET_DIR_ENV in res.stderr, res.stderr


def test_saved_sets_go_to_the_users_folder_not_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without $KBFAST_CALIBRATION_DIR a set goes to $XDG_CONFIG_HOME/kbfast/calibration, where the loader
    finds it; the packaged calibration/ folder is never written."""
    package = param_set_dirs()[-1]
    before = sorted(package.iterdir())
    monkeypatch.delenv(PARAM_SET_DIR_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert user_param_set_dir() == tmp_path / "config" / "kbfast" / "calibration"
    res = invoke("--mode", "fast", "--fit", MOVES, "--save", "t-user", "--format", "csv")
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "config" / "kbfast" / "calibration" / "t-user.yaml").is_file()
    assert sorted(package.iterdir()) == before
    assert load_system(overrides={"param_set": "t-user"}).link.ucie_internal.bw_gbs != MOVES_DEFAULT
    assert load_system().link.ucie_internal.bw_gbs == MOVES_DEFAULT   # the default runs are unchanged
    shown = CliRunner().invoke(app, ["topo", "show", "--set", "param_set=t-user", "--format", "json"])
    assert json.loads(shown.stdout)["param_set_file"] == str(user_param_set_dir() / "t-user.yaml")  # topo show names it


def test_the_fit_is_printed_before_anything_can_fail(sets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a, **k):
        raise ConfigError("--save", "param_set", "t-late", "the disk is full")

    monkeypatch.setattr("kbfast.cli.calibrate.save_param_set", refuse)
    res = invoke("--mode", "fast", "--fit", "link.io_conn.bw_gbs", "--save", "t-late")
    assert res.exit_code == 2 and "the disk is full" in res.stderr
    assert "fit (fast path, least squares)" in res.stdout and "link.io_conn.bw_gbs" in res.stdout


def test_bad_param_set_file_names_the_file(sets_dir: Path) -> None:
    sets_dir.mkdir()
    (sets_dir / "broken.yaml").write_text("values: {fabric.ns_per_mmm: 1.0}\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: fabric\.ns_per_mmm: unknown key"):
        load_system(overrides={"param_set": "broken"})


def test_rows_a_system_cannot_measure_are_not_applicable():
    """Two cubes, one SIP: the REMOTE_SIP and the IPCQ h4 rows have nothing to measure; they are n/a, the
    others are evaluated (no error, no traceback)."""
    df = evaluate_rows(load_system(overrides={"sips.count": 1, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 1}),
                       modes=("fast",)).set_index("case")
    assert df.loc["pe_dma_remote_sip_16k", "status"] == "n/a"
    assert "not measurable here" in df.loc["pe_dma_remote_sip_16k", "criterion"]
    assert df.loc["pe_dma_local_16k", "status"] == "ok" and df.loc["pe_dma_local_16k", "fast"] == 77.0
