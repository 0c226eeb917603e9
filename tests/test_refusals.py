"""Bad input ends in exit 2 and one message naming the file (or flag), the key and the value, with nothing
lost and no traceback (issue 17, section 3; the classes and their tests are listed in docs/refusals.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kbfast.cli.main import app
from conftest import flat, refused

TWO_BATCHES = """\
name: two
topology: ring6
workload: {kind: allreduce, algorithm: lrab}
axes:
  - zip: {topology: [ring6, torus6]}
  - grid: {workload.size: [1KiB, 4KiB]}
"""
ONE_POINT = "name: one\ntopology: ring6\nworkload: {kind: allreduce, algorithm: lrab, size: 1KiB}\n"


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def invoke(runner: CliRunner, *args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def read_only_folder(tmp_path: Path) -> Path:
    """A folder no file can be created in (chmod 555; root ignores that, so /sys for root)."""
    if os.geteuid() == 0:
        if not Path("/sys").is_dir():
            pytest.skip("no read-only folder for root")
        return Path("/sys")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return ro


# ------------------------------------------------------------------ silent replacements


def test_bool_is_no_count(runner, tmp_path):
    """sips: {count: true} was 1 SIP."""
    p = write(tmp_path, "t.yaml", "base: ring6\nsips: {count: true}\n")
    refused(invoke(runner, "topo", "show", p), f"{p}: sips.count:", "not true/false", "(got True)", "whole number")


def test_bool_is_no_bandwidth(runner):
    refused(invoke(runner, "topo", "show", "ring6", "--set", "link.pcie.bw_gbs=true"),
            "link.pcie.bw_gbs", "not true/false")


@pytest.mark.parametrize("what", ["topology", "spec", "model"])
def test_duplicate_yaml_keys(runner, tmp_path, what):
    """A key given twice was accepted, the last one winning: refused with the file, the key and both lines."""
    if what == "topology":
        p = write(tmp_path, "t.yaml", "base: ring6\nsips:\n  count: 6\n  topology: ring_1d\n  count: 5\n")
        args, key, lines = ["topo", "show", p], "sips.count", "lines 3 and 5"
    elif what == "spec":
        p = write(tmp_path, "s.yaml", ONE_POINT + "name: two\n")
        args, key, lines = ["sweep", p, "--out", tmp_path / "out"], "name", "lines 1 and 4"
    else:
        p = write(tmp_path, "m.yaml", "name: m\nkind: mlp\nbatch: 4\ndims: [64, 64, 64]\nbatch: 8\n")
        args, key, lines = ["run", "model", p], "batch", "lines 3 and 5"
    refused(invoke(runner, *args), f"{p}: {key}: the key is given twice, on {lines}", "hint: keep one")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["topology", "axis"])
def test_spec_topology_must_exist(runner, tmp_path, where):
    """A spec whose topology does not exist exited 0 with every point failed: refused before any point runs."""
    text = ONE_POINT.replace("topology: ring6", "topology: ring7") if where == "topology" else \
        TWO_BATCHES.replace("[ring6, torus6]", "[ring6, torus7]")
    p = write(tmp_path, "s.yaml", text)
    key = "topology" if where == "topology" else "axes.0.zip.topology"
    value = "ring7" if where == "topology" else "torus7"
    refused(invoke(runner, "sweep", p, "--out", tmp_path / "out"),
            f"{p}: {key}: the topology cannot be read: unknown topology preset (got '{value}')", "did you mean")
    assert not (tmp_path / "out").exists()


def test_spec_topology_must_read(runner, tmp_path):
    """A spec's topology file that exists but cannot be read (here a base it names is missing)."""
    write(tmp_path, "t.yaml", "base: nosuch\n")
    p = write(tmp_path, "s.yaml", ONE_POINT.replace("topology: ring6", "topology: t.yaml"))
    refused(invoke(runner, "sweep", p, "--out", tmp_path / "out"),
            f"{p}: topology: topology 't.yaml' cannot be read:", "base: unknown topology preset (got 'nosuch')")


@pytest.mark.parametrize("body,words", [
    ("set: {ipcq.n_slots: 0}\n", ["set.ipcq.n_slots: must be greater than 0 (got 0)", "whole number >= 1"]),
    ("set: {param_set: nosuch}\n", ["set.param_set: no parameter set nosuch.yaml", "save one with kbfast calibrate"]),
    ("name: ../../escape\n", ["name: a sweep name is a plain file name", "(got '../../escape')", "give --out"]),
    ("seed: -1\n", ["seed: a seed is a whole number >= 0 (got -1)", "hint: e.g. seed: 0"]),
], ids=["set-value", "set-param-set", "name", "seed"])
@pytest.mark.parametrize("command", ["sweep", "check"])
def test_spec_refused_at_load(runner, tmp_path, body, words, command):
    """A spec whose every point would fail (a bad value in set:), that would write outside results/ (a name
    with folders) or whose sampling would crash (a negative seed) is refused before any point runs."""
    p = write(tmp_path, "s.yaml", ONE_POINT.replace("name: one\n", "") + body)
    out = ["--out", tmp_path / ("out" if command == "sweep" else "c.csv")]
    refused(invoke(runner, command, p, *out), f"{p}: ", *words)
    assert not (tmp_path / "out").exists() and not (tmp_path / "c.csv").exists()


