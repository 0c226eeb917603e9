"""Sweeps end to end (kbfast.sweep.runner): results files, errors, cross-checks, jobs, Dask, resume, occupancy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kbfast import __version__
from kbfast.config import load_system
from kbfast.errors import KbfastError
from kbfast.report.formats import clean, clean_columns
from kbfast.report.sweep import default_plots, detail_table, summary_table
from kbfast.sweep.runner import PROVENANCE, SweepInterrupted, SweepOutcome, check_sample, ignored_axes, run_sweep
from kbfast.sweep.spec import SweepSpec, parse_spec

METRIC_COLUMNS = ("latency_ns", "latency_lo_ns", "latency_hi_ns", "busbw_gbps", "contention")
SUMMARY_COLUMNS = ["points", "failed", "min (µs)", "median (µs)", "max (µs)"]     # every sweep's summary


def summary_columns(unit: str, bound: bool = True) -> list[str]:
    """The latency-per-series columns with latencies in ``unit`` (kbfast.report.formats.column_unit), and
    what bounds the points (all-reduce and pe2pe results say it)."""
    return [c.replace("µs", unit) for c in SUMMARY_COLUMNS] + (["bound by"] if bound else [])
# two topologies -> two batches of four points (a batch holds the points that share a topology)
TINY = {"name": "tiny", "topology": "torus6", "workload": {"kind": "allreduce", "algorithm": "lrab"},
        "axes": [{"zip": {"topology": ["torus6", "ring6"]}},
                 {"grid": {"workload.size": ["1KiB", "4KiB"], "ipcq.buffer_kind": ["tcm", "sram"]}}]}
CHECK = 2


def spec(data: dict[str, Any] = TINY, name: str = "tiny.yaml") -> SweepSpec:
    return parse_spec(data, name)


def small(kind: str, **fields: Any) -> SweepSpec:
    """Two points of one workload on torus6: 1 KiB and 4 KiB."""
    return spec({"topology": "torus6", "workload": {"kind": kind, **fields},
                 "axes": [{"grid": {"workload.size": ["1KiB", "4KiB"]}}]}, f"{kind}.yaml")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> SweepOutcome:
    """The tiny sweep on this process, with two points cross-checked exactly."""
    return run_sweep(spec(), tmp_path_factory.mktemp("ref"), check=CHECK)


# ----------------------------------------------------------------------------------------------------------------
def test_results_parquet(reference: SweepOutcome) -> None:
    out = reference.out_dir
    assert reference.files == [out / "results.parquet"]
    df = pd.read_parquet(out / "results.parquet")
    pd.testing.assert_frame_equal(df, reference.results)   # the file holds the returned table
    pts = spec().points()
    assert reference.n_points == reference.n_evaluated == len(df) == 8
    assert list(df["point"]) == list(range(8))
    assert list(df["config_hash"]) == [p.config_hash for p in pts]
    assert list(df["topology"]) == ["torus6"] * 4 + ["ring6"] * 4
    assert list(df["sip_topology"]) == ["torus_2d"] * 4 + ["ring_1d"] * 4
    assert list(df["size"]) == [1024, 1024, 4096, 4096] * 2
    assert list(df["buffer_kind"]) == ["tcm", "sram"] * 4
    assert "ipcq.buffer_kind" not in df and "workload.size" not in df     # one column per input
    assert set(PROVENANCE) | set(METRIC_COLUMNS) <= set(df.columns)
    assert (df["kbfast_version"] == __version__).all() and (df["mode"] == "fast").all()
    assert (df["param_set"] == load_system().param_set).all() and (df["seed"] == 0).all()   # the systems' own set
    assert df["error"].isna().all() and reference.n_errors == 0
    assert (df["latency_lo_ns"] <= df["latency_ns"]).all() and (df["latency_ns"] <= df["latency_hi_ns"]).all()
    assert (df["busbw_gbps"] > 0).all() and (df["n_ranks"] == 96).all()
    # sram slots are slower than tcm, bigger messages take longer
    assert (df["latency_ns"].to_numpy()[1::2] > df["latency_ns"].to_numpy()[::2]).all()
    assert (df.loc[df["size"] == 4096, "latency_ns"].to_numpy() > df.loc[df["size"] == 1024, "latency_ns"].to_numpy()).all()


def test_results_csv(reference: SweepOutcome, tmp_path: Path) -> None:
    res = run_sweep(spec(), tmp_path, fmt="csv", check=CHECK)
    assert res.files == [tmp_path / "results.csv"] and not (tmp_path / "results.parquet").exists()
    df = pd.read_csv(tmp_path / "results.csv")
    ref = reference.results
    assert list(df.columns) == list(ref.columns)
    assert list(df["point"]) == list(range(8)) and list(df["config_hash"]) == list(ref["config_hash"])
    np.testing.assert_allclose(df["latency_ns"], ref["latency_ns"], rtol=1e-12)
    assert (df["mode"] == "fast").all() and (df["kbfast_version"] == __version__).all()


def test_check_adds_exact_columns(reference: SweepOutcome) -> None:
    df = reference.results
    checked = df[df["rel_error"].notna()]
    assert len(checked) == CHECK and df["exact_latency_ns"].notna().sum() == CHECK
    assert (checked["rel_error"].abs() < 0.05).all()
    np.testing.assert_allclose(checked["rel_error"],
                               (checked["latency_ns"] - checked["exact_latency_ns"]) / checked["exact_latency_ns"])
    assert checked["exact_in_bounds"].tolist() == [True] * CHECK
    assert (checked["latency_lo_ns"] <= checked["exact_latency_ns"]).all()
    assert (checked["exact_latency_ns"] <= checked["latency_hi_ns"]).all()


def test_exact_mode_matches_check(reference: SweepOutcome, tmp_path: Path) -> None:
    res = run_sweep(spec(), tmp_path, exact=True)
    df, ref = res.results, reference.results
    assert (df["mode"] == "exact").all() and res.spec.mode == "exact"
    assert "rel_error" not in df and df["latency_lo_ns"].isna().all()
    assert not set(df["config_hash"]) & set(ref["config_hash"])             # the mode is part of the hash
    checked = ref["rel_error"].notna().to_numpy()
    np.testing.assert_allclose(df["latency_ns"].to_numpy()[checked], ref["exact_latency_ns"].to_numpy()[checked], rtol=1e-9)
    assert (df["busbw_gbps"] > 0).all() and df["error"].isna().all()


def test_tile_io_axis_and_column(reference: SweepOutcome, tmp_path: Path) -> None:
    """``tile_io`` is a workload field (default true) and a standard column; points that differ in it are
    separate batches, each equal to the one-at-a-time fast evaluation of its all-reduce."""
    from kbfast.fast.evaluate import run_fast
    from kbfast.sweep.batches import tables_of
    from kbfast.workloads.collectives import allreduce

    assert (reference.results["tile_io"] == True).all()   # noqa: E712 - the default
    data = {"topology": "torus6", "workload": {"kind": "allreduce"},
            "axes": [{"grid": {"workload.tile_io": [True, False], "workload.size": ["1KiB", "96KiB"]}}]}
    s = spec(data, "tio.yaml")
    res = run_sweep(s, tmp_path)
    df = res.results
    assert df["tile_io"].tolist() == [True, True, False, False] and "workload.tile_io" not in df
    cols = list(df.columns)
    assert cols.index("algorithm") < cols.index("tile_io") < cols.index("size")
    t, router = tables_of(s.points()[0])
    for row in df.itertuples(index=False):
        c = allreduce(t, router, int(row.size), "lrab", tile_io=bool(row.tile_io))
        assert row.latency_ns == clean(run_fast(c.program).agent_finish_ns.max() - c.launch_ns)   # as files hold it
    on, off = df[df.tile_io].set_index("size"), df[~df.tile_io.astype(bool)].set_index("size")
    # 96 KiB on torus6: the fast path adds the isolated load (389 ns) and store (397 ns) exactly
    assert on.loc[98304, "latency_ns"] - off.loc[98304, "latency_ns"] == pytest.approx(389.0 + 397.0)


def test_invalid_point_is_recorded(tmp_path: Path) -> None:
    """ring_1d on torus6 keeps its sips.w/h: that point fails alone, the others have results."""
    s = spec({"topology": "torus6", "workload": {"kind": "allreduce", "size": "1KiB"},
              "axes": [{"grid": {"sips.topology": ["torus_2d", "ring_1d", "mesh_2d_no_wrap"]}}]}, "bad.yaml")
    res = run_sweep(s, tmp_path)
    df = res.results
    assert list(df["point"]) == [0, 1, 2] and res.n_errors == 1
    assert df["error"].isna().tolist() == [True, False, True]
    assert "sips.w" in df.loc[1, "error"] and "ring_1d" not in str(df.loc[0, "error"])
    assert np.isnan(df.loc[1, "latency_ns"])
    ok = df.drop(index=1)
    assert (ok["latency_ns"] > 0).all() and list(ok["sip_topology"]) == ["torus_2d", "mesh_2d_no_wrap"]
    assert pd.read_parquet(tmp_path / "results.parquet")["error"].notna().sum() == 1


def test_value_of_wrong_type_is_recorded(tmp_path: Path) -> None:
    """A string where a number belongs fails its point; the results still save as Parquet (the two points are
    in different batches, whose parts disagree on the column's type)."""
    s = spec({"topology": "torus6", "workload": {"kind": "allreduce", "size": "1KiB"},
              "axes": [{"grid": {"sips.count": [6, "six"]}}]}, "typo.yaml")
    df = run_sweep(s, tmp_path).results
    assert df["error"].isna().tolist() == [True, False] and "sips.count" in df.loc[1, "error"]
    saved = pd.read_parquet(tmp_path / "results.parquet")
    assert list(saved["sips.count"].astype(str)) == ["6", "six"] and saved.loc[0, "latency_ns"] > 0


# ----------------------------------------------------------------------------------------------------------------
def test_jobs_do_not_change_results(reference: SweepOutcome, tmp_path: Path) -> None:
    res = run_sweep(spec(), tmp_path, jobs=2, check=CHECK)
    pd.testing.assert_frame_equal(res.results, reference.results)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "results.parquet"),
                                  pd.read_parquet(reference.out_dir / "results.parquet"))


