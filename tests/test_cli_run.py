"""``kbfast run allreduce|pe2pe`` end to end through the typer app."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from kbfast.config.units import parse_size
from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.measure.rows import bound_ratio, tightness
from kbfast.report.formats import clean, ratio_text
from kbfast.errors import KbfastError
from kbfast.fast.evaluate import run_fast
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce, busbw_gbps
from conftest import flat, refused
import kbfast.cli.run as cli_run

PHASES = ("tile load", "P1 row reduce", "P2 column reduce", "P3 inter-SIP", "P4 column broadcast", "P5 row broadcast",
          "tile store")


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def _no_compiling(*kernels: str) -> None:
    raise AssertionError(f"a first run would compile {kernels} before the refusal")


def run(runner: CliRunner, *args: str):
    return runner.invoke(app, ["run", *args], catch_exceptions=False)


def run_json(runner: CliRunner, *args: str) -> dict:
    res = run(runner, *args, "--format", "json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def torus6_96k(runner: CliRunner) -> dict:
    """``--compare`` on torus6 at 96 KiB: the fluid row plus the exact latency and the error."""
    return run_json(runner, "allreduce", "--topology", "torus6", "--size", "96KiB", "--compare", "--method", "fluid")


# ----------------------------------------------------------------------------------------------------------------
def test_allreduce_json(runner: CliRunner) -> None:
    row = run_json(runner, "allreduce", "--topology", "torus6", "--size", "96KiB", "--method", "fluid")
    assert row["workload"] == "lrab" and row["mode"] == "fast" and row["method"] == "fluid" and row["tile_io"] is True
    assert row["nbytes"] == 96 * 1024 and row["n_ranks"] == 96      # pe0 of 16 cubes x 6 SIPs
    assert {"latency_ns", "busbw_gbps", "launch_ns", "latency_lo_ns", "latency_hi_ns", "contention"} <= set(row)
    assert [f"phase_end_ns[{p}]" for p in PHASES] == [k for k in row if k.startswith("phase_end_ns[")]
    ends = [row[f"phase_end_ns[{p}]"] for p in PHASES]
    assert ends == sorted(ends) and ends[-1] == pytest.approx(row["latency_ns"])
    assert row["latency_lo_ns"] <= row["latency_ns"] <= row["latency_hi_ns"]
    assert row["busbw_gbps"] == pytest.approx(busbw_gbps(96 * 1024, 96, row["latency_ns"]))
    # the same number as the Python API
    t = build_tables(load_system("torus6"))
    c = allreduce(t, Router(t), 96 * 1024, "lrab")
    assert row["latency_ns"] == clean(run_fast(c.program).agent_finish_ns.max() - c.launch_ns)   # as files hold it
    assert row["launch_ns"] == pytest.approx(c.launch_ns)
    assert 17_200 < row["latency_ns"] < 30_000
    # with the tile load and store (the default): 22 736.395 ns = 21 950.395 (IPCQ schedule) + 389 + 397
    assert row["latency_ns"] == pytest.approx(22_736.3950231, rel=1e-10)
    assert row["phase_end_ns[tile load]"] == pytest.approx(389.0)       # 5 + 98304 / 256 ns, every rank at once


def test_allreduce_no_tile_io(runner: CliRunner) -> None:
    """--no-tile-io drops the tile load and store: on the fast path, torus6 96 KiB is exactly the isolated
    load and store faster (the load 389 ns: 5 ns + 98304 / 256 GB/s, its response leaving when the controller took
    the last flit; the store 397 ns: 13 ns + 98304 / 256 GB/s); exact mode also drops the 8 ns the stores'
    router head flits cost the messages posted before them (tests/test_parity_collectives.py, P2)."""
    args = ("allreduce", "--topology", "torus6", "--size", "96KiB", "--method", "fluid")
    on, off = run_json(runner, *args, "--tile-io", "--compare"), run_json(runner, *args, "--no-tile-io", "--compare")
    assert on["tile_io"] is True and off["tile_io"] is False
    assert off["n_ops"] == on["n_ops"] - 2 * 96
    assert [k for k in off if k.startswith("phase_end_ns[")] == [f"phase_end_ns[{p}]" for p in PHASES[1:-1]]
    assert off["latency_ns"] == pytest.approx(21_950.3950231, rel=1e-10)
    assert on["latency_ns"] - off["latency_ns"] == pytest.approx(389.0 + 397.0)
    assert on["exact_latency_ns"] - off["exact_latency_ns"] == pytest.approx(389.0 + 397.0 + 8.0)
    bad = run(runner, *args, "--tile-io=no")
    assert bad.exit_code == 2 and "does not take a value" in flat(bad.stderr) and "Traceback" not in bad.output


def test_compare_table_is_titled_by_both_modes(runner: CliRunner) -> None:
    """--compare prints the fast row with the exact latency beside it: its title names both modes."""
    res = run(runner, "pe2pe", "--hop", "h3", "--size", "4KiB", "--compare")
    assert res.exit_code == 0, res.stderr
    assert "pe2pe_h3 (fast vs exact)" in res.stdout and "exact_latency" in res.stdout
    assert not re.search(r"^mode\s", res.stdout, re.M)     # "mode fast" under that title read as a contradiction


def test_allreduce_compare(torus6_96k: dict) -> None:
    row = torus6_96k
    assert row["mode"] == "fast" and "exact_latency_ns" in row
    assert row["rel_error"] == pytest.approx((row["latency_ns"] - row["exact_latency_ns"]) / row["exact_latency_ns"])
    assert abs(row["rel_error"]) <= 0.05                        # measured -0.151 % (with tile I/O; -0.119 % without)
    assert row["latency_lo_ns"] <= row["exact_latency_ns"] <= row["latency_hi_ns"]


def test_allreduce_exact(runner: CliRunner, torus6_96k: dict) -> None:
    row = run_json(runner, "allreduce", "--topology", "torus6", "--size", "96KiB", "--exact")
    assert row["mode"] == "exact"
    assert "latency_lo_ns" not in row and "rel_error" not in row
    assert row["latency_ns"] == pytest.approx(torus6_96k["exact_latency_ns"], rel=1e-12)
    assert row[f"phase_end_ns[{PHASES[-1]}]"] == pytest.approx(row["latency_ns"])


def test_allreduce_buffer_kind_and_slots(runner: CliRunner) -> None:
    args = ("allreduce", "--topology", "torus6", "--size", "16KiB", "--method", "fluid")
    tcm = run_json(runner, *args)
    sram = run_json(runner, *args, "--buffer-kind", "sram", "--n-slots", "2")
    assert sram["latency_ns"] > tcm["latency_ns"]
    # the options are config overrides: the API with the same overrides gives the same number
    t = build_tables(load_system("torus6", overrides={"ipcq.buffer_kind": "sram", "ipcq.n_slots": 2}))
    c = allreduce(t, Router(t), 16 * 1024, "lrab")
    assert set(c.program.channels.n_slots) == {2} and set(c.program.channels.kind) == {1}
    assert sram["latency_ns"] == pytest.approx(run_fast(c.program).agent_finish_ns.max() - c.launch_ns, rel=1e-12)


def test_allreduce_ring_algorithm(runner: CliRunner) -> None:
    # ring over every PE of ahbm_2sip is 256 ranks and ~200k ops (about 20 s on the fast path); the
    # cube_pe0 ranks (32) exercise the same code path.
    row = run_json(runner, "allreduce", "--algorithm", "ring", "--topology", "ahbm_2sip", "--size", "4KiB",
                   "--ranks", "cube_pe0")
    assert row["workload"] == "ring" and row["n_ranks"] == 32 and row["nbytes"] == 4096
    assert [k for k in row if k.startswith("phase_end_ns[")] == [f"phase_end_ns[{p}]" for p in
                                                                 ("tile load", "ring", "tile store")]
    assert row["phase_end_ns[tile store]"] == pytest.approx(row["latency_ns"])
    assert row["latency_lo_ns"] <= row["latency_ns"] <= row["latency_hi_ns"]


def test_allreduce_table_output(runner: CliRunner) -> None:
    res = run(runner, "allreduce", "--topology", "ahbm_2sip", "--size", "4KiB")
    assert res.exit_code == 0, res.stderr
    assert "lrab (fast)" in res.stdout and re.search(r"busbw +[\d.]+ GB/s", res.stdout)
    assert re.search(r"^latency\s+\d+\.\d+ µs$", res.stdout, re.M)               # the unit with the value
    assert "phase_end[tile load]" in res.stdout and "phase_end[tile store]" in res.stdout   # not markup
    assert re.search(r"tile_io\s+True", res.stdout)
    # the same link of both SIPs is one row, which the table says
    assert re.search(r"^sip0-1\.cube\d+ ", res.stdout, re.M)
    assert "sip0-1.…: the same resource in each of those SIPs, each as busy" in res.stdout


def cells(text: str) -> list[str]:
    """The numbers of ``text``, each with its unit or percent sign, but the wall times (they vary)."""
    return re.findall(r"-?[\d,]+\.\d+(?: (?:ns|µs|ms|s|%))?", "\n".join(
        line for line in text.splitlines() if not line.startswith(("fast_wall", "exact_wall"))))


@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("args", [("allreduce",), ("pe2pe", "--hop", "h5", "--raw-dma"), ("collective", "--op", "all_to_all"),
                                  ("gemm", "--m", "4096", "--n", "4096", "--k", "4096")])
def test_run_tables_fit_and_keep_numbers_whole(terminal, args: tuple[str, ...], columns: int) -> None:
    """Every table of kbfast run at 80 and 60 columns: no line wider, the same numbers as on a wide terminal
    (none split or cut), times scaled to their value and fractions of a whole as percents."""
    wide = run(terminal(200), *args)
    res = run(terminal(columns), *args)
    assert res.exit_code == 0 == wide.exit_code, res.stderr
    assert max(map(len, res.stdout.splitlines())) <= columns
    assert sorted(cells(res.stdout)) == sorted(cells(wide.stdout))
    assert " us" not in res.stdout and "(us)" not in res.stdout


def test_gemm_prints_times_scaled_and_fractions_as_percents(terminal) -> None:
    """A 4096^3 GEMM: 20.19 ms, not 20,190,016.0 ns; mac_util and busy[...] in percent, as every command."""
    res = run(terminal(80), "gemm", "--m", "4096", "--n", "4096", "--k", "4096")
    assert res.exit_code == 0, res.stderr
    rows = dict(re.findall(r"^(\S+)\s+(\S.*?)\s*$", res.stdout, re.M))
    assert rows["latency"] == "20.19 ms" and rows["window"] == "20.05 ms" and "20,190,016" not in res.stdout
    assert rows["mac_util"] == "83.7 %" and rows["busy[dma_read]"].endswith(" %")
    assert all(rows[f"busy[{r}]"].endswith(" %") for r in ("tcm_read", "compute", "tcm_write", "dma_write"))


def test_unknown_algorithm(runner: CliRunner) -> None:
    res = run(runner, "allreduce", "--algorithm", "lrap", "--size", "4KiB")
    assert res.exit_code == 2
    err = flat(res.stderr)
    assert "unknown all-reduce algorithm 'lrap'" in err and "did you mean 'lrab'" in err
    assert "Traceback" not in res.output


# ----------------------------------------------------------------------------------------------------------------
def _csv(res) -> dict:
    assert res.exit_code == 0, res.stderr
    df = pd.read_csv(io.StringIO(res.stdout))
    assert len(df) == 1
    return df.iloc[0].to_dict()


def test_pe2pe_csv(runner: CliRunner) -> None:
    ipcq = _csv(run(runner, "pe2pe", "--hop", "h3", "--size", "4KiB", "--format", "csv"))
    raw = _csv(run(runner, "pe2pe", "--hop", "h3", "--size", "4KiB", "--raw-dma", "--format", "csv"))
    # a raw DMA says so, and has no IPCQ settings to show
    assert ipcq["workload"] == "pe2pe_h3" and raw["workload"] == "pe2pe_h3_dma" and ipcq["nbytes"] == 4096
    assert ipcq["buffer_kind"] == "tcm" and "buffer_kind" not in raw and "n_slots" not in raw
    assert {"latency_ns", "latency_lo_ns", "latency_hi_ns", "contention", "contention_ns"} <= set(ipcq)
    assert "busbw_gbps" not in ipcq            # a point-to-point transfer has no bus bandwidth
    # exact-mode values (test_calibration_collectives): IPCQ 116.625, raw DMA 129.5; the fast path is exact here
    assert ipcq["latency_ns"] == 116.625 and raw["latency_ns"] == 129.5
    assert ipcq["n_ops"] == 4 and raw["n_ops"] == 4


def test_pe2pe_exact_and_no_consume(runner: CliRunner) -> None:
    ex = run_json(runner, "pe2pe", "--hop", "h3", "--size", "4KiB", "--exact")
    nc = run_json(runner, "pe2pe", "--hop", "h3", "--size", "4KiB", "--no-consume", "--compare")
    assert ex["mode"] == "exact" and ex["latency_ns"] == 116.625
    assert nc["latency_ns"] == 116.625 - 8.0                   # no slot read: 4096 / 512
    assert nc["rel_error"] == 0.0


def test_pe2pe_store_alone_is_one_dma_write_and_needs_raw_dma(runner: CliRunner) -> None:
    """--raw-dma --no-load times the store into the peer's slice alone: from the launch, exactly one DMA
    write's issue-to-response latency (no start cost before the issue), below the load-then-store."""
    from kbfast import Router, build_tables, load_system
    from kbfast.exact import run_exact
    from kbfast.ir import ProgramBuilder
    from kbfast.topology.names import hbm_ctrl, pe_block
    from kbfast.workloads.collectives import hop_endpoints

    t = build_tables(load_system())
    s, d = hop_endpoints(t, "h3")
    b = ProgramBuilder(t, Router(t), name="one write")
    w = b.dma(b.pe_agent(pe_block(t, *s)), hbm_ctrl(t, *d), 4096, write=True)
    one_write = run_exact(b.build()).op_latency_ns(w)
    store = run_json(runner, "pe2pe", "--hop", "h3", "--size", "4KiB", "--raw-dma", "--no-load", "--compare")
    both = run_json(runner, "pe2pe", "--hop", "h3", "--size", "4KiB", "--raw-dma", "--exact")
    assert store["latency_ns"] == store["exact_latency_ns"] == one_write < both["latency_ns"]
    res = run(runner, "pe2pe", "--hop", "h3", "--no-load")
    assert res.exit_code == 2 and "add --raw-dma" in flat(res.stderr)


