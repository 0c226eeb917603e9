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
from kbfast.report.tables import fit, narrow_table, wrap_quantities
from kbfast.report.formats import TIME_UNITS, duration


TARGET_WIDTH = 22   # the target column's lines: the longest target breaks into two, between its quantities


def bench_table(rows: list[BenchRow]) -> Table:
    """The figures, a time scaled to its value (``12.30 ms``), any other figure with its unit; a target in lines
    of at most ``TARGET_WIDTH`` characters that never part a number from its comparator or unit."""
    table = narrow_table("kbfast bench", "benchmark", "value", "target", "met", "detail")
    table.columns[2].justify = table.columns[4].justify = "left"
    for r in rows:
        met = "-" if r.ok is None else ("[green]yes[/]" if r.ok else "[red]no[/]")
        table.add_row(r.name, _value(r.value, r.unit), wrap_quantities(r.target, TARGET_WIDTH), met, r.detail)
    return table


def _value(x: float, unit: str) -> str:
    """A figure with its unit: a time scaled to its value (``12.30 ms``), any other to four significant digits
    and without an exponent (``296,900 points/min``, not ``2.969e+05``)."""
    scale = dict(TIME_UNITS)
    if unit in scale:
        return duration(x * scale[unit])
    return f"{float(f'{x:.4g}'):,.0f} {unit}" if abs(x) >= 1e4 else f"{x:,.4g} {unit}"


def paired_table(comparison: pd.DataFrame, base: str, this: str, rounds: int) -> Table:
    """The paired figures: each side's mean, and how much slower or faster this tree is (a regression in
    red)."""
    table = narrow_table(f"kbfast bench, paired: {this} against {base}, {rounds} rounds alternated", "benchmark",
                         "base", "this", "change",
                         caption=f"change: slower or faster by the mean of the rounds (a rate's by its inverse); "
                                 f"over {pairing.REGRESSION - 1:.0%} slower is a regression")
    for r in comparison.itertuples():
        pct = abs(r.slowdown - 1)
        change = "same" if pct < 0.0005 else f"{pct:.1%} {'slower' if r.slowdown > 1 else 'faster'}"
        table.add_row(r.name, _value(r.base, r.unit), _value(r.this, r.unit),
                      f"[red]{change}[/]" if r.regression else change)
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
    console.print(fit(console, bench_table(rows), wrap=("benchmark", "detail")))
    pd.DataFrame([r.__dict__ for r in rows]).to_csv(out, index=False)
    console.print(f"figures written to {out}", soft_wrap=True)
