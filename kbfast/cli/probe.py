"""``kbfast probe``: the probe catalogue (spec_pe §10, §11.6)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from kbfast.cli.common import (OutputFormat, SetOpt, check_modes, console, err_console, first_run, load,
                               positive_size, user_errors)
from kbfast.config.units import format_size
from kbfast.errors import KbfastError
from kbfast.exact import run_exact
from kbfast.report.trace import write_trace
from kbfast.probe import ProbesStopped, check_invariants, exact_evaluator, fast_evaluator, fluid_evaluator, run_probes
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.probes import DEFAULT_PROBE_BYTES, SWEEP_SIZES, build_catalogue, select


class FastMethod(str, Enum):
    hybrid = "hybrid"
    fluid = "fluid"


# The fast path's method per row (kbfast.hybrid), short enough for the table.
METHOD_SHORT = {"closed form": "closed", "exact replay": "replay", "fluid": "fluid"}


def _short_ns(x: float) -> str:
    """A bound in the compare table: ``516``, ``78.9k``, ``17.9M`` (full values in csv/json)."""
    return f"{x:.0f}" if x < 1e4 else f"{x / 1e3:.1f}k" if x < 1e6 else f"{x / 1e6:.1f}M"


def probe(
    case: Annotated[list[str] | None, typer.Option("--case", help="Case name (repeatable; default: all).")] = None,
    size: Annotated[list[str] | None, typer.Option("--size", help="Bytes per issuer, e.g. 16KiB (repeatable).")] = None,
    sweep: Annotated[bool, typer.Option(help="Run the utilisation sweep sizes 4 KiB .. 1 MiB.")] = False,
    exact: Annotated[bool, typer.Option("--exact", help="Use the exact flit-level replay (default: fast path).")] = False,
    compare: Annotated[bool, typer.Option("--compare", help="Fast path plus exact replay, with the error.")] = False,
    method: Annotated[FastMethod, typer.Option(
        "--method", help="Fast path: hybrid (replay a small contended case exactly) or fluid (never replay).")
    ] = FastMethod.hybrid,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="table, csv or json")] = OutputFormat.table,
    topology: Annotated[str | None, typer.Option(help="Preset name or topology YAML.")] = None,
    sets: SetOpt = None,
    list_cases: Annotated[bool, typer.Option("--list", help="List the cases and exit.")] = False,
    trace: Annotated[Path | None, typer.Option(help="Write a Perfetto trace JSON of one case (exact mode).")] = None,
) -> None:
    """Run named traffic scenarios and check kernbench's probe invariants (exit 1 if one fails)."""
    t = build_tables(load(topology, sets))
    router = Router(t)
    catalogue = build_catalogue(t, router)
    if list_cases:
        for c in catalogue.values():
            console.print(f"{c.name:28s} {c.group:14s} {c.n_issuers:4d} issuer(s)  {c.description}")
        return
    check_modes(exact, compare)
    sizes = [positive_size(s) for s in size] if size else ([*SWEEP_SIZES] if sweep else [DEFAULT_PROBE_BYTES])
    chosen = select(catalogue, case)
    if trace is not None:
        if len(chosen) != 1 or len(sizes) != 1:
            raise KbfastError("--trace needs exactly one --case and one --size")
        write_trace(run_exact(chosen[0].program(t, router, sizes[0])), trace)
        err_console.print(f"trace written to {trace} (open it in ui.perfetto.dev)")
    evaluator = exact_evaluator if exact else (fast_evaluator if method is FastMethod.hybrid else fluid_evaluator)
    first_run("exact", *(() if exact else ("fast",)))      # the fast path replays small contended cases exactly
    try:
        df, stopped = run_probes(t, router, chosen, sizes, evaluator, compare=compare and not exact), None
    except ProbesStopped as err:           # print the cases that finished, then the refusal (exit 2)
        if err.finished.empty:
            raise err.cause from None
        df, stopped = err.finished, err.cause
    checks = check_invariants(df)
    if fmt is OutputFormat.csv:
        sys.stdout.write(df.to_csv(index=False))
    elif fmt is OutputFormat.json:
        print(json.dumps({"rows": json.loads(df.to_json(orient="records")),
                          "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in checks]},
                         indent=2))
    else:
        mode = "exact replay" if exact else ("fast path vs exact" if compare else "fast path")
        side_by_side = compare and not exact
        if side_by_side:   # the fast/exact comparison only; latency and utilisation are in the plain view and csv/json
            table = Table("case", "size", "n", "fast ns", "exact ns", "error", "lo..hi ns", "method",
                          title=f"probe ({mode})", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for col in table.columns[1:]:
                col.no_wrap = True      # numbers stay whole; a long case name folds
            table.columns[0].overflow = "fold"
            for _, r in df.iterrows():
                has_bounds = "makespan_lo_ns" in r and r["makespan_lo_ns"] == r["makespan_lo_ns"]
                table.add_row(r["case"], format_size(r["nbytes"]), str(r["n_issuers"]), f"{r['makespan_ns']:,.1f}",
                              f"{r['exact_makespan_ns']:,.1f}", f"{100 * r['rel_error']:+.2f}%",
                              f"{_short_ns(r['makespan_lo_ns'])}..{_short_ns(r['makespan_hi_ns'])}" if has_bounds else "-",
                              METHOD_SHORT.get(r.get("method"), "-"))
        else:
            table = Table("case", "size", "n", "latency\nns", "makespan\nns", "eff\nGB/s", "util\nsingle",
                          "util\naggr", title=f"probe ({mode})", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for col in table.columns[1:]:
                col.no_wrap = True      # numbers stay whole; a long case name folds
            table.columns[0].overflow = "fold"
            for _, r in df.iterrows():
                table.add_row(r["case"], format_size(r["nbytes"]), str(r["n_issuers"]), f"{r['latency_ns']:.1f}",
                              f"{r['makespan_ns']:.1f}", f"{r['effective_bw_gbps']:.1f}",
                              f"{100 * r['util_single']:.1f}%", f"{100 * r['util_aggregate']:.1f}%")
        console.print(table)
        for c in checks:
            mark = "[green]\\[v] PASS[/]" if c.passed else "[red]\\[x] FAIL[/]"
            console.print(f"{mark} {c.name}: {c.detail}", highlight=False)
    if stopped is not None:
        raise stopped
    failed = [c for c in checks if not c.passed]
    if failed:
        err_console.print(f"[red]{len(failed)} probe invariant(s) failed[/]: " + "; ".join(c.name for c in failed))
        raise typer.Exit(1)


probe = user_errors(probe)
