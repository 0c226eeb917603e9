"""``kbfast bench``: performance figures against the design targets (design §11)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.table import Table

from kbfast.bench import BENCHMARKS, BenchRow
from kbfast.cli.common import console, user_errors, writable
from kbfast.errors import KbfastError, did_you_mean
from kbfast.report.tables import fit, narrow_table
from kbfast.report.formats import TIME_UNITS, duration


def bench_table(rows: list[BenchRow]) -> Table:
    """The figures, a time scaled to its value (``12.30 ms``), any other figure with its unit."""
    table = narrow_table("kbfast bench", "benchmark", "value", "target", "met", "detail")
    table.columns[2].justify = table.columns[4].justify = "left"
    scale = dict(TIME_UNITS)
    for r in rows:
        met = "-" if r.ok is None else ("[green]yes[/]" if r.ok else "[red]no[/]")
        value = duration(r.value * scale[r.unit]) if r.unit in scale else f"{r.value:,.4g} {r.unit}"
        table.add_row(r.name, value, r.target, met, r.detail)
    return table


@user_errors
def bench(
    only: Annotated[list[str] | None, typer.Option("--only", help=f"Run only these: {', '.join(BENCHMARKS)}.")] = None,
    out: Annotated[Path, typer.Option(help="CSV file for the figures.")] = Path("results/bench.csv"),
) -> None:
    """Measure speed and memory against the design targets; print a table and write a CSV."""
    names = only or list(BENCHMARKS)
    for n in names:
        if n not in BENCHMARKS:
            raise KbfastError(f"unknown benchmark {n!r}: {did_you_mean(n, BENCHMARKS)}")
    writable(out, "--out")   # before the benchmarks run: minutes of work are not lost to a bad path
    rows = []
    with console.status("benchmarking") as status:
        for n in names:
            status.update(f"benchmark: {n}")
            rows += BENCHMARKS[n]()
    console.print(fit(console, bench_table(rows), wrap=("benchmark", "target", "detail")))
    pd.DataFrame([r.__dict__ for r in rows]).to_csv(out, index=False)
    console.print(f"figures written to {out}", soft_wrap=True)
