"""The one number format (kbfast.report.formats): times scaled to their value, fractions as percents; and
tables that fit the terminal without cutting a number (kbfast.report.explain.fit)."""

from __future__ import annotations

import ast
import io
import math
import re
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st
from rich.console import Console
from rich.table import Table

from kbfast.bench import BenchRow
from kbfast.bench.benchmarks import TARGETS
from kbfast.cli.bench import bench_table
from kbfast.report.explain import fit, narrow_table
from kbfast.report.tables import wrap_name, wrap_quantities
from kbfast.report.wrap import QuantityConsole, quantities
from kbfast.report.formats import (column_unit, csv_text, duration, figure, figures, in_unit, percent, time_unit,
                                   wall_time, with_unit)

PACKAGE = Path(__file__).resolve().parents[1] / "kbfast"


@pytest.mark.parametrize("ns, text", [
    (0, "0 ns"), (16, "16.0 ns"), (403.0, "403.0 ns"), (999.96, "1.000 µs"), (4213.4, "4.213 µs"),
    (20_054_080.0, "20.05 ms"), (1.2345e9, "1.234 s"), (4e12, "4,000 s"), (-3500, "-3.500 µs"),
    (float("nan"), "-"), (None, "-"),
])
def test_duration_scales_the_unit_to_the_value(ns, text):
    assert duration(ns) == text


@pytest.mark.parametrize("s, text", [(0.0, "0 s"), (0.04, "0 s"), (0.37, "0.4 s"), (9.94, "9.9 s"), (9.96, "10 s"),
                                      (16.4, "16 s"), (59.6, "1 min 00 s"), (186.0, "3 min 06 s"),
                                      (1640.0, "27 min 20 s"), (14_760.0, "4 h 06 min"), (-2.0, "0 s")])
def test_a_wall_clock_wait_reads_in_seconds_minutes_and_hours(s, text):
    assert wall_time(s) == text


def test_a_column_takes_one_unit_from_its_largest_value():
    assert time_unit([3385.0, 29_142.0]) == ("µs", 1e3)
    assert time_unit([16.0, 4e6]) == ("ms", 1e6)
    assert time_unit([]) == ("ns", 1.0)
    assert time_unit([float("nan"), 12.0]) == ("ns", 1.0)
    assert in_unit(3385.0, "µs") == "3.385"
    assert in_unit(403.0, "ns") == "403.0"
    assert in_unit(float("inf"), "ms") == "-"
    # a half in the last place rounds up whatever its binary neighbours: probe showed 204.5 ns as 0.204 µs
    # beside 199.5 ns as 0.200 µs
    assert [in_unit(v, "µs") for v in (204.5, 199.5, 364.5, 497.5)] == ["0.205", "0.200", "0.365", "0.498"]
    assert in_unit(1_234_567.25, "ns") == "1,234,567.3" and in_unit(-3.5, "µs") == "-0.004"


def test_percent():
    assert percent(0.919) == "91.9 %"
    assert percent(0.5, 2) == "50.00 %"
    assert percent(None) == "-"


