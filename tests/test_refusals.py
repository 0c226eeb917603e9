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


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def refused(res, *fragments: str) -> str:
    """Exit 2, one 'error:' message on stderr holding every fragment, no traceback; returns the message."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    err = flat(res.stderr).strip()
    assert err.startswith("error:"), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


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
    refused(invoke(runner, *args), f"{p}: <file>: not UTF-8 text", f"at line {line}", "save the file as UTF-8")


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
     ["65,536 x 65,536 x 65,536 GEMM", "24.00 GiB in all", "HBM slice holds 6.00 GiB", "hbm.total_gib_per_cube"]),
    (["--m", "65536", "--n", "65536", "--k", "65536", "--exact"], ["24.00 GiB in all"]),
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
    from kbfast import budget
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
    refused(invoke(runner, "plot", swept / "results.parquet", "--y", "topology"), "no point has a number in 'topology'")


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
    refused(invoke(runner, "sweep", p, "--out", out), f"{out} already holds {name}", "--resume", "--overwrite")
    assert stray.read_text() == "mine"


# ------------------------------------------------------------------ smaller ones


def test_set_errors_name_the_flag(runner):
    """A bad --set value was blamed on the preset file."""
    err = refused(invoke(runner, "topo", "show", "ring6", "--set", "sips.count=0"),
                  "--set sips.count=0: sips.count: Input should be greater than 0 (got 0)")
    assert "ring6.yaml" not in err
    refused(invoke(runner, "run", "allreduce", "--n-slots", "0"), "--n-slots 0: ipcq.n_slots:", "whole number >= 1")
    refused(invoke(runner, "run", "pe2pe", "--buffer-kind", "dram"), "--buffer-kind dram: ipcq.buffer_kind:",
            "use 'tcm', 'sram' or 'hbm'")


def test_echoed_values_are_capped(runner, tmp_path):
    """A 5 MB value was printed whole in the message."""
    p = write(tmp_path, "t.yaml", "base: ring6\nsips: {count: '" + "9" * 5_000_000 + "', topology: ring_1d}\n")
    err = refused(invoke(runner, "topo", "show", p), f"{p}: sips.count:", "… (5,000,002 chars)")
    assert len(err) < 1000