def test_kept_workers_serve_several_sweeps_and_end(reference: SweepOutcome, tmp_path: Path) -> None:
    """Sweeps inside ``kept_workers`` run on one pool (spawned once) with the results of any other run; the pool
    ends on leaving, and an error inside ends it too."""
    from kbfast.sweep import runner
    with runner.kept_workers(2):
        pool = runner._KEPT[2]
        for k in range(2):
            res = run_sweep(spec(), tmp_path / str(k), jobs=2, check=CHECK)
            pd.testing.assert_frame_equal(res.results, reference.results)
            assert runner._KEPT[2] is pool
    assert 2 not in runner._KEPT
    with pytest.raises(RuntimeError, match="stop"), runner.kept_workers(2):
        raise RuntimeError("stop")
    assert not runner._KEPT


# starts a Dask LocalCluster of two worker processes
def test_dask_local_cluster(reference: SweepOutcome, tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    res = run_sweep(spec(), tmp_path, jobs=2, scheduler="local", check=CHECK)
    assert res.n_evaluated == 8
    pd.testing.assert_frame_equal(res.results, reference.results)


def test_bad_scheduler(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    with pytest.raises(KbfastError, match="scheduler address"):
        run_sweep(small("pe2pe"), tmp_path, scheduler="localhost:8786")


def test_resume_after_interrupt(reference: SweepOutcome, tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []

    def interrupt_after_first_batch(done: int, total: int) -> None:
        calls.append((done, total))
        if done > 0:
            raise KeyboardInterrupt

    with pytest.raises(SweepInterrupted, match="--resume") as info:
        run_sweep(spec(), tmp_path, check=CHECK, progress=interrupt_after_first_batch)
    assert info.value.exit_code == 130
    assert calls == [(0, 8), (4, 8)]
    parts = sorted((tmp_path / "parts").glob("results-*.parquet"))
    assert len(parts) == 1 and not (tmp_path / "results.parquet").exists()
    first = pd.read_parquet(parts[0])
    assert list(first["config_hash"]) == list(reference.results["config_hash"][:4])   # the torus6 batch

    seen: list[tuple[int, int]] = []
    res = run_sweep(spec(), tmp_path, check=CHECK, resume=True, progress=lambda d, t: seen.append((d, t)))
    assert res.n_points == 8 and res.n_evaluated == 4
    assert seen == [(4, 8), (8, 8)]
    assert len(list((tmp_path / "parts").glob("results-*.parquet"))) == 2
    assert res.results["config_hash"].is_unique and list(res.results["point"]) == list(range(8))
    pd.testing.assert_frame_equal(res.results, reference.results)

    again = run_sweep(spec(), tmp_path, check=CHECK, resume=True)          # nothing left to do
    assert again.n_evaluated == 0
    pd.testing.assert_frame_equal(again.results, reference.results)


def test_existing_results_need_resume_or_overwrite(tmp_path: Path) -> None:
    s = small("pe2pe", hop="h3")
    first = run_sweep(s, tmp_path)
    with pytest.raises(KbfastError, match="--resume.*--overwrite"):
        run_sweep(s, tmp_path)
    again = run_sweep(s, tmp_path, overwrite=True)
    assert again.n_evaluated == again.n_points == 2
    assert len(list((tmp_path / "parts").glob("results-*.parquet"))) == 1
    pd.testing.assert_frame_equal(again.results, first.results)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(KbfastError, match="--format"):
        run_sweep(small("pe2pe"), tmp_path, fmt="xlsx")
    with pytest.raises(KbfastError, match="--jobs"):
        run_sweep(small("pe2pe"), tmp_path, jobs=0)


# ----------------------------------------------------------------------------------------------------------------
def test_links_and_pcs_tables(tmp_path: Path) -> None:
    res = run_sweep(small("probe", case="SAME_CUBE_PE_LOCAL"), tmp_path, links=True, pcs=True)
    assert [f.name for f in res.files] == ["results.parquet", "links.parquet", "pcs.parquet"]
    hashes = dict(zip(res.results["point"], res.results["config_hash"]))
    for name, cols in (("links", {"edge", "kind", "src", "dst", "bytes", "busy_ns", "utilization"}),
                       ("pcs", {"controller", "pc", "commits", "busy_ns"})):
        table = pd.read_parquet(tmp_path / f"{name}.parquet")
        assert cols | {"point", "config_hash"} <= set(table.columns)
        assert set(table["point"]) == {0, 1}
        assert all(hashes[p] == h for p, h in zip(table["point"], table["config_hash"]))
    links = pd.read_parquet(tmp_path / "links.parquet")
    moved = links.groupby("point")["bytes"].max()
    assert moved[1] > moved[0] > 0                                          # 4 KiB moves more than 1 KiB
    assert pd.read_parquet(tmp_path / "pcs.parquet")["commits"].sum() > 0


@pytest.mark.parametrize(("kind", "fields"), [
    ("pe2pe", {"hop": "h3"}),
    ("probe", {"case": "REMOTE_SIP"}),
    ("traffic", {"n_flows": 8, "flow_seed": 1}),
])
def test_other_workloads(kind: str, fields: dict[str, Any], tmp_path: Path) -> None:
    df = run_sweep(small(kind, **fields), tmp_path).results
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["workload"]) == [kind, kind] and list(df["size"]) == [1024, 4096]
    assert (df["latency_ns"] > 0).all() and (df["effective_bw_gbps"] > 0).all()
    assert (df["latency_lo_ns"] <= df["latency_ns"]).all() and (df["latency_ns"] <= df["latency_hi_ns"]).all()
    assert df.loc[1, "latency_ns"] >= df.loc[0, "latency_ns"]
    if kind == "pe2pe":
        assert df.loc[1, "latency_ns"] == 116.625                           # the calibrated h3 4 KiB stream
        assert df["busbw_gbps"].isna().all() and (df["hop"] == "h3").all()


def test_workload_error_is_recorded(tmp_path: Path) -> None:
    df = run_sweep(small("probe", case="SAME_CUBE_PE_REMOTE"), tmp_path).results
    assert df["error"].notna().all()
    assert "did you mean 'SAME_CUBE_PE_REMOTE_BEST'" in df.loc[0, "error"]


def test_resume_after_kill(tmp_path: Path) -> None:
    """SIGKILL a `kbfast sweep` process once its first batch is saved; --resume finishes with the same results."""
    import os
    import signal
    import subprocess
    import sys
    import time

    data = {"name": "killed", "topology": "torus6", "mode": "exact", "workload": {"kind": "allreduce"},
            "axes": [{"zip": {"topology": ["torus6", "ring6", "mesh6", "ahbm_2sip"]}},
                     {"grid": {"workload.size": ["16KiB", "32KiB", "64KiB"]}}]}
    path = tmp_path / "killed.yaml"
    path.write_text(__import__("yaml").safe_dump(data))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "kbfast.cli.main", "sweep", str(path), "--out", str(out),
                             "--no-plots"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((out / "parts").glob("results-*.parquet")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = pd.concat([pd.read_parquet(f) for f in (out / "parts").glob("results-*.parquet")])
    res = run_sweep(parse_spec(data, str(path)), out, resume=True)
    assert res.n_evaluated == 12 - len(saved)
    if killed:   # (on a very slow machine the sweep may finish first; then resume has nothing to do)
        assert 0 < len(saved) < 12
    fresh = run_sweep(parse_spec(data, str(path)), tmp_path / "fresh")
    pd.testing.assert_frame_equal(res.results, fresh.results)


def test_gemm_sweep_checks_and_plots(tmp_path: Path) -> None:
    """A GEMM sweep: the GEMM columns, a cross-check against exact (single output tiles: fast == exact), an
    under-tile shape flagged, a bad staging recorded as the point's error, the roofline and stage plots."""
    s = spec({"name": "g", "topology": "ahbm_2sip", "workload": {"kind": "gemm", "m": 32, "n": 32},
              "axes": [{"grid": {"workload.k": [16, "3Ki"], "workload.staging": ["load_ref", "ref_ref", "bad"]}}]},
             "g.yaml")
    out = run_sweep(s, tmp_path / "g", check=6)
    df = out.results
    assert len(df) == 6 and df["error"].notna().sum() == 2
    assert all(df.loc[df["staging"] == "bad", "error"].str.contains("staging 'bad' is not one of"))
    assert "workload.k" not in df and "workload.staging" not in df                   # one column per input
    assert list(df.columns[:5]) == ["point", "topology", "sip_topology", "n_sips", "workload"]
    ok = df[df["error"].isna()].set_index(["k", "staging"])
    assert {"window_ns", "macs_per_ns", "mac_util", "bound_stage", "intensity_macs_per_byte", "busy[dma_read]"} \
        <= set(ok.columns)
    assert ok.loc[(3072, "load_ref"), "window_ns"] == 971.0          # tests/test_gemm_pipeline.py derives it
    assert bool(ok.loc[(16, "load_ref"), "under_tile"]) and not bool(ok.loc[(3072, "load_ref"), "under_tile"])
    np.testing.assert_allclose(ok["rel_error"], 0.0, atol=1e-12)
    pngs = default_plots(df, tmp_path / "plots")
    assert {p.name for p in pngs} == {"roofline.png", "stages.png", "parity.png"}
    assert "under-tile" in detail_table(df)[1].columns
    assert list(summary_table(df).columns) == summary_columns("ns", bound=False)   # 0.1 to 3 µs: ns, below 10,000


@pytest.mark.parametrize("turnaround, method, tol", [(0.0, "maxplus_steady", 1e-9), (2.0, "fluid", 0.05)])
def test_gemm_batch_without_a_maxplus_point(tmp_path: Path, turnaround: float, method: str, tol: float) -> None:
    """A GEMM batch whose shapes all take the steady state, or (with a PC read/write turnaround) the fluid
    schedule, evaluates every point, in the batch and one by one (a cross-checked point is its own batch in
    ``kbfast check``)."""
    s = spec({"name": "fluid", "topology": "ahbm_2sip", "workload": {"kind": "gemm"},
              "axes": [{"zip": {"workload.m": [1024, 4096], "workload.n": [16, 64], "workload.k": [4096, 64],
                                "workload.staging": ["load_ref", "ref_ref"],
                                "hbm.switch_penalty_ns": [turnaround] * 2}}]}, "fluid.yaml")
    df = run_sweep(s, tmp_path, check=2).results
    assert df["error"].isna().all(), df["error"].tolist()
    assert list(df["method"]) == [method, method] and (df["latency_ns"] > 0).all()
    assert (df["rel_error"].abs() < tol).all()


def test_gemm_batches_are_small() -> None:
    """A GEMM batch holds 25 points at most (a fluid GEMM takes up to seconds: the progress moves)."""
    from kbfast.sweep.batches import make_batches

    s = spec({"topology": "ahbm_2sip", "workload": {"kind": "gemm"},
              "axes": [{"grid": {"workload.m": [16, 64, 256, 1024], "workload.n": [16, 64, 256, 1024]}},
                       {"grid": {"workload.staging": ["ref_ref", "load_ref", "load_load"]}}]}, "g.yaml")
    assert [len(b.points) for b in make_batches(s.points(), "fast")] == [25, 23]


def test_results_floats_have_no_noise(reference: SweepOutcome) -> None:
    """Files keep full precision but no last-bit float noise: every float is its own 12-digit rounding."""
    df = reference.results
    floats = [c for c in df.columns if df[c].dtype.kind == "f"]
    assert {"latency_ns", "busbw_gbps", "effective_bw_gbps"} <= set(floats)
    for c in floats:
        vals = df[c].dropna()
        assert all(v == clean(float(v)) for v in vals), c
    assert clean_columns(pd.DataFrame({"x": [524856.9999999999, 0.1 + 0.2, np.nan]}))["x"].tolist()[:2] \
        == [524857.0, 0.3]


def test_summary_has_one_shape(reference: SweepOutcome, tmp_path: Path) -> None:
    """The latency-per-series table has the same columns for an all-reduce and a point-to-point sweep; the
    inputs it folds are named; pe2pe reports no bus bandwidth."""
    table = summary_table(reference.results)
    assert list(table.columns) == summary_columns("ns")                 # 2 to 5 µs: ns, below 10,000
    assert list(table.index.names) == ["topology", "buffer_kind"] and table.attrs["folded"] == ["size"]
    assert (table["points"] == 2).all() and (table["failed"] == 0).all()
    p2p = run_sweep(small("pe2pe", hop="h3"), tmp_path / "p2p").results
    assert list(summary_table(p2p).columns) == summary_columns("ns")
    assert p2p["busbw_gbps"].isna().all()
    assert "bus bandwidth" not in " ".join(p.stem for p in default_plots(p2p, tmp_path / "plots"))


def test_check_skips_axes_the_workload_ignores() -> None:
    """lrab reads no ipcq.n_slots: --check draws one of the points that differ only there and warns; the
    ring algorithm reads it, so every point is eligible."""
    data = {"topology": "torus6", "workload": {"kind": "allreduce", "algorithm": "lrab"},
            "axes": [{"grid": {"ipcq.n_slots": [1, 2, 4, 8], "workload.size": ["1KiB", "4KiB"]}}]}
    lrab = spec(data, "slots.yaml")
    pts = lrab.points()
    chosen = check_sample(len(pts), 8, 0, pts)
    assert len(chosen) == 2 and {pts[i].overrides["ipcq.n_slots"] for i in chosen} == {1}
    assert set(ignored_axes(lrab, pts)) == {"ipcq.n_slots"}
    assert "algorithm=lrab" in ignored_axes(lrab, pts)["ipcq.n_slots"]
    ring = spec({**data, "workload": {"kind": "allreduce", "algorithm": "ring"}}, "slots.yaml")
    assert len(check_sample(8, 8, 0, ring.points())) == 8 and ignored_axes(ring, ring.points()) == {}
    assert check_sample(8, 3, 5, ring.points()) == check_sample(8, 3, 5)       # same draw as before
    gemm = spec({"topology": "ahbm_2sip", "workload": {"kind": "gemm", "m": 32, "n": 32, "k": 32},
                 "axes": [{"grid": {"ipcq.buffer_kind": ["tcm", "hbm"], "workload.staging": ["ref_ref", "load_ref"]}}]},
                "g.yaml")
    assert len(check_sample(4, 4, 0, gemm.points())) == 2
    assert set(ignored_axes(gemm, gemm.points())) == {"ipcq.buffer_kind"}