@example(0.0625)        # below a nanosecond: "0.0625 ns", not "0.062 ns" (found by this test)
@given(st.floats(min_value=1e-3, max_value=1e15, allow_nan=False))
def test_duration_reads_back_within_its_digits(ns):
    """Four significant digits, ns to a tenth (the resolution of a column in ns)."""
    text = duration(ns)
    value, unit = text.rsplit(" ", 1)
    scale = {"ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit]
    back = float(value.replace(",", "")) * scale
    assert math.isclose(back, ns, rel_tol=1e-3, abs_tol=0.05 + 1e-9 if unit == "ns" and ns >= 1 else 0.0)
    assert unit == "s" or float(value.replace(",", "")) < 1000


# ---------------------------------------------------------------------------------------------------- figures
@pytest.mark.parametrize("key, value, label, text", [
    ("latency_ns", 20_054_080.0, "latency", "20.05 ms"),
    ("phase_end_ns[tile load]", 389.0, "phase_end[tile load]", "389.0 ns"),
    ("fast_wall_s", 0.357, "fast_wall", "357.0 ms"),
    ("mac_util", 0.8421, "mac_util", "84.2 %"),
    ("busy[dma_read]", 0.9993, "busy[dma_read]", "99.9 %"),
    ("bottleneck_utilization", 0.919, "bottleneck_utilization", "91.9 %"),
    ("macs_per_ns", 3449.27, "macs_per_ns", "3,449.3"),           # a rate, not a time
    ("tokens_per_s", 1234.5, "tokens_per_s", "1,234.5"),
    ("busbw_gbps", 0.001483, "busbw", "0.0015 GB/s"),               # not 0.0 (16 B in 10.8 µs)
    ("busbw_gbps", 0.0, "busbw", "0.0 GB/s"),
    ("effective_bw_gbps", 6.4, "effective_bw", "6.4 GB/s"),        # bytes, not bits: the unit says so
    ("rel_error", -0.0147, "rel_error", "-1.47 %"),
    ("n_tiles", 1048576, "n_tiles", "1,048,576"),
    ("staging", "load_ref", "staging", "load_ref"),
    ("under_tile", False, "under_tile", "False"),
    ("latency_lo_ns", float("nan"), "latency_lo", "-"),
    ("nbytes", 98304, "nbytes", "96 KiB"),                          # as --size takes it
    ("nbytes", 2000, "nbytes", "2,000 B"),
])
def test_figure_reads_its_unit_from_its_name(key, value, label, text):
    assert figure(key, value) == (label, text)


def test_csv_text_drops_float_noise_and_keeps_whole_numbers_whole():
    """search, serve and run model wrote 0.19770879315099998 where JSON and the sweep's tables round to 12
    significant digits; a nullable integer column beside blanks stays whole."""
    import pandas as pd
    df = pd.DataFrame({"x": [0.19770879315099998, 834901943.8374995], "n": pd.array([1536, None], "Int64")})
    assert csv_text(df) == "x,n\n0.197708793151,1536\n834901943.837,\n"
    assert df["x"].iloc[0] == 0.19770879315099998            # the caller's table is left as it was


def test_figures_keep_a_name_that_another_key_holds():
    assert figures({"contention_ns": 0.0, "contention": False, "latency_ns": 16.0}) == [
        ("contention time", "0 ns"), ("contention", "False"), ("latency", "16.0 ns")]


def test_a_column_unit_keeps_every_value_readable():
    assert column_unit([77.0, 15_626.5]) == "µs"                 # 0.077 µs keeps two digits
    assert column_unit([8.0, 8_259.0, -4.0]) == "ns"             # 0.008 µs would not: ns, still short
    assert column_unit([29.0, 288e6]) is None                   # no unit shows both: each cell its own
    assert column_unit([0.0, 0.0]) == "ns" and column_unit([]) == "ns"
    assert in_unit(29.0, None) == "29.0 ns" and in_unit(288e6, None) == "288.0 ms"
    assert with_unit("busy", "µs") == "busy µs" and with_unit("busy", None) == "busy"
    assert with_unit("latency", "ns", "\n") == "latency\nns"


def test_no_us_for_microseconds_anywhere_in_the_package():
    """Every string the package prints says µs; ``us`` only where a reference file's own text is parsed."""
    parsed = {r"-> ([0-9.]+) us"}                  # kbfast.calibrate reads the reference CSV's note
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in parsed \
                    and re.search(r"[\d}]\s?us\b|\(us\)|\bus/|\bin us\b", node.value):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert not found, found


# ------------------------------------------------------------------------------------------------------ fit
def _wide_table() -> Table:
    t = narrow_table("probe", "case", "n", "latency\nµs", "makespan\nµs", "eff\nGB/s", "util\nsingle", "status")
    for i in range(3):
        t.add_row(f"REMOTE_CUBE_PE_REMOTE_WORST_{i}", "128", "15,626.512", "215,626.512", "27,235.7", "83.1 %",
                  "retired")
    return t


def _render(renderable, width: int) -> str:
    console = QuantityConsole(width=width, record=True, file=io.StringIO())   # as the CLI prints
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("width", [200, 80, 60, 40])
def test_fit_never_cuts_a_number_or_a_status(width):
    console = Console(width=width, file=io.StringIO())
    text = _render(fit(console, _wide_table(), drop=["util single"]), width)
    assert max(map(len, text.splitlines())) <= width
    for cell in ("REMOTE_CUBE_PE_REMOTE_WORST_", "15,626.512", "215,626.512", "27,235.7", "retired"):
        assert len(re.findall(rf"(?<![\d,]){re.escape(cell)}", text)) == 3, (width, cell, text)
    if width == 80:                                  # one column left out, and said so
        assert "83.1 %" not in text and "left out at 80 columns: util single" in " ".join(text.split())
    if width <= 60:                                  # stacked: one block per row, a column per line
        assert re.search(r"^\s+makespan µs\s+215,626\.512\s*$", text, re.M) and "83.1 %" in text


def test_a_stacked_block_names_a_column_as_its_header_reads_whole():
    """A header wrap_name broke inside its word (``pe.`` / ``gemm_`` / ``macs_`` / ``per_`` / ``ns``) was named
    ``pe. gemm_ macs_ per_ ns`` in the stacked blocks of ``kbfast check gemm``."""
    console = Console(width=30, file=io.StringIO())
    t = narrow_table(None, "point", "\n".join(wrap_name("pe.gemm_macs_per_ns", 6)), "util\nsingle", "fast (µs)")
    t.add_row("1,433", "2,048", "83.1 %", "137.711" * 3)
    text = _render(fit(console, t), 30)
    assert re.search(r"^  pe\.gemm_macs_per_ns\s+2,048\s*$", text, re.M), text
    assert re.search(r"^  util single\s+83\.1 %\s*$", text, re.M), text


def test_fit_leaves_a_fitting_table_alone_and_wraps_only_text():
    console = Console(width=40, file=io.StringIO())
    t = narrow_table(None, "resource", "busy")
    t.add_row("sip0-1.cube10 r0c0 -> ucie-N.conn0 and a longer name", "18.9 %")
    text = _render(fit(console, t, wrap=("resource",)), 40)
    assert max(map(len, text.splitlines())) <= 40 and "18.9 %" in text and "resource" in text


@pytest.mark.parametrize("width", [80, 40])
def test_a_title_or_caption_wider_than_the_columns_wraps_at_the_terminal_not_the_columns(width):
    """rich wraps a table's title and caption within the table's own width; a narrow table's long title
    gets lines of its own instead, one line where the terminal has room, and wrapped between words where not."""
    console = Console(width=width, file=io.StringIO())
    title = "critical path (last PE back to launch), by part of the timeline"
    t = narrow_table(title, "part", "time ns", "share", caption="bound by: zero-load fabric transfers")
    t.add_row("fabric transfer", "1,010.9", "54.1 %")
    lines = _render(fit(console, t), width).splitlines()
    assert max(map(len, lines)) <= width and "1,010.9" in lines[-2]
    if width == 80:
        assert lines[0].strip() == title and lines[-1].strip() == "bound by: zero-load fabric transfers"
    else:
        header = next(i for i, line in enumerate(lines) if line.startswith("part "))
        assert header == 2 and " ".join(" ".join(lines[:header]).split()) == title
    short = narrow_table("parts", "part", "time ns", "share")        # a title that fits stays the table's
    short.add_row("fabric transfer", "1,010.9", "54.1 %")
    assert fit(console, short) is short and short.title == "parts"


def test_bench_table_scales_times():
    rows = [BenchRow("fast: the 4096^3 recurrence alone", 123.4, "µs", "", None),
            BenchRow("Llama-3-70B decode step, fast", 0.0234, "s", "<= 1 s", True),
            BenchRow("exact event rate", 23.456, "M events/s", ">= 10", True)]
    text = _render(bench_table(rows), 120)
    assert "123.4 µs" in text and "23.40 ms" in text and "23.46 M events/s" in text


def test_quantities_keep_a_number_with_its_comparator_and_unit():
    assert quantities(">= 1,000 Llama-3-70B candidates in <= 60 s") == [">= 1,000", "Llama-3-70B", "candidates",
                                                                         "in", "<= 60 s"]
    assert quantities("<= 0.25 s, topology build included") == ["<= 0.25 s,", "topology", "build", "included"]
    assert quantities(">= 20 M events/s, every scenario")[0] == ">= 20 M events/s,"
    assert quantities("<= 45 s (moonshot 15 s)") == ["<= 45 s", "(moonshot", "15 s)"]
    assert quantities("71.7 s; 88 timed") == ["71.7 s;", "88 timed"]
    assert quantities("100 points in 4 batches") == ["100 points", "in", "4 batches"]
    assert quantities("sweep seed36 --check 3 --overwrite") == ["sweep", "seed36", "--check 3", "--overwrite"]
    assert quantities("a --jobs 2 run 3 times") == ["a", "--jobs 2", "run", "3 times"]
    assert quantities("32x32x64 -> 1; 32x32x3072 -> 48") == ["32x32x64 -> 1;", "32x32x3072 -> 48"]
    assert quantities("sram 28.23 µs (hbm/tcm 1.589,") == ["sram", "28.23 µs", "(hbm/tcm", "1.589,"]
    # a colon closes a quantity: run --sensitivity put "(below 50" over "%: not", probe "at 16" over "KiB: all"
    assert quantities("busy (below 50 %: not a bound)") == ["busy", "(below", "50 %:", "not", "a", "bound)"]
    assert quantities("at 16 KiB: all cases") == ["at", "16 KiB:", "all", "cases"]
    assert wrap_quantities(">= 1,000 Llama-3-70B candidates in <= 60 s", 22) == \
        ">= 1,000 Llama-3-70B\ncandidates in <= 60 s"


@pytest.mark.parametrize("width", [80, 150])
def test_a_bench_target_or_detail_never_parts_a_number_from_its_comparator_or_unit(width):
    """The search's target wrapped in the bench table (``<= 60`` over ``s`` at 150 columns, ``<=`` over ``60 s``
    at 80, before), and the details (``in 0.12`` over ``s`` at 80): their lines break between quantities, at
    every width."""
    rows = [BenchRow("search, Llama-3-70B decode, the default 1,024 candidates (546 compiled), 2 processes", 857.5,
                     "candidates/min", TARGETS["search"].text, False, "71.7 s; 88 timed, 458 beaten by their bounds"),
            BenchRow("fast: one lrab all-reduce, 1024 SIPs, topology build included", 0.8, "s",
                     TARGETS["allreduce_1024"].text, False, "build 0.42 s, routes, generation and evaluation 1.53 s"),
            BenchRow("fast: mixed all-reduce grid, batched (topology x size x buffer kind x n_slots)", 2.969e5,
                     "points/min", TARGETS["mixed_grid"].text, False,
                     "576 distinct points in 0.12 s (best of 3 per topology), one symbolic build per topology")]
    console = QuantityConsole(width=width, file=io.StringIO())
    lines = _render(fit(console, bench_table(rows), wrap=("benchmark", "detail")), width).splitlines()
    assert max(map(len, lines)) <= width
    text = "\n".join(lines)
    assert "<= 60 s" in text and ">= 1,000" in text and "<= 0.25 s," in text
    header = next(line for line in lines if line.startswith("benchmark"))
    column = [line[header.index("target"):header.index("met")].strip() for line in lines]
    assert not any(re.search(r"(<=|>=|\d)$", cell) for cell in column), column
    details = [line[header.index("detail"):].strip() for line in lines[lines.index(header) + 2:]]
    assert not any(re.search(r"\d$", cell) or re.match(r"(s|ms|M)\b", cell) for cell in details), details
    assert "296,900 points/min" in text and "e+05" not in text


@pytest.mark.parametrize("lo, hi, labels", [(0.3, 0.9, {"0.3", "0.5", "0.9"}), (0.18, 2.0, {"0.2", "0.5", "1", "2"}),
                                            (0.5, 300.0, {"1", "10", "100"})])
def test_log_axes_read_in_plain_numbers(lo, hi, labels):
    """Within a decade every tick is labelled, within two the 2s and 5s, wider only the decades; never 10^x."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from kbfast.report.figures import plain_log_axis

    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    plain_log_axis(ax.xaxis, [lo, hi])
    fig.canvas.draw()
    shown = {t.get_text() for t in ax.get_xticklabels(minor=True) + ax.get_xticklabels() if t.get_text()
             and lo <= t.get_position()[0] <= hi}
    plt.close(fig)
    assert labels <= shown and not any("10^" in s or "$" in s for s in shown)
    if hi / lo >= 10:
        assert not shown & {"0.3", "0.4", "3", "4", "30"}


PROSE = ("fast: tcm 15.90 µs; hbm 25.26 µs; sram 28.23 µs (hbm/tcm 1.589, sram/tcm 1.776); a step 6.515 ms (fill "
         "and drain), among steps 6.516 ms; 32x32x64 -> 1; 32x32x3072 -> 48")
WHOLE = ["15.90 µs;", "25.26 µs;", "28.23 µs", "6.515 ms", "6.516 ms;", "32x32x64 -> 1;", "32x32x3072 -> 48"]


@pytest.mark.parametrize("width", range(32, 81, 8))
def test_printed_text_and_table_cells_wrap_between_quantities(width):
    """The command line's console (kbfast.report.wrap.QuantityConsole) wraps a printed line, and a table's text
    column, only between quantities: rich's own wrap put ``sram 28.23`` over ``µs`` in kbfast calibrate's checks
    at 80 columns, and ``among steps 6.516`` over ``ms`` in kbfast run model --pp 2's caption."""
    console = QuantityConsole(width=width, file=io.StringIO())
    table = narrow_table(None, "check", "detail")
    table.add_row("allreduce_buffer_kind_64k", PROSE)
    captioned = narrow_table("steps", "stage", "ends", caption=PROSE)     # a caption wider than its table
    captioned.add_row("0", "1.0 ms")
    for renderable in (PROSE, fit(console, table, wrap=("check", "detail")), fit(console, captioned)):
        lines = _render(renderable, width).splitlines()
        assert max(map(len, lines)) <= width
        assert all(any(q in line for line in lines) for q in WHOLE), lines