@pytest.mark.parametrize("model,words", [
    ("nosuch", ["workload.model: the model cannot be read: unknown model (got 'nosuch')"]),
    ("missing.yaml", ["workload.model: the model cannot be read: no such model file (got 'missing.yaml')"]),
    ("BAD", ["workload.model: model", "cannot be read:", "bad.yaml: name: required key is missing"]),
    ("[tp_mlp, llama3_7b]", ["axes.0.grid.workload.model: the model cannot be read: unknown model (got 'llama3_7b')",
                             "did you mean 'llama3_70b'"]),
], ids=["unknown", "missing", "invalid", "axis"])
def test_spec_model_must_read(runner, tmp_path, model, words):
    """A model workload whose model is unknown, missing or invalid ran every point into the same error and
    exited 0: refused at load, for the fixed model and for each value of a model axis."""
    if model == "BAD":
        model = str(write(tmp_path, "bad.yaml", "kind: transformer\n"))
    body = "name: m\ntopology: ring6\nworkload: {kind: model, model: %s}\n" % model
    if model.startswith("["):
        body = f"name: m\ntopology: ring6\nworkload: {{kind: model}}\naxes:\n  - grid: {{workload.model: {model}}}\n"
    p = write(tmp_path, "s.yaml", body)
    refused(invoke(runner, "sweep", p, "--out", tmp_path / "out"), f"{p}: ", *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("workload,axis,words", [
    ("{kind: allreduce}", "workload.algorithm: [lrab, rign]",
     ["axes.0.grid.workload.algorithm: unknown all-reduce algorithm 'rign': did you mean 'ring'?"]),
    ("{kind: collective, algorithm: chain}", "workload.op: [broadcast, reduse]",
     ["axes.0.grid.workload.op: unknown collective operation 'reduse'", "'reduce'"]),
    ("{kind: gemm}", "workload.staging: [load_rf]",
     ["axes.0.grid.workload.staging: staging 'load_rf' is not one of", "hint: did you mean 'load_ref'"]),
    ("{kind: model, layout: tp_pe}", "workload.batch: [1, 2]", ["workload.layout: unknown layout 'tp_pe'"]),
], ids=["algorithm", "op", "staging", "layout"])
@pytest.mark.parametrize("command", ["sweep", "check"])
def test_spec_names_refused_at_load(runner, tmp_path, workload, axis, words, command):
    """A misspelt algorithm, operation, staging or layout ran the sweep and failed each of its points (exit 1):
    refused at load, naming the key that gave it, before --out is made."""
    p = write(tmp_path, "s.yaml", f"name: s\ntopology: ring6\nworkload: {workload}\naxes:\n  - grid: {{{axis}}}\n")
    out = ["--out", tmp_path / ("out" if command == "sweep" else "c.csv")]
    refused(invoke(runner, command, p, *out), f"{p}: ", *words)
    assert not (tmp_path / "out").exists() and not (tmp_path / "c.csv").exists()


def test_check_seed_flag_must_be_whole(runner, tmp_path):
    p = write(tmp_path, "s.yaml", ONE_POINT)
    refused(invoke(runner, "check", p, "--seed", "-1"), "--seed -1: give a sample seed, 0 or more")


@pytest.mark.parametrize("args,words", [
    (["--check", "-1"], "--check -1: give how many points to replay exactly (0: none), 0 or more"),
    (["--resume", "--overwrite"], "--resume and --overwrite exclude each other"),
])
def test_sweep_flags(runner, tmp_path, args, words):
    p = write(tmp_path, "s.yaml", ONE_POINT)
    refused(invoke(runner, "sweep", p, "--out", tmp_path / "out", *args), words)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ file-writing failures


def test_sweep_out_is_a_file(runner, tmp_path):
    p = write(tmp_path, "s.yaml", ONE_POINT)
    f = write(tmp_path, "taken", "keep me")
    refused(invoke(runner, "sweep", p, "--out", f), f"--out {f}: this is a file; give a folder")
    assert f.read_text() == "keep me"


@pytest.mark.parametrize("below", ["a file", "a read-only folder"])
def test_sweep_out_unwritable(runner, tmp_path, below):
    p = write(tmp_path, "s.yaml", ONE_POINT)
    parent = write(tmp_path, "taken", "x") if below == "a file" else read_only_folder(tmp_path)
    refused(invoke(runner, "sweep", p, "--out", parent / "out"), f"--out {parent / 'out'}: cannot write there")


def test_topo_plot_unwritable(runner, tmp_path):
    ro = read_only_folder(tmp_path)
    refused(invoke(runner, "topo", "show", "ring6", "--plot", ro / "plan.png"),
            f"--plot {ro / 'plan.png'}: cannot write there")
    refused(invoke(runner, "topo", "show", "ring6", "--plot", tmp_path / "plan.jpgx"),
            "a figure is written as .png, .svg, .pdf")


@pytest.mark.parametrize("command", [["probe", "--case", "SAME_CUBE_PE_LOCAL", "--size", "1KiB"],
                                     ["run", "allreduce", "--topology", "ring6", "--size", "1KiB"],
                                     ["run", "pe2pe", "--size", "1KiB"],
                                     ["run", "gemm"]])
def test_trace_unwritable(runner, tmp_path, command):
    """--trace used to fail (a traceback) after the replay; it is checked first."""
    f = write(tmp_path, "taken", "x") / "t.json"
    refused(invoke(runner, *command, "--trace", f), f"--trace {f}: cannot write there")


def test_check_out_unwritable_before_the_work(runner, tmp_path):
    p = write(tmp_path, "s.yaml", ONE_POINT)
    refused(invoke(runner, "check", p, "--out", read_only_folder(tmp_path) / "parity.csv"), "cannot write there")
    refused(invoke(runner, "check", p, "--out", tmp_path), f"--out {tmp_path}: this is a folder")


def test_bench_out_unwritable_before_the_work(runner, tmp_path):
    f = read_only_folder(tmp_path) / "bench.csv"
    refused(invoke(runner, "bench", "--only", "topology", "--out", f), f"--out {f}: cannot write there")


# ------------------------------------------------------------------ files kbfast cannot read


@pytest.mark.parametrize("what", ["topology", "spec", "model"])
def test_non_utf8_files(runner, tmp_path, what):
    """A non-UTF-8 file was a UnicodeDecodeError traceback."""
    if what == "topology":
        p = write(tmp_path, "t.yaml", b"base: ring6\ndescription: caf\xe9\n")
        args = ["topo", "show", p]
    elif what == "spec":
        p = write(tmp_path, "s.yaml", ONE_POINT.encode() + b"description: \xff\n")
        args = ["sweep", p, "--out", tmp_path / "out"]
    else:
        p = write(tmp_path, "m.yaml", b"name: m\xff\nkind: mlp\nbatch: 4\ndims: [64, 64, 64]\n")
        args = ["run", "model", p]
    line = 2 if what == "topology" else 4 if what == "spec" else 1
    refused(invoke(runner, *args), f"{p}: not UTF-8 text", f"at line {line}", "save the file as UTF-8")


@pytest.mark.parametrize("base", ["[ring6]", "7", "''"])
def test_base_must_be_a_name(runner, tmp_path, base):
    """base: as a list or an integer was a TypeError traceback."""
    p = write(tmp_path, "t.yaml", f"base: {base}\n")
    refused(invoke(runner, "topo", "show", p), f"{p}: base: base names one preset or topology YAML", "hint: e.g.")


def test_missing_base_names_the_referring_file(runner, tmp_path):
    p = write(tmp_path, "t.yaml", "base: ring7\n")
    refused(invoke(runner, "topo", "show", p), f"{p}: base: unknown topology preset (got 'ring7')",
            "did you mean 'ring6'?")


# ------------------------------------------------------------------ numbers out of range


def test_huge_sip_count(runner, tmp_path):
    """sips.count >= 2^63 was an OverflowError deep in the topology builder."""
    p = write(tmp_path, "t.yaml", f"base: ring6\nsips: {{count: {2**63}, topology: ring_1d}}\n")
    refused(invoke(runner, "topo", "show", p), f"{p}: sips.count:", f"(got {2**63})",
            "a count must be a whole number from 1 to 2,147,483,647")


@pytest.mark.parametrize("command", [["probe", "--case", "SAME_CUBE_PE_LOCAL"], ["run", "allreduce"],
                                     ["run", "pe2pe"]])
@pytest.mark.parametrize("size", [str(2**63), "9" * 500, "1025GiB"])
def test_huge_size_flag(runner, command, size):
    refused(invoke(runner, *command, "--size", size), "--size: size", "more than the limit of 1 TiB")


def test_huge_size_in_spec(runner, tmp_path):
    p = write(tmp_path, "s.yaml", ONE_POINT.replace("1KiB", str(2**63)))
    refused(invoke(runner, "sweep", p, "--out", tmp_path / "out"), f"{p}: workload.size:", "limit of 1 TiB")


@pytest.mark.parametrize("args, words", [
    (["--k", str(2**40)], ["--k 1099511627776", "more than the limit of 16,777,216 (16Mi)"]),
    (["--m", str(2**63)], ["--m 9223372036854775808", "more than the limit"]),
    (["--n", "9" * 500], ["--n '9999", "chars)", "is not a positive integer"]),
    (["--m", "65536", "--n", "65536", "--k", "65536"],
     ["65,536 x 65,536 x 65,536 GEMM", "24 GiB in all", "HBM slice holds 6 GiB", "hbm.total_gib_per_cube"]),
    (["--m", "65536", "--n", "65536", "--k", "65536", "--exact"], ["24 GiB in all"]),
    (["--m", "65536", "--n", "65536", "--k", "131072", "--set", "hbm.total_gib_per_cube=10000"],
     ["8,589,934,592 tiles", "limit of 4,294,967,296"]),
])
def test_huge_gemm_dimensions(runner, args, words):
    """K = 2^40 was a MemoryError, m = 2^63 an OverflowError, and 65536^3 ran though its operands do not fit its
    HBM slice (with --exact it allocated 32 GiB of tile indices first)."""
    refused(invoke(runner, "run", "gemm", *args), *words)


def test_huge_gemm_dimension_in_spec(runner, tmp_path):
    p = write(tmp_path, "s.yaml", f"name: g\nworkload: {{kind: gemm, m: 32, n: 32, k: {2**40}}}\n")
    refused(invoke(runner, "sweep", p, "--out", tmp_path / "out"), f"{p}: workload.k:", "16,777,216")


def test_an_exact_gemm_is_estimated_before_it_is_built(runner):
    """The Program of a 32 x 32 x 4Mi GEMM (393,223 ops) is refused under a tight memory limit before a tile op
    is made, naming its estimate."""
    from kbfast.config import budget
    res = runner.invoke(app, ["run", "gemm", "--k", "4Mi", "--exact"], catch_exceptions=False,
                        env={budget.ENV: f"{budget.rss_bytes() // 2 ** 20 + 20}MiB"})
    refused(res, "the Program of the 32 x 32 x 4,194,304 GEMM (393,223 ops)", "drop --exact", "KBFAST_MAX_MEMORY")


def test_model_options_a_model_does_not_read(runner, tmp_path):
    """--phase, --seq, --batch and --kv-len changed nothing for the TP MLP and the attention panels, and sweep rows
    carried them: refused, as --layers is, on the command line and in a spec."""
    refused(invoke(runner, "run", "model", "tp_mlp", "--phase", "prefill"), "--phase prefill:",
            "applies to transformer models only", "tp_mlp is of kind mlp", "hint: drop --phase")
    refused(invoke(runner, "run", "model", "gqa_llama70b_validation", "--seq", "16", "--kv-len", "64"), "--seq 16:",
            "drop --seq, --kv-len")
    p = write(tmp_path, "s.yaml", "name: m\nworkload: {kind: model, model: tp_mlp}\n"
                                  "axes: [{grid: {workload.batch: [1, 2]}}]\n")
    refused(invoke(runner, "sweep", p, "--out", tmp_path / "out"), f"{p}: workload.batch:", "(got 1)",
            "hint: drop workload.batch from the spec")


@pytest.mark.parametrize("k", ["0", "-2"])
def test_check_sample_must_be_positive(runner, tmp_path, k):
    """check --sample 0 was 'No objects to concatenate'."""
    p = write(tmp_path, "s.yaml", ONE_POINT)
    refused(invoke(runner, "check", p, "--sample", k), f"--sample {k}: give how many points to cross-check, 1 or more")


# ------------------------------------------------------------------ plot


@pytest.fixture(scope="module")
def swept(runner, tmp_path_factory) -> Path:
    """A finished 4-point sweep (2 batches: one per topology)."""
    folder = tmp_path_factory.mktemp("refuse")
    spec = write(folder, "two.yaml", TWO_BATCHES)
    out = folder / "out"
    res = invoke(runner, "sweep", spec, "--out", out, "--no-plots")
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("case,words", [
    ("missing", "no such results file"),
    ("empty", "the file is empty"),
    ("text", "not a readable Parquet results table"),
    ("csv as parquet", "not a readable Parquet results table"),
    ("no rows", "the results table has no rows; nothing to plot"),
    ("all failed", "nothing to plot: every point failed"),
])
def test_plot_unreadable_tables(runner, swept, tmp_path, case, words):
    p = tmp_path / "results.parquet"
    df = pd.read_parquet(swept / "results.parquet")
    if case == "empty":
        p.write_bytes(b"")
    elif case == "text":
        p.write_text("hello")
    elif case == "csv as parquet":
        df.to_csv(p, index=False)
    elif case == "no rows":
        df.iloc[:0].to_parquet(p)
    elif case == "all failed":
        df.assign(error="boom").to_parquet(p)
    refused(invoke(runner, "plot", p), str(p), words)
    assert not list(tmp_path.glob("*.png"))


def test_plot_unknown_columns(runner, swept):
    refused(invoke(runner, "plot", swept / "results.parquet", "--x", "sise"),
            "--x: column 'sise' is not in the results", "did you mean 'size'")
    refused(invoke(runner, "plot", swept / "results.parquet", "--y", "topology"), "--y topology:",
            "values are text, not numbers ('")


def test_plot_out_folder(runner, swept, tmp_path):
    """plot --out DIR wrote DIR.png and reported DIR."""
    res = invoke(runner, "plot", swept / "results.parquet", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    png = tmp_path / "latency_ns_vs_size.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert f"plot written to {png}" in flat(res.stdout)
    assert not tmp_path.with_suffix(".png").exists()


# ------------------------------------------------------------------ resume, stray results


def test_corrupt_part_is_recomputed(runner, swept, tmp_path):
    """A part that cannot be read on --resume is named, set aside and its points evaluated again; the other
    batch is kept (2 of 4 points evaluated) and the results equal the first run's."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(swept, out)
    before = pd.read_parquet(out / "results.parquet")
    parts = sorted((out / "parts").glob("results-*.parquet"))
    assert len(parts) == 2
    parts[0].write_bytes(b"PAR1 truncated")
    res = invoke(runner, "sweep", write(tmp_path, "two.yaml", TWO_BATCHES), "--out", out, "--resume", "--no-plots")
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    err = flat(res.stderr)
    assert f"warning: {parts[0]} was unreadable; set aside as {parts[0].name}.corrupt" in err
    assert "4 points (2 evaluated)" in flat(res.stdout)
    after = pd.read_parquet(out / "results.parquet")
    assert after[["point", "config_hash", "latency_ns"]].equals(before[["point", "config_hash", "latency_ns"]])
    assert (out / "parts" / f"{parts[0].name}.corrupt").read_bytes() == b"PAR1 truncated"


@pytest.mark.parametrize("name", ["results.csv", "results.parquet"])
def test_stray_results_need_overwrite(runner, tmp_path, name):
    """A results table in --out (without parts) was overwritten silently."""
    out = tmp_path / "out"
    out.mkdir()
    stray = write(out, name, "mine")
    p = write(tmp_path, "s.yaml", ONE_POINT)
    for resume in ([], ["--resume"]):    # not a sweep's table: nothing to resume either
        refused(invoke(runner, "sweep", p, "--out", out, *resume), f"{out} already holds {name}, which no sweep "
                "recorded", "pass --overwrite to replace it")
    assert stray.read_text() == "mine"


def test_second_sweep_on_a_locked_folder(runner, tmp_path):
    """Two sweeps on one folder mixed their parts: while one holds the folder's lock, a second is refused with
    the holder's pid; once the holder is gone (killed: its lock file stays behind), the lock is taken over."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "out"
    hold = ("import sys, time; from pathlib import Path; from kbfast.sweep.runner import sweep_lock\n"
            "with sweep_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        p = write(tmp_path, "s.yaml", ONE_POINT)
        for flags in ([], ["--resume"], ["--overwrite"]):
            refused(invoke(runner, "sweep", p, "--out", out, *flags),
                    f"--out {out}: another sweep (pid {holder.pid}) is writing this folder", "choose another --out")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (out / "sweep.lock").read_text().strip() == str(holder.pid)        # left behind by the dead holder
    res = invoke(runner, "sweep", p, "--out", out, "--no-plots")
    assert res.exit_code == 0, res.output
    assert not (out / "sweep.lock").exists() and (out / "results.parquet").is_file()


def test_resume_with_another_spec(runner, tmp_path):
    """--resume with another spec replaced a finished sweep: the folder records its spec's digest, and a
    different spec is refused, naming both; the results stay as they were."""
    out = tmp_path / "out"
    first = write(tmp_path, "first.yaml", ONE_POINT)
    assert invoke(runner, "sweep", first, "--out", out, "--no-plots").exit_code == 0
    before = (out / "results.parquet").read_bytes()
    other = write(tmp_path, "other.yaml", ONE_POINT.replace("1KiB", "2KiB"))
    err = refused(invoke(runner, "sweep", other, "--out", out, "--resume", "--no-plots"),
                  f"--resume: {out} holds the sweep of spec {first} (digest ", f"not of {other} (digest ",
                  "pass --overwrite to replace its results")
    digests = re.findall(r"digest ([0-9a-f]{16})", err)
    assert len(digests) == 2 and digests[0] != digests[1]
    assert (out / "results.parquet").read_bytes() == before
    (tmp_path / "elsewhere").mkdir()
    moved = write(tmp_path / "elsewhere", "same.yaml", ONE_POINT)
    again = invoke(runner, "sweep", moved, "--out", out, "--resume", "--no-plots")   # the same spec, moved
    assert again.exit_code == 0 and "1 points (0 evaluated)" in flat(again.stdout), again.output


def test_summary_of_the_user_needs_overwrite(runner, tmp_path):
    """A summary.md in --out that no sweep wrote was overwritten: refused without --overwrite (--resume too)."""
    out = tmp_path / "out"
    out.mkdir()
    mine = write(out, "summary.md", "# my notes\n")
    p = write(tmp_path, "s.yaml", ONE_POINT)
    for flags in ([], ["--resume"]):
        refused(invoke(runner, "sweep", p, "--out", out, *flags),
                f"--out {out} already holds summary.md, which no sweep recorded", "pass --overwrite to replace it")
    assert mine.read_text() == "# my notes\n" and not (out / "results.parquet").exists()
    res = invoke(runner, "sweep", p, "--out", out, "--overwrite", "--no-plots")
    assert res.exit_code == 0 and mine.read_text().startswith("# Sweep one"), res.output


# ------------------------------------------------------------------ smaller ones


def test_set_errors_name_the_flag(runner):
    """A bad --set value was blamed on the preset file."""
    err = refused(invoke(runner, "topo", "show", "ring6", "--set", "sips.count=0"),
                  "--set sips.count=0: sips.count: must be greater than 0 (got 0)")
    assert "ring6.yaml" not in err
    refused(invoke(runner, "run", "allreduce", "--n-slots", "0"), "--n-slots 0: ipcq.n_slots:", "whole number >= 1")
    refused(invoke(runner, "run", "pe2pe", "--buffer-kind", "dram"), "--buffer-kind dram: ipcq.buffer_kind:",
            "must be one of 'tcm', 'sram' or 'hbm' (got 'dram')", "did you mean 'sram'?")


def test_echoed_values_are_capped(runner, tmp_path):
    """A 5 MB value was printed whole in the message."""
    p = write(tmp_path, "t.yaml", "base: ring6\nsips: {count: '" + "9" * 5_000_000 + "', topology: ring_1d}\n")
    err = refused(invoke(runner, "topo", "show", p), f"{p}: sips.count:", "… (5,000,002 chars)")
    assert len(err) < 1000


# ------------------------------------------------------------------ hostile YAML

def alias_bomb(levels: int) -> str:
    """A list whose anchors each repeat the one before 9 times: 9**levels values once expanded."""
    text = "[&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"
    for i in range(1, levels):
        text += f", &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]"
    return text + "]"


def hostile(tmp_path: Path, what: str, line: str) -> tuple[Path, list]:
    """A topology, spec or model file with ``line`` added, and the command that reads it."""
    if what == "topology":
        p = write(tmp_path, "t.yaml", f"base: ring6\n{line}\n")
        return p, ["topo", "show", p]
    if what == "spec":
        p = write(tmp_path, "s.yaml", f"{ONE_POINT}{line}\n")
        return p, ["sweep", p, "--out", tmp_path / "out"]
    p = write(tmp_path, "m.yaml", f"name: m\nkind: mlp\nbatch: 4\ndims: [64, 64, 64]\n{line}\n")
    return p, ["run", "model", p]


@pytest.mark.parametrize("what", ["topology", "spec", "model"])
def test_alias_bomb_is_refused_while_parsing(runner, tmp_path, what):
    """A 9-level alias bomb (387 million values) grew without bound: refused from the parsed nodes."""
    p, args = hostile(tmp_path, what, f"description: {alias_bomb(9)}")
    refused(invoke(runner, *args), f"{p}: the file holds", "values with its aliases expanded, more than "
            "the limit of 1,000,000", "hint:")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("what", ["topology", "model"])
def test_small_alias_bomb_is_echoed_cut(runner, tmp_path, what):
    """A 5-level bomb (59,049 values) was refused after formatting its 428,103-character repr."""
    p, args = hostile(tmp_path, what, f"description: {alias_bomb(5)}")
    err = refused(invoke(runner, *args), f"{p}: description: not text",
                  "… (a list of 5 items))")
    assert len(err) < 1000


@pytest.mark.parametrize("what", ["topology", "spec", "model"])
def test_deep_nesting_is_refused(runner, tmp_path, what):
    """A list nested 100,000 deep was a RecursionError traceback."""
    p, args = hostile(tmp_path, what, "x: " + "[" * 100_000 + "]" * 100_000)
    line = {"topology": 2, "spec": 4, "model": 5}[what]
    refused(invoke(runner, *args), f"{p}: line {line}: nested more than 64 levels deep")


def test_alias_references_are_capped(runner, tmp_path):
    p, args = hostile(tmp_path, "topology", "description: [&a x, " + ", ".join(["*a"] * 1001) + "]")
    refused(invoke(runner, *args), f"{p}: line 2: more than 1,000 alias references (got '*a')")


def test_alias_cycle_is_refused(runner, tmp_path):
    p, args = hostile(tmp_path, "topology", "description: &a [*a]")
    refused(invoke(runner, *args), f"{p}: line 2: an alias refers to a value that contains it")


def test_huge_whole_number_is_refused(runner, tmp_path):
    """A 5,000-digit count was a ValueError traceback (Python's digit limit for int())."""
    p, args = hostile(tmp_path, "topology", "sips: {count: " + "9" * 5000 + ", topology: ring_1d}")
    err = refused(invoke(runner, *args), f"{p}: sips.count: a whole number of 5,000 characters is too large")
    assert len(err) < 1000


@pytest.mark.parametrize("sets,blamed,words", [
    (["sips.topology=torus_2d"], "--set sips.topology=torus_2d", "sips.count: non-square sips.count"),
    (["hbm.burst_bytes=128"], "--set hbm.burst_bytes=128", "fabric.flit_bytes: a flit may not exceed the HBM burst"),
    (["fabric.ns_per_mm=0.5", "sip.cube_mesh.w=1"], "--set sip.cube_mesh.w=1",
     "sip.io_chiplets.0.cube_ports.1.cube: cube is outside the 1x4 cube mesh"),
])
def test_set_errors_across_keys_name_the_flag(runner, sets, blamed, words):
    """A --set that broke a rule across keys was blamed on the preset file, at the key the file gave."""
    err = refused(invoke(runner, "topo", "show", "ring6", *[a for s in sets for a in ("--set", s)]),
                  f"error: {blamed}: {words}")
    assert "ring6.yaml" not in err


@pytest.mark.parametrize("args,words", [
    (["topo", "show", "ring6", "--set", "sips.count=3", "--set", "sips.count=4"],
     "--set sips.count=4: sips.count: the key is given twice, as --set sips.count=3 and --set sips.count=4"),
    (["run", "allreduce", "--set", "ipcq.n_slots=3", "--n-slots", "4"],
     "--n-slots 4: ipcq.n_slots: the key is given twice, as --set ipcq.n_slots=3 and --n-slots 4"),
])
def test_repeated_set_key_is_refused(runner, args, words):
    """A --set key given twice was taken silently, the last value winning."""
    refused(invoke(runner, *args), words, "hint: give each key once")


@pytest.mark.parametrize("command", [["probe", "--case", "SAME_CUBE_PE_LOCAL"], ["run", "pe2pe"]])
def test_size_in_tib_is_read(runner, command):
    """--size 2TiB was 'not understood' though the limit is written in TiB."""
    refused(invoke(runner, *command, "--size", "2TiB"),
            "--size: size '2TiB' is more than the limit of 1 TiB (1,099,511,627,776 bytes): a size is at most 1 TiB")
    from kbfast.config.units import parse_size
    assert parse_size("1TiB") == parse_size("1T") == 2**40 and parse_size("0.5TiB") == 2**39
    assert parse_size("1TB") == 10**12


# ------------------------------------------------------------------ infinity and NaN

@pytest.mark.parametrize("args,key,value,words", [
    (["run", "allreduce", "--set", "overhead_ns.router=inf"], "overhead_ns.router", "inf",
     "must be a finite number"),
    (["run", "pe2pe", "--set", "fabric.ns_per_mm=inf"], "fabric.ns_per_mm", "inf", "must be a finite number"),
    (["probe", "--case", "SAME_CUBE_PE_LOCAL", "--set", "fabric.ns_per_mm=inf"], "fabric.ns_per_mm", "inf",
     "must be a finite number"),
    (["topo", "show", "ring6", "--set", "fabric.ns_per_mm=1e400"], "fabric.ns_per_mm", "1e400",
     "too large for a number (it would become infinity)"),
    (["topo", "show", "ring6", "--set", "link.pcie.bw_gbs=1e400"], "link.pcie.bw_gbs", "1e400",
     "too large for a number (it would become infinity)"),
    (["topo", "show", "ring6", "--set", "link.pcie.bw_gbs=.nan"], "link.pcie.bw_gbs", "nan",
     "must be a number, not NaN"),
    (["topo", "show", "ring6", "--set", "ipcq.tiers.tcm.bw_gbs=.inf"], "ipcq.tiers.tcm.bw_gbs", "inf",
     "must be a finite number"),
])
def test_infinity_only_where_it_means_no_serialization(runner, args, key, value, words):
    """--set overhead_ns.router=inf ended in 'unknown event kind' (run allreduce), or printed '-' latencies and
    exited 0 (pe2pe, probe); 1e400 silently became infinity."""
    err = refused(invoke(runner, *args), f"{args[-1]}: {key}: {words}", "inf is allowed only where it means no "
                  "serialization (link.<class>.bw_gbs)")
    assert f"(got {value!r})" in err or f"(got {value})" in err


def test_overflowing_float_in_a_file(runner, tmp_path):
    p = write(tmp_path, "t.yaml", "base: ring6\nfabric: {ns_per_mm: 1.0e+400}\n")
    refused(invoke(runner, "topo", "show", p), f"{p}: fabric.ns_per_mm: the number is too large: it would become "
            "infinity (got '1.0e+400')")
    p = write(tmp_path, "t.yaml", "base: ring6\nfabric: {ns_per_mm: 1e400}\n")   # YAML reads this one as text
    refused(invoke(runner, "topo", "show", p), f"{p}: fabric.ns_per_mm: too large for a number")


def test_infinite_link_bandwidth_is_no_serialization(runner):
    """inf stays allowed where it means no serialization: a link bandwidth (an unserialised switch link, the
    original's reading of a bandwidth never given)."""
    from kbfast.config import load_system
    spec = load_system("ring6", {"link.ucie_conn.bw_gbs": "inf", "link.pcie.bw_gbs": "inf"})
    assert spec.link.ucie_conn.bw_gbs == float("inf") and spec.link.pcie.bw_gbs == float("inf")


def test_unknown_set_key_names_the_set(runner):
    """An unknown --set key was reported as '--set: sips.cuont: ...', without the --set the user typed."""
    refused(invoke(runner, "topo", "show", "ring6", "--set", "sips.cuont=4"),
            "error: --set sips.cuont=4: sips.cuont: unknown key 'cuont' hint: did you mean 'count'?")


# ------------------------------------------------------------------ a value outside its choices, and other slips

@pytest.mark.parametrize("args,words", [
    (["run", "gemm", "--staging", "load_rf"], ["--staging: staging 'load_rf' is not one of ref_ref, load_ref, "
                                               "load_load",
                                               "hint: did you mean 'load_ref' or 'load_load'?"]),
    (["run", "model", "llama32_1b", "--method", "fluids"], ["fast method 'fluids' is not one of hybrid, network, fluid",
                                                            "hint: did you mean 'fluid'?"]),
    (["run", "model", "llama32_1b", "--phase", "prefil"], ["phase 'prefil' is not one of", "did you mean 'prefill'?"]),
    (["serve", "llama32_1b", "--layout", "tp_pe"], ["--layout 'tp_pe' is not one of tp_pes, tp_cubes",
                                                    "did you mean 'tp_pes'"]),
    (["search", "llama32_1b", "--collective", "lrb"], ["--collective 'lrb' is not one of", "did you mean 'lrab'?"]),
    (["search", "llama32_1b", "--layout", "tp_pes,tp_pe"], ["--layout 'tp_pes,tp_pe': item 'tp_pe' is not one of"]),
    (["search", "llama32_1b", "--objective", "tokens_per_sec"], ["did you mean 'tokens_per_s'"]),
    (["search", "llama32_1b", "--constraint", "tpot<=50"], ["no metric 'tpot'", "hint: did you mean 'tpot_ms'?"]),
    (["topo", "route", "ahbm_2sip", "sip0.cube0.pe0", "sip0.cube1.pe0", "--kind", "memry"],
     ["--kind 'memry' is not one of pe_dma, memory", "did you mean 'memory'?"]),
    # nothing close: a pointer to the list, or its first names and how many, not 24 names on one line
    (["probe", "--case", "foo"], ["unknown probe case 'foo' hint: kbfast probe --list lists the cases"]),
    (["topo", "show", "--set", "nonexist.key=1"], ["valid keys: cube, description,", "… (14 in all)"]),
    # an empty key is no key
    (["topo", "show", "--set", "=5"], ["--set: =5: an override must look like key.path=value"]),
    (["topo", "show", "--set", "sips..count=2"], ["an override must look like key.path=value"]),
    # a --knob's value was blamed on a --set the user never gave
    (["search", "llama32_1b", "--knob", "sips.count=a,b"], ["error: --knob sips.count=a: sips.count: not a whole "
                                                             "number (got 'a')"]),
    # every candidate "pruned", with a hint to widen the space, where run model says to drop --ep
    (["search", "llama32_1b", "--ep", "4"], ["--ep 4: applies to mixtures of experts", "only; llama32_1b has a "
                                             "dense FFN", "hint: drop --ep"]),
    # a library's refusal did not say which flag gave the name
    (["run", "allreduce", "--algorithm", "rign"], ["--algorithm: unknown all-reduce algorithm 'rign': did you "
                                                   "mean 'ring'?"]),
    (["run", "allreduce", "--ranks", "all_pe"], ["--ranks: ranks 'all_pe' is not a set of ranks"]),
    (["run", "collective", "--op", "reduse"], ["--op: unknown collective operation 'reduse'"]),
    (["run", "model", "llama32_1b", "--layout", "tp_pe"], ["--layout: unknown layout 'tp_pe'"]),
    # compare-routing worded its sizes unlike run and probe
    (["topo", "compare-routing", "--size", "1XB"], ["--size: size '1XB' is not understood"]),
    (["topo", "compare-routing", "--size", "0"], ["--size '0' must be > 0 bytes"]),
    # a negative size was called misspelt ("not understood"), as if its sign were a typo
    (["run", "allreduce", "--size", "-4"], ["--size '-4' must be > 0 bytes"]),
    # an empty item was dropped without a word
    (["search", "llama32_1b", "--batch", "1,,2"], ["--batch '1,,2': an empty item between commas"]),
    # check wrote CSV to any name, where run's --links refuses one that is no table's
    (["check", "gemm", "--out", "parity.txt"], ["--out 'parity.txt': the file name must end in .csv or .parquet"]),
    # --jobs 0 ran (check) or worded its refusal three ways
    (["check", "gemm", "--jobs", "0"], ["--jobs 0: give how many worker processes, 1 or more"]),
    (["serve", "llama32_1b", "--jobs", "0"], ["--jobs 0: give how many worker processes, 1 or more"]),
    (["search", "llama32_1b", "--jobs", "0"], ["--jobs 0: give how many worker processes, 1 or more"]),
])
def test_a_slip_is_refused_with_the_closest_choice(runner, args, words):
    """A misspelt choice is refused in one wording everywhere, with the closest choice as its hint (several
    commands listed the choices with no suggestion); a long list is cut to its first names and its count."""
    refused(invoke(runner, *args), *words)


def test_a_refused_sweep_leaves_no_folder(runner, tmp_path):
    """sweep --jobs 0 made its --out folder, then refused."""
    refused(invoke(runner, "sweep", "gemm", "--jobs", "0", "--out", tmp_path / "out"), "--jobs 0:")
    assert not (tmp_path / "out").exists()


def test_a_refused_search_leaves_no_folder(runner, tmp_path):
    """A search whose every candidate is pruned made its --out folder (and any missing parents) and left them
    empty; a folder that was there before stays."""
    args = ["search", "llama32_1b", "--pp", "3"]
    refused(invoke(runner, *args, "--out", tmp_path / "a" / "b"), "every one of the", "candidates was pruned")
    assert not (tmp_path / "a").exists()
    (tmp_path / "kept").mkdir()
    refused(invoke(runner, *args, "--out", tmp_path / "kept"), "candidates was pruned")
    assert (tmp_path / "kept").is_dir()


def test_a_value_read_from_a_table_is_echoed_as_a_number():
    """A serving trace's bad row echoed numpy's repr, '(got np.int64(-5))'."""
    import numpy as np

    from kbfast.errors import ConfigError
    assert "(got -5)" in str(ConfigError("t.csv", "prompt_len (row 1)", np.int64(-5), "must be a whole number"))
    assert "(got 1.5)" in str(ConfigError("t.csv", "prompt_len (row 1)", np.float64(1.5), "must be a whole number"))


@pytest.mark.parametrize("args,words", [
    (["run", "allreduce", "--format", "tabel"], ["error: --format 'tabel' is not one of table, csv, json",
                                                 "hint: did you mean 'table'?",
                                                 "hint: kbfast run allreduce --help lists its options"]),
    (["calibrate", "--mode", "fsat"], ["--mode 'fsat' is not one of fast, exact, both", "did you mean 'fast'?"]),
    (["run", "allreduce", "--n-slots", "abc"], ["error: --n-slots 'abc': not a whole number"]),
    (["run", "allreduce", "--n-slots=2.5"], ["error: --n-slots '2.5': not a whole number"]),
    (["run", "allreduce", "--sizee", "4"], ["error: no such option --sizee", "hint: did you mean --size"]),
    (["runn"], ["error: no such command 'runn'", "hint: did you mean 'run'?", "kbfast --help lists its commands"]),
    (["topo", "route", "ahbm_2sip", "sip0.cube0.pe0"], ["error: missing argument 'dst'"]),
])
def test_a_command_line_slip_reads_as_every_other_refusal(runner, args, words, monkeypatch):
    """typer printed these as its usage block and a boxed pydantic wording ('Invalid value for '--format':
    Value error, ...', 'Input should be a valid integer, unable to parse string as an integer', without the
    value); now one 'error:' line with the value, the closest choice and where the help is."""
    monkeypatch.setattr("sys.argv", ["kbfast", *args])       # the value typer does not keep is read from here
    err = refused(invoke(runner, *args), *words)
    assert "╭" not in err and "Usage:" not in err


def test_a_path_is_refused_as_a_path(runner, tmp_path):
    """'/nonexist' was refused as an unknown topology preset; a folder given for a topology or model file was 'no
    such file', and topo export --out FOLDER said 'the file exists'."""
    refused(invoke(runner, "topo", "show", tmp_path / "nonexist"), "nonexist: no such topology file",
            "hint: give a topology YAML, or a preset: ahbm_2sip")
    refused(invoke(runner, "topo", "show", tmp_path), f"{tmp_path}: a folder, not a topology file")
    refused(invoke(runner, "run", "model", tmp_path), f"{tmp_path}: a folder, not a model file")
    refused(invoke(runner, "topo", "export", "ahbm_2sip", "--out", tmp_path), f"--out {tmp_path}: a folder; give a "
            f"file name, e.g. {tmp_path / 'topology.yaml'}")


def test_a_trace_refuses_the_options_it_makes_meaningless(runner, tmp_path):
    """serve --trace with --rate or --prompt-len ran, and ignored them without a word."""
    trace = write(tmp_path, "t.csv", "arrival_s,prompt_len,output_len\n0,16,4\n")
    refused(invoke(runner, "serve", "llama32_1b", "--trace", trace, "--rate", "5", "--prompt-len", "7"),
            f"--trace {trace}: the file gives the requests, so --rate, --prompt-len would be ignored",
            "hint: drop --rate, --prompt-len, or --trace for Poisson arrivals")
    refused(invoke(runner, "serve", "llama32_1b", "--trace", trace, "--duration=5"), "so --duration would be ignored")


def test_a_sample_beyond_the_points_is_said(runner, tmp_path):
    """check --sample 1000000000 checked every point without a word (each one an exact replay)."""
    spec = write(tmp_path, "s.yaml", TWO_BATCHES)
    res = invoke(runner, "check", spec, "--sample", "50", "--out", tmp_path / "c.csv")
    assert res.exit_code == 0, res.output
    assert "note: --sample 50 is more than the 4 distinct points of two: checking every one" in flat(res.stderr)
