"""``kbfast bench``: performance figures against the design targets (design §11)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.table import Table

from kbfast.bench import BENCHMARKS
from kbfast.cli.common import console, user_errors, writable
from kbfast.errors import KbfastError, did_you_mean


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
    table = Table("benchmark", "value", "unit", "target", "met", "detail", title="kbfast bench")
    for r in rows:
        met = "-" if r.ok is None else ("[green]yes[/]" if r.ok else "[red]no[/]")
        table.add_row(r.name, f"{r.value:,.4g}", r.unit, r.target, met, r.detail)
    console.print(table)
    pd.DataFrame([r.__dict__ for r in rows]).to_csv(out, index=False)
    console.print(f"figures written to {out}", soft_wrap=True)
