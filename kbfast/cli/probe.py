"""``kbfast probe``: the probe catalogue (spec_pe §10, §11.6)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich import box
from rich.table import Table

from kbfast.cli.common import (OutputFormat, SetOpt, check_modes, console, err_console, first_run, load,
                               positive_size, user_errors)
from kbfast.config.units import format_size
from kbfast.report.formats import num, pct
from kbfast.errors import KbfastError
from kbfast.cli.outputs import check_outputs, write_table
from kbfast.exact import run_exact
from kbfast.report.heatmap import plot_link_heatmap
from kbfast.report.trace import write_trace
from kbfast.probe import (ProbesStopped, check_invariants, exact_evaluator, fast_evaluator, fluid_evaluator,
                          resource_tables, run_probes)
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


def _table(title: str, *columns: str) -> Table:
    """A probe table at 80 columns: one space between columns, numbers right-aligned and whole, a case name
    never cut (the longest is 27 characters)."""
    t = Table(*columns, title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    t.columns[0].no_wrap = True
    for col in t.columns[1:]:
        col.no_wrap, col.justify = True, "right"
    return t


def _print_tables(df: pd.DataFrame, exact: bool, compare: bool) -> None:
    """The probe table (or, with --compare, fast vs exact), then the busiest link of each case that has
    more than one issuer or lost time to contention.  One probe size goes in the title, several in a
    column."""
    mode = "exact replay" if exact else ("fast path vs exact" if compare else "fast path")
    sizes = df["nbytes"].unique()
    one = len(sizes) == 1
    title = f"probe ({mode}" + (f", {format_size(int(sizes[0]))} per issuer)" if one else ")")
    size_col = () if one else ("size",)
    size_of = (lambda r: ()) if one else (lambda r: (format_size(r["nbytes"]),))  # noqa: E731
    if compare and not exact:   # the fast/exact comparison only; latency and utilisation are in the plain view
        table = _table(title, "case", *size_col, "n", "fast ns", "exact ns", "error", "lo..hi ns", "method")
        for _, r in df.iterrows():
            has_bounds = "makespan_lo_ns" in r and r["makespan_lo_ns"] == r["makespan_lo_ns"]
            table.add_row(r["case"], *size_of(r), str(r["n_issuers"]), num(r["makespan_ns"]),
                          num(r["exact_makespan_ns"]), pct(r["rel_error"]),
                          f"{_short_ns(r['makespan_lo_ns'])}..{_short_ns(r['makespan_hi_ns'])}" if has_bounds else "-",
                          METHOD_SHORT.get(r.get("method"), "-"))
    else:
        table = _table(title, "case", *size_col, "n", "latency\nns", "makespan\nns", "eff\nGB/s", "util\nsingle",
                       "util\naggr")
        for _, r in df.iterrows():
            single = f"{100 * r['util_single']:.1f} %" if r["n_issuers"] == 1 else "-"
            table.add_row(r["case"], *size_of(r), str(r["n_issuers"]), num(r["latency_ns"]), num(r["makespan_ns"]),
                          num(r["effective_bw_gbps"]), single, f"{100 * r['util_aggregate']:.1f} %")
    console.print(table)
    shown = df[(df["n_issuers"] > 1) & df["bottleneck_resource"].notna()]
    if len(shown):
        has_cont = "contention_ns" in shown
        table = _table("busiest link per multi-issuer case (busy: share of the makespan)",
                       "case", *size_col, "busiest link", "flows", "busy", *(("lost ns",) if has_cont else ()))
        table.columns[len(size_col) + 1].justify = "left"
        table.columns[len(size_col) + 1].no_wrap = False
        for _, r in shown.iterrows():
            table.add_row(r["case"], *size_of(r), r["bottleneck_resource"], f"{int(r['bottleneck_flows'])}",
                          f"{100 * r['bottleneck_utilization']:.1f} %",
                          *((num(r["contention_ns"]),) if has_cont else ()))
        console.print(table)
        if has_cont:
            console.print("lost ns: the fast makespan minus its contention-free lower bound "
                          "(docs/bottlenecks.md)", highlight=False)


def _resource_outputs(t, router, cases, df: pd.DataFrame, evaluate, links: Path | None, pcs: Path | None,
                      heatmap: Path | None) -> None:
    """--links, --pcs (every row's case and size, tagged) and --heatmap (the one case) from the evaluation
    behind each row, link utilisation over the row's makespan (kbfast.probe.resource_tables): the figures
    the table printed."""
    by_name = {c.name: c for c in cases}
    edge_parts, pc_parts = [], []
    for _, row in df.iterrows():
        edges, pc_table = resource_tables(t, router, by_name[row["case"]], row, evaluate)
        tag = {"case": row["case"], "nbytes": int(row["nbytes"])}
        if links is not None:
            edge_parts.append(edges.assign(**tag))
        if pcs is not None:
            pc_parts.append(pc_table.assign(**tag))
        if heatmap is not None:
            label = f"probe {row['case']}, {format_size(int(row['nbytes']))} per issuer"
            err_console.print(f"heat map written to {plot_link_heatmap(t, edges, heatmap, label)}", soft_wrap=True)
    for path, parts, what in ((links, edge_parts, "links"), (pcs, pc_parts, "pseudo-channels")):
        if path is not None:
            err_console.print(f"{what} written to {write_table(pd.concat(parts, ignore_index=True), path)}", soft_wrap=True)


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
    links: Annotated[Path | None, typer.Option("--links", help="Write every case's per-link table (bytes, busy, "
                                                                "utilisation) to FILE.csv or FILE.parquet.")] = None,
    pcs: Annotated[Path | None, typer.Option("--pcs", help="Write every case's per pseudo-channel table to "
                                                            "FILE.csv or FILE.parquet.")] = None,
    heatmap: Annotated[Path | None, typer.Option("--heatmap", help="Draw one case's link utilisation on the cube "
                                                                    "mesh to FILE.png (one --case, one --size).")] = None,
) -> None:
    """Run named traffic scenarios and check kernbench's probe invariants (exit 1 if one fails)."""
    heatmap = check_outputs(trace, links, pcs, heatmap)
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
    if (heatmap is not None) and (len(chosen) != 1 or len(sizes) != 1):
        raise KbfastError("--heatmap draws one case: give exactly one --case and one --size")
    if trace is not None:
        if len(chosen) != 1 or len(sizes) != 1:
            raise KbfastError("--trace needs exactly one --case and one --size")
        write_trace(run_exact(chosen[0].program(t, router, sizes[0])), trace)
        err_console.print(f"trace written to {trace} (open it in ui.perfetto.dev)", soft_wrap=True)
    evaluator = exact_evaluator if exact else (fast_evaluator if method is FastMethod.hybrid else fluid_evaluator)
    first_run("exact", *(() if exact else ("runs", "fast")))      # the fast path replays small contended cases exactly
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
        _print_tables(df, exact, compare)
        for c in checks:
            mark = "[green]\\[v] PASS[/]" if c.passed else "[red]\\[x] FAIL[/]"
            console.print(f"{mark} {c.name}: {c.detail}", highlight=False)
    if stopped is not None:
        raise stopped
    if links is not None or pcs is not None or heatmap is not None:
        _resource_outputs(t, router, chosen, df, evaluator, links, pcs, heatmap)
    failed = [c for c in checks if not c.passed]
    if failed:
        err_console.print(f"[red]{len(failed)} probe invariant(s) failed[/]: " + "; ".join(c.name for c in failed))
        raise typer.Exit(1)


probe = user_errors(probe)