def test_run_collective_json_carries_nccl_tests_figures(runner: CliRunner) -> None:
    """kbfast run collective: latency, algbw = size / latency, busbw = algbw x (n-1)/n for a reduce-scatter,
    the bounds, and under --compare the exact latency and the error; the same row as the registry's."""
    row = run_json(runner, "collective", "--op", "reduce_scatter", "--size", "256KiB", "--ranks", "cube_pe0",
                   "--compare", "--method", "fluid")
    assert row["workload"] == "reduce_scatter ring_pipe" and row["n_ranks"] == 32
    assert row["algbw_gbps"] == pytest.approx(256 * 1024 / row["latency_ns"], rel=1e-9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 31 / 32, rel=1e-9)
    assert row["latency_lo_ns"] <= row["exact_latency_ns"] <= row["latency_hi_ns"]
    assert abs(row["rel_error"]) <= 0.05
    assert {"phase_end_ns[tile load]", "phase_end_ns[reduce-scatter]", "phase_end_ns[tile store]"} <= set(row)


def test_run_collective_takes_a_list_of_pes_and_refuses_bad_ones(runner: CliRunner) -> None:
    row = run_json(runner, "collective", "--op", "broadcast", "--ranks", "sip0.cube0.pe0,sip1.cube5.pe3,sip0.cube2.pe1",
                   "--size", "64KiB", "--exact")
    assert row["n_ranks"] == 3 and row["workload"] == "broadcast chain" and row["busbw_gbps"] == row["algbw_gbps"]
    for args, text in ((("--op", "all_reduce", "--algorithm", "lrab", "--ranks", "sip_pe0"), "lrab runs on pe0"),
                       (("--op", "gather"), "unknown collective operation 'gather'"),
                       (("--ranks", "sip0.cube0.pe0,sip7.cube0.pe0"), "'sip7.cube0.pe0' is not a PE"),
                       (("--op", "all_gather", "--n-slots", "1"), "ipcq.n_slots=1: ring_pipe")):
        res = run(runner, "collective", *args)
        assert res.exit_code == 2 and text in flat(res.stderr), (args, res.stderr)


