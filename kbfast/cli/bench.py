"""``kbfast bench``: performance figures against the design targets (docs/bench.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.table import Table

from kbfast.bench import BENCHMARKS, BenchRow, pairing
from kbfast.cli.common import console, user_errors, writable
from kbfast.errors import KbfastError, did_you_mean
from kbfast.report.tables import fit, narrow_table, quantities, wrap_quantities
from kbfast.report.formats import TIME_UNITS, duration


TARGET_WIDTH = 22   # the target column's lines: the longest target breaks into two, between its quantities


def bench_table(rows: list[BenchRow], width: int = 10_000) -> Table:
    """The figures, a time scaled to its value (``12.30 ms``), any other figure with its unit; a target in lines
    of at most ``TARGET_WIDTH`` characters, and the details in lines that fit beside the other columns at
    ``width`` characters, broken only between quantities: a number never leaves its comparator or unit."""
    table = narrow_table("kbfast bench", "benchmark", "value", "target", "met", "detail")
    table.columns[2].justify = table.columns[4].justify = "left"
    scale = dict(TIME_UNITS)
    values = [duration(r.value * scale[r.unit]) if r.unit in scale else f"{_figure(r.value)} {r.unit}" for r in rows]
    targets = [wrap_quantities(r.target, TARGET_WIDTH) for r in rows]
    detail_width = _detail_width(rows, width - sum(
        max(len(line) for c in [head, *cells] for line in c.split("\n")) + 1
        for head, cells in (("value", values), ("target", targets), ("met", ["yes"]))) - 1)
    for r, value, target in zip(rows, values, targets):
        met = "-" if r.ok is None else ("[green]yes[/]" if r.ok else "[red]no[/]")
        table.add_row(r.name, value, target, met, wrap_quantities(r.detail, detail_width))
    return table


def _figure(x: float) -> str:
    """A figure to four significant digits, without an exponent: ``2.969e+05`` is ``296,900``."""
    return f"{float(f'{x:.4g}'):,.0f}" if abs(x) >= 1e4 else f"{x:,.4g}"


def _detail_width(rows: list[BenchRow], room: int) -> int:
    """The detail column's width in ``room`` characters shared with the benchmark names: all of a detail when
    both fit, else half the room, never below the longest quantity (:func:`quantities`)."""
    whole = max((len(r.detail) for r in rows), default=0)
    names = max((len(r.name) for r in rows), default=0)
    if whole + 1 + names <= room:
        return max(whole, 1)
    least = max((len(q) for r in rows for q in quantities(r.detail)), default=1)
    return max(least, min(whole, room // 2))


def paired_table(comparison: pd.DataFrame, base: str, this: str, rounds: int) -> Table:
    """The paired figures: each side's mean, and how much slower or faster this tree is (a regression in
    red)."""
    table = narrow_table(f"kbfast bench, paired: {this} against {base}, {rounds} rounds alternated", "benchmark",
                         "base", "this", "change",
                         caption=f"change: slower or faster by the mean of the rounds (a rate's by its inverse); "
                                 f"over {pairing.REGRESSION - 1:.0%} slower is a regression")
    scale = dict(TIME_UNITS)
    for r in comparison.itertuples():
        value = (lambda v: duration(v * scale[r.unit])) if r.unit in scale else (lambda v: f"{v:,.4g} {r.unit}")
        pct = abs(r.slowdown - 1)
        change = "same" if pct < 0.0005 else f"{pct:.1%} {'slower' if r.slowdown > 1 else 'faster'}"
        table.add_row(r.name, value(r.base), value(r.this), f"[red]{change}[/]" if r.regression else change)
    return table


def _paired(vs: str, names: list[str], rounds: int, out: Path) -> None:
    """``--vs``: the benchmarks of this tree and of ``vs``, alternated (kbfast.bench.pairing)."""
    this = pairing.this_tree()
    with console.status(f"checking out {vs}"):
        base = pairing.base_tree(vs, this)
        theirs = pairing.benchmarks_of(base)
    missing = [n for n in names if n not in theirs]
    if missing:
        raise KbfastError(f"{base.label} has no benchmark {', '.join(missing)}; it has {', '.join(theirs)}\n"
                          "  hint: choose with --only among the benchmarks both have")
    with console.status("benchmarking") as status:
        runs = pairing.paired_runs(base, this, names, rounds, lambda what: status.update(f"benchmark: {what}"))
    comparison = pairing.compare(runs)
    console.print(fit(console, paired_table(comparison, base.label, this.label, rounds), wrap=("benchmark",)))
    runs.to_csv(out, index=False)
    console.print(f"every run's figures written to {out}", soft_wrap=True)


@user_errors
def bench(
    only: Annotated[list[str] | None, typer.Option("--only", help=f"Run only these: {', '.join(BENCHMARKS)}.")] = None,
    out: Annotated[Path, typer.Option(help="CSV file for the figures.")] = Path("results/bench.csv"),
    vs: Annotated[str | None, typer.Option(
        "--vs", help="Pair with this git revision: it is checked out in a worktree with its own Numba cache and "
                     "the two run alternated (a regression counts only when paired).")] = None,
    rounds: Annotated[int, typer.Option(help="With --vs: how many times each side runs.", min=1)] = 2,
) -> None:
    """Measure speed and memory against the design targets (docs/bench.md); print a table and write a CSV."""
    names = only or list(BENCHMARKS)
    for n in names:
        if n not in BENCHMARKS:
            raise KbfastError(f"unknown benchmark {n!r}: {did_you_mean(n, BENCHMARKS)}")
    writable(out, "--out")   # before the benchmarks run: minutes of work are not lost to a bad path
    if vs is not None:
        _paired(vs, names, rounds, out)
        return
    rows = []
    with console.status("benchmarking") as status:
        for n in names:
            status.update(f"benchmark: {n}")
            rows += BENCHMARKS[n]()
    console.print(fit(console, bench_table(rows, console.width), wrap=("benchmark",)))
    pd.DataFrame([r.__dict__ for r in rows]).to_csv(out, index=False)
    console.print(f"figures written to {out}", soft_wrap=True)
