"""``kbfast probe``: the probe catalogue (spec_pe §10, §11.6)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.text import Text

from kbfast.cli.common import (OutputFormat, SetOpt, check_modes, console, err_console, first_run, load,
                               positive_size, user_errors)
from kbfast.config.units import format_size
from kbfast.report.tables import fit, narrow_table, pack_items
from kbfast.measure.rows import LOOSE_BOUND
from kbfast.report.formats import (column_unit, count, csv_text, in_unit, num, pct, percent, plural, ratio_text,
                                   with_unit)
from kbfast.errors import KbfastError
from kbfast.cli.outputs import check_outputs, write_table
from kbfast.exact import run_exact
from kbfast.report.heatmap import plot_link_heatmap
from kbfast.report.perfetto import write_trace
from kbfast.measure.methods import FAST_CHOICES
from kbfast.measure.bottleneck import link_table
from kbfast.measure.probe_table import breakdown_column, check_invariants, probe_frame
from kbfast.measure.registry import Stopped, build, measure_each
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import DEFAULT_PROBE_BYTES, SWEEP_SIZES, build_catalogue, select


FastMethod = Enum("FastMethod", {c: c for c in FAST_CHOICES}, type=str)   # --method (kbfast.measure.methods)


# The fast path's method per row (kbfast.measure.hybrid), short enough for the table.
METHOD_SHORT = {"closed form": "closed", "exact replay": "replay", "network": "network", "fluid": "fluid"}
# The breakdown categories (kbfast.measure.metrics.BREAKDOWN) by their short headers, and what each holds.
BREAKDOWN_SHORT = {"pe_setup": "setup", "noc_mesh": "mesh", "ucie": "ucie", "fabric": "fabric",
                   "wire_transfer": "wire", "hbm_ctrl": "hbm", "contention": "rest"}
BREAKDOWN_LEGEND = ("setup: channel wait; mesh: cube NoC; ucie: UCIe; fabric: IO chiplet, PCIe, switch, "
                    "store-and-forward; wire: the last segment's stream; hbm: controller and PC commit; rest: what "
                    "is left (queueing; a few ns below 0 when alone) - docs/probes.md section 3")


def _unit(df: pd.DataFrame, columns: list[str]) -> str | None:
    """One time unit for these columns of ``df`` (:func:`~kbfast.report.formats.column_unit`)."""
    return column_unit(df[[c for c in columns if c in df]].to_numpy(dtype=float))


def _print_tables(df: pd.DataFrame, exact: bool, compare: bool) -> None:
    """The probe table (or, with --compare, fast vs exact); the fast path's bounds and method per row; the
    latency breakdown of the single-issuer cases; then the busiest link of each case that has more than one
    issuer or lost time to contention.  One probe size goes in the titles, several in a column.  The times of a
    table take one unit, named in the header; every table fits the terminal (``fit``)."""
    mode = "exact replay" if exact else ("fast path vs exact" if compare else "fast path")
    sizes = df["nbytes"].unique()
    one = len(sizes) == 1
    per = f", {format_size(int(sizes[0]))} per issuer" if one else ""
    size_col = () if one else ("size",)
    size_of = (lambda r: ()) if one else (lambda r: (format_size(r["nbytes"]),))  # noqa: E731
    if compare and not exact:   # the fast/exact comparison only; latency and utilisation are in the plain view
        unit = _unit(df, ["makespan_ns", "exact_makespan_ns"])
        table = narrow_table(f"probe ({mode}{per}): makespan", "case", *size_col, "n", with_unit("fast", unit, "\n"),
                             with_unit("exact", unit, "\n"), "error")
        for _, r in df.iterrows():
            table.add_row(r["case"], *size_of(r), count(r["n_issuers"]), in_unit(r["makespan_ns"], unit),
                          in_unit(r["exact_makespan_ns"], unit), pct(r["rel_error"]))
        console.print(fit(console, table))
    else:
        unit = _unit(df, ["latency_ns", "makespan_ns"])      # one unit: a row's two times read side by side
        table = narrow_table(f"probe ({mode}{per})", "case", *size_col, "n", with_unit("latency", unit, "\n"),
                             with_unit("makespan", unit, "\n"), "eff\nGB/s", "util\nsingle", "util\naggr")
        for _, r in df.iterrows():
            single = percent(r["util_single"]) if r["n_issuers"] == 1 else "-"
            table.add_row(r["case"], *size_of(r), count(r["n_issuers"]), in_unit(r["latency_ns"], unit),
                          in_unit(r["makespan_ns"], unit), num(r["effective_bw_gbps"]), single,
                          percent(r["util_aggregate"]))
        console.print(fit(console, table, drop=("util single", "eff GB/s")))
    if "makespan_lo_ns" in df and df["makespan_lo_ns"].notna().any():
        bounds = ["latency_lo_ns", "latency_hi_ns", "makespan_lo_ns", "makespan_hi_ns"]
        unit = _unit(df, bounds)
        table = narrow_table(with_unit("fast path bounds", unit and f"({unit})") + f" and method{per}", "case",
                             *size_col, "latency\nlo", "latency\nhi", "makespan\nlo", "makespan\nhi", "method",
                             caption="method: closed = closed form, replay = exact replay, network = queueing "
                                     "network, fluid = fluid estimate (docs/fast_path.md)")
        for _, r in df[df["makespan_lo_ns"].notna()].iterrows():
            table.add_row(r["case"], *size_of(r), *(in_unit(r[c], unit) for c in bounds),
                          METHOD_SHORT.get(r.get("method"), "-"))
        console.print(fit(console, table, drop=[("latency lo", "latency hi")]))
        loose = df[df["bound_ratio"] > LOOSE_BOUND]
        if len(loose):      # one item per case, never split across lines
            items = [f"{r['case']}{'' if one else ' @' + format_size(int(r['nbytes']))} "
                     + ratio_text(r["bound_ratio"]).removesuffix(" loose") for _, r in loose.iterrows()]
            console.print(f"loose bounds (the farther bound over the point, beyond {LOOSE_BOUND:g}x):",
                          highlight=False)
            for line in pack_items(items, "  ", "  ", console.width):
                console.print(Text(line), overflow="fold")
    parts = [c for c in (breakdown_column(k) for k in BREAKDOWN_SHORT) if c in df]
    rows = df[df[parts].notna().any(axis=1)] if parts else df.iloc[:0]
    for nbytes, part in rows.groupby("nbytes", sort=False):     # one table per size: each fits 80 columns
        unit = _unit(part, parts)
        table = narrow_table(with_unit("latency breakdown", unit and f"({unit})")
                             + f", single-issuer cases, {format_size(int(nbytes))} per issuer",
                             "case", *(BREAKDOWN_SHORT[c[3:-3]] for c in parts))
        for _, r in part.iterrows():
            table.add_row(r["case"], *(in_unit(r[c], unit) for c in parts))
        console.print(fit(console, table))
    if len(rows):
        console.print(BREAKDOWN_LEGEND, highlight=False)
    shown = df[(df["n_issuers"] > 1) & df["bottleneck_resource"].notna()]
    if len(shown):
        has_cont = "contention_ns" in shown
        unit = _unit(shown, ["contention_ns"])
        table = narrow_table("busiest link per multi-issuer case (busy: share of the makespan)", "case", *size_col,
                             "busiest link", "flows", "busy", *((with_unit("lost", unit),) if has_cont else ()))
        table.columns[len(size_col) + 1].justify = "left"
        for _, r in shown.iterrows():
            table.add_row(r["case"], *size_of(r), r["bottleneck_resource"], count(r["bottleneck_flows"]),
                          percent(r["bottleneck_utilization"]),
                          *((in_unit(r["contention_ns"], unit),) if has_cont else ()))
        console.print(fit(console, table, wrap=("busiest link",)))
        if has_cont:
            console.print("lost: the fast makespan minus its contention-free lower bound "
                          "(docs/bottlenecks.md)", highlight=False)


def _resource_outputs(t, measured: list, links: Path | None, pcs: Path | None, heatmap: Path | None) -> None:
    """--links, --pcs (every row's case and size, tagged) and --heatmap (the one case) from the evaluation
    behind each row, link utilisation over the row's makespan: the figures the table printed."""
    edge_parts, pc_parts = [], []
    for got in measured:
        row, res = got.details, got.result
        edges = link_table(res.edges, float(row["makespan_ns"]))
        tag = {"case": row["case"], "nbytes": int(row["nbytes"])}
        if links is not None:
            edge_parts.append(edges.assign(**tag))
        if pcs is not None:
            pc_parts.append(res.pcs.assign(**tag))
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
    method: Annotated[FastMethod | None, typer.Option(
        "--method", help="Fast path: hybrid (the default: replay a small contended case exactly, else the queueing "
                         "network when it fits), network (the queueing network, never a replay) or fluid "
                         "(neither).")
    ] = None,
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
        table = narrow_table("probe cases", "case", "group", "issuers", "description")
        table.columns[1].justify = table.columns[3].justify = "left"
        for c in catalogue.values():
            table.add_row(c.name, c.group, count(c.n_issuers), c.description)
        console.print(fit(console, table, wrap=("description",)))
        return
    method = check_modes(exact, compare, None if method is None else method.value)
    sizes = [positive_size(s) for s in size] if size else ([*SWEEP_SIZES] if sweep else [DEFAULT_PROBE_BYTES])
    chosen = select(catalogue, case)
    if (heatmap is not None) and (len(chosen) != 1 or len(sizes) != 1):
        raise KbfastError("--heatmap draws one case: give exactly one --case and one --size")
    if trace is not None:
        if len(chosen) != 1 or len(sizes) != 1:
            raise KbfastError("--trace needs exactly one --case and one --size")
        one = {"kind": "probe", "case": chosen[0].name, "size": sizes[0], "method": method}
        write_trace(run_exact(build(t, router, one).program), trace)
        err_console.print(f"trace written to {trace} (open it in ui.perfetto.dev)", soft_wrap=True)
    # the fast path replays small contended cases exactly
    first_run("exact", *(() if exact else ("runs", "tight", "fast")))
    points = [{"kind": "probe", "case": c.name, "size": n, "method": method} for n in sizes for c in chosen]
    modes = ("exact",) if exact else ("fast", "exact") if compare else ("fast",)
    try:
        measured, stopped = measure_each(t, router, points, modes), None
    except Stopped as err:                 # print the cases that finished, then the refusal (exit 2)
        if not err.finished:
            raise err.cause from None
        measured, stopped = err.finished, err.cause
    df = probe_frame([m[0].details for m in measured], [m[1].details for m in measured] if len(modes) == 2 else None)
    checks = check_invariants(df)
    if fmt is OutputFormat.csv:
        sys.stdout.write(csv_text(df))
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
        _resource_outputs(t, [m[0] for m in measured], links, pcs, heatmap)
    failed = [c for c in checks if not c.passed]
    if failed:
        err_console.print(f"[red]{plural(len(failed), 'probe invariant')} failed[/]: "
                          + "; ".join(c.name for c in failed))
        raise typer.Exit(1)


probe = user_errors(probe)