def test_pe2pe_unknown_hop(runner: CliRunner) -> None:
    res = run(runner, "pe2pe", "--hop", "h9", "--size", "4KiB")
    assert res.exit_code == 2 and "unknown hop class 'h9'" in flat(res.stderr)


# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "nbytes"), [
    ("4096", 4096), ("4096B", 4096), ("4KiB", 4096), ("4kib", 4096), ("4K", 4096), ("4KB", 4000),
    ("96KiB", 98304), ("96KB", 96000), ("1MiB", 1 << 20), ("1.5KiB", 1536), (" 2 KiB ", 2048),
])
def test_parse_size(text: str, nbytes: int) -> None:
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["4XB", "KiB", "-4KiB", "1.3B", "", "4 Ki B"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(KbfastError):
        parse_size(text)


@pytest.mark.parametrize(("size", "nbytes"), [("2048", 2048), ("2KiB", 2048), ("2KB", 2000)])
def test_size_suffixes_on_the_command_line(runner: CliRunner, size: str, nbytes: int) -> None:
    row = run_json(runner, "pe2pe", "--hop", "h1", "--size", size)
    assert row["nbytes"] == nbytes


@pytest.mark.parametrize("command", ["allreduce", "pe2pe"])
@pytest.mark.parametrize("size", ["4XB", "0", "1.5B"])
def test_bad_size_exits_2(runner: CliRunner, command: str, size: str) -> None:
    res = run(runner, command, "--size", size)
    assert res.exit_code == 2, res.output
    err = flat(res.stderr)
    assert err.startswith("error:")
    assert ("not understood" in err) or ("must be > 0" in err) or ("whole" in err)
    assert "Traceback" not in res.output


def test_gemm_reference_case(runner) -> None:
    """kbfast run gemm: the reference's 32x3072x32 load_ref case (tests/test_gemm_pipeline.py derives 971 ns)."""
    row = run_json(runner, "gemm", "--m", "32", "--n", "32", "--k", "3Ki", "--staging", "load_ref", "--compare")
    assert row["workload"] == "gemm" and row["n_tiles"] == 48 and row["under_tile"] is False
    assert row["window_ns"] == 971.0 and row["latency_ns"] == 1744.0 == row["exact_latency_ns"]
    assert row["bound_stage"] == "dma_read" and 0.0 < row["mac_util"] < 1.0
    assert all(0.0 <= row[f"busy[{r}]"] <= 1.0 for r in ("dma_read", "tcm_read", "compute", "tcm_write", "dma_write"))


def test_gemm_bad_input_names_the_value(runner) -> None:
    res = run(runner, "gemm", "--staging", "load_both")
    assert res.exit_code == 2 and "staging 'load_both' is not one of ref_ref, load_ref, load_load" in res.output
    res = run(runner, "gemm", "--pe", "sip0.cube0.pe99")
    assert res.exit_code == 2 and "--pe 'sip0.cube0.pe99' is not a PE of this system" in res.output
    res = run(runner, "gemm", "--k", "3x")
    assert res.exit_code == 2 and "--k '3x' is not a positive integer" in res.output


def test_gemm_estimate_says_so(runner) -> None:
    """Above 65,536 tiles with C writes meeting the reads and a PC read/write turnaround (no steady state), the
    max-plus estimate is optimistic: the row says so (method, warning, a lower bound and no upper one), and the
    table has a note line below it."""
    args = ("gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--staging", "ref_ref",
            "--set", "hbm.switch_penalty_ns=2")
    row = run_json(runner, *args)
    assert row["method"] == "maxplus_estimate" and row["latency_lo_ns"] == row["latency_ns"]
    assert row["latency_hi_ns"] is None and "no upper bound" in row["warning"]
    out = flat(run(runner, *args).stdout)
    assert "note: maxplus_estimate:" in out and "lower bound" in out
    assert "note:" not in flat(run(runner, "gemm").stdout)


def tight_limit() -> dict:
    """A memory limit 20 MiB above what this process holds: any stage estimated above that is refused."""
    from kbfast.config import budget
    return {budget.ENV: f"{budget.rss_bytes() // 2 ** 20 + 20}MiB"}


def test_gemm_compare_keeps_the_fast_half(runner) -> None:
    """When the exact half is refused (here over the memory limit), the fast row is printed first, then the
    refusal, exit 2: nothing computed is lost."""
    res = runner.invoke(app, ["run", "gemm", "--k", "4Mi", "--compare", "--format", "csv"], env=tight_limit())
    assert res.exit_code == 2 and "the Program of the 32 x 32 x 4,194,304 GEMM" in flat(res.stderr)
    row = pd.read_csv(io.StringIO(res.stdout))
    assert row["method"].tolist() == ["maxplus"] and row["latency_ns"].iloc[0] > 0 and "exact_latency_ns" not in row


def test_model_compare_keeps_the_fast_half(runner) -> None:
    res = runner.invoke(app, ["run", "model", "llama32_1b", "--phase", "prefill", "--seq", "64", "--compare",
                              "--collective", "lrab", "--format", "json"], env=tight_limit())
    assert res.exit_code == 2 and "the exact Program of 'layer'" in flat(res.stderr), res.output
    rep = json.loads(res.stdout)
    assert rep["inputs"]["modes"] == ["fast"] and rep["step"]["latency_ns"] > 0


@pytest.mark.parametrize("command", ["allreduce", "pe2pe", "gemm", "model"])
def test_exact_and_compare_together_are_refused(runner: CliRunner, command: str) -> None:
    args = [command, *(["llama32_1b"] if command == "model" else []), "--exact", "--compare"]
    res = run(runner, *args)
    assert res.exit_code == 2 and "exclude each other" in flat(res.stderr), res.output


@pytest.mark.parametrize("command", ["allreduce", "collective", "pe2pe", "model"])
def test_a_method_with_exact_is_refused(runner: CliRunner, command: str) -> None:
    """--method chooses the fast path's point; --exact runs no fast path, so the two together are a slip, refused
    before any work, with both fixes named.  With --compare the method is the fast half's."""
    args = [command, *(["llama32_1b"] if command == "model" else []), "--exact", "--method", "fluid"]
    res = run(runner, *args)
    assert res.exit_code == 2, res.output
    assert "--method fluid: it chooses how the fast path makes its point" in flat(res.stderr)
    assert "drop --method, or use --compare for both" in flat(res.stderr)


def test_zero_ring_depth_is_refused_not_replaced(runner: CliRunner) -> None:
    """--n-slots 0 used to run as the default 4: it now reaches the schema, which names the key."""
    res = run(runner, "allreduce", "--n-slots", "0")
    err = flat(res.stderr)
    assert res.exit_code == 2 and "ipcq.n_slots" in err and "whole number >= 1" in err, res.output


@pytest.mark.parametrize("ranks,hint", [("nosuch", ""), ("all_pe", " hint: did you mean 'all_pes'?")])
def test_unknown_ranks_are_refused(runner: CliRunner, ranks: str, hint: str) -> None:
    """--ranks nosuch ran as all PEs."""
    refused(run(runner, "allreduce", "--algorithm", "ring", "--ranks", ranks),
            f"ranks '{ranks}' is not a set of ranks: cube_pe0 (pe0 of every cube), all_pes (every PE), sip_pe0 (pe0 of "
            f"cube 0 of every SIP) or a list of PEs (sip0.cube0.pe0,sip1.cube0.pe0){hint}")
    with pytest.raises(KbfastError, match="is not a set of ranks"):
        t = build_tables(load_system("ring6"))
        allreduce(t, Router(t), 1024, "ring", ranks)


def test_allreduce_beyond_an_hbm_slice_is_refused(runner: CliRunner) -> None:
    """run allreduce --size 64GiB ran, though each rank keeps its 64 GiB tile in a 6 GiB HBM slice (run model
    refuses the same with the same check, kbfast.config.budget.check_hbm_slice)."""
    refused(run(runner, "allreduce", "--size", "64GiB"),
            "--size 64GiB: an all-reduce of 64 GiB per rank does not fit: each rank holds its tile, 64 GiB in all, "
            "and its HBM slice holds 6 GiB", "hint: use at most 6 GiB per rank")
    t = build_tables(load_system("ring6"))
    with pytest.raises(KbfastError, match="an all-reduce of 7 GiB per rank does not fit"):
        allreduce(t, Router(t), 7 << 30, "ring")


@pytest.mark.parametrize("flag,name", [("--b-from", "nonsense"), ("--b-from", "sip0.cube0.pe9"),
                                       ("--pe", "sip3.cube0.pe1")])
def test_gemm_pe_names_the_flag_and_the_value(runner: CliRunner, monkeypatch, flag: str, name: str) -> None:
    """--b-from nonsense reported "unknown node '.hbm_ctrl.nonsense'", a name the user never wrote; the
    refusal comes before a first run would compile anything (it came after, on a fresh machine)."""
    monkeypatch.setattr(cli_run, "first_run", _no_compiling)
    err = refused(run(runner, "gemm", flag, name), f"{flag} '{name}' is not a PE of this system",
                  "hint: a PE is sipS.cubeC.peP with S < 2, C < 16, P < 8")
    assert "hbm_ctrl" not in err and "pe_dma" not in err


@pytest.mark.parametrize("args,fragment", [
    (["--layout", "tp_nosuch"], "unknown layout 'tp_nosuch'"), (["--layers", "81"], "--layers 81"),
    (["--method", "exact"], "fast method 'exact'"),
    (["--batch", "64", "--kv-len", "100000"], "does not fit")])
def test_model_input_is_refused_before_compiling(runner: CliRunner, monkeypatch, args: list[str],
                                                 fragment: str) -> None:
    """A model step's bad input is refused before a first run compiles (kbfast.measure.model.plan_step)."""
    monkeypatch.setattr(cli_run, "first_run", _no_compiling)
    refused(run(runner, "model", "llama3_70b", *args), fragment)


def test_a_loose_bound_is_marked_with_its_ratio(runner, terminal) -> None:
    """Every printed bound is within 4x of its point or marked loose with its ratio (docs/fast_path.md §4, "How
    tight the bounds are"): the flat ring all-reduce over every PE has an upper bound hundreds of times its
    58 µs point; a 256x256x1024 GEMM's bounds are within 2.1x, the torus6 all-reduce's within 1.3x."""
    ring = ("allreduce", "--algorithm", "ring", "--size", "4KiB")
    row = run_json(runner, *ring)
    assert row["bounds_loose"] is True
    assert row["bound_ratio"] == pytest.approx(max(row["latency_hi_ns"] / row["latency_ns"],
                                                   row["latency_ns"] / row["latency_lo_ns"]))
    assert row["bound_ratio"] > 100
    gemm = run_json(runner, "gemm", "--m", "256", "--n", "256", "--k", "1024")
    assert gemm["bounds_loose"] is False and gemm["bound_ratio"] <= 2.1
    text = run(terminal(80), *ring).stdout
    assert re.search(rf"^bound_ratio\s+{round(row['bound_ratio']):,}x loose$", text, re.M), text
    assert "bounds_loose" not in text                              # the ratio's text says it
    tight = run_json(runner, "allreduce", "--topology", "torus6", "--size", "96KiB")
    assert tight["bounds_loose"] is False and 1.0 <= tight["bound_ratio"] <= 4.0


@pytest.mark.parametrize(("lo", "point", "hi", "ratio", "text"), [
    (10.0, 10.0, 10.0, 1.0, "1.0x"), (5.0, 10.0, 20.0, 2.0, "2.0x"), (1.0, 10.0, 12.0, 10.0, "10.0x loose"),
    (9.0, 10.0, 4840.0, 484.0, "484x loose"), (10.0, 10.0, 40.0, 4.0, "4.0x")])
def test_bound_ratio_by_hand(lo: float, point: float, hi: float, ratio: float, text: str) -> None:
    """max(upper / point, point / lower); loose strictly beyond 4."""
    assert bound_ratio(lo, point, hi) == pytest.approx(ratio)
    assert tightness(lo, point, hi) == {"bound_ratio": pytest.approx(ratio), "bounds_loose": ratio > 4.0}
    assert ratio_text(bound_ratio(lo, point, hi)) == text
    assert tightness(float("nan"), point, hi) == {} and ratio_text(float("nan")) == "-"
