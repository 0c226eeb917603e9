"""``kbfast topo``: inspect topologies and routes."""

from __future__ import annotations

import json
import math
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer
import yaml
from rich import box
from rich.table import Table
from rich.text import Text

from kbfast.cli.common import OutputFormat, SetOpt, console, figure_path, load, positive_size, user_errors
from kbfast.config import DEFAULT_TOPOLOGY, preset_names
from kbfast.config.loader import load_raw, param_set_path, read_param_set
from kbfast.config.units import format_size
from kbfast.errors import KbfastError, not_one_of
from kbfast.report.tables import fit, narrow_table, pack_items
from kbfast.report.formats import column_unit, csv_text, duration, in_unit, pct, with_unit
from kbfast.topology.builder import build_tables
from kbfast.topology.names import full_name, node_id
from kbfast.topology.routing import ROUTE_KINDS, Router
from kbfast.topology.summary import describe_route, summarize

topo_app = typer.Typer(help="Inspect topologies: summaries, floor plans and routes.", no_args_is_help=True,
                       add_completion=False)


class TextFormat(str, Enum):
    """How a topo command prints: a table for people, or JSON."""

    table = "table"
    json = "json"


TopologyOpt = Annotated[str, typer.Argument(help="Preset name or path to a topology YAML.")]


def _fmt_bw(values: list[float | None]) -> str:
    """An edge kind's bandwidths, GB/s: ``256``, ``256, 512``, a fitted ``313.962``; ``-`` where unserialised."""
    return ", ".join("-" if v is None else _number(v) for v in values)


def _number(v: float) -> str:
    """A parameter's value in full, never in exponent form and without a trailing ``.0``: ``4,096``, ``0.0078125``,
    ``313.962``."""
    if float(v).is_integer():
        return f"{int(v):,}"
    return np.format_float_positional(float(v), trim="-")


# A parameter's unit, from the end of its key (spec_fabric §10: times in ns, lengths in mm, bandwidths in GB/s)
PARAM_UNITS = (("_ns_per_elem", "ns/element"), ("ns_per_mm", "ns/mm"), ("_macs_per_ns", "MACs/ns"),
               ("bw_gbs", "GB/s"), ("_mm", "mm"), ("_ns", "ns"), ("math_ops", "ns/element"))


def param_text(key: str, value) -> str:
    """An uncalibrated parameter's value for people, its unit read from its key: ``16 mm``, ``313.962 GB/s``,
    ``0.0078125 ns/element``; a mapping one item a line under its unit (``ns/element:``, ``mul 0.0078125``, ...),
    so that no item is parted from its value; ``none`` when empty; anything else as it is."""
    unit = next((u for suffix, u in PARAM_UNITS if key.endswith(suffix)), "")
    tail = f" {unit}" if unit else ""
    if isinstance(value, dict):
        if not value:
            return "none"
        items = [f"{k} {_number(v) if isinstance(v, (int, float)) else v}" for k, v in value.items()]
        return "\n".join([f"{unit}:"] * bool(unit) + items)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return _number(value) + tail


@topo_app.command("list", short_help="List the topology presets shipped with kbfast.")
@user_errors
def list_presets() -> None:
    """List the topology presets shipped with kbfast, with their descriptions."""
    table = Table("preset", "description", box=box.SIMPLE_HEAD, show_edge=False)
    for name in preset_names():
        table.add_row(name, preset_description(name))
    console.print(fit(console, table, wrap=("description",)))
    console.print("Every preset joins its SIPs through one PCIe switch (fabric.switch0): sips.topology sets only "
                  "the collective's neighbours (docs/topology.md).", highlight=False)
    console.print("kbfast topo show NAME summarizes one; kbfast topo export NAME writes its YAML to copy from",
                  highlight=False)


def preset_description(name: str) -> str:
    """A preset's ``description:`` (its base's when it has none), or ``-``."""
    _, data = load_raw(name)
    return str(data.get("description") or "-")


def pe_shorthand(name: str) -> str:
    """``sip0.cube1.pe0`` names the PE's DMA engine, ``sip0.cube1.pe0.pe_dma``; other names are unchanged."""
    parts = name.split(".")
    if len(parts) == 3 and parts[2].startswith("pe") and parts[2][2:].isdigit():
        return f"{name}.pe_dma"
    return name


def _route_end(t, typed: str) -> tuple[str, int]:
    """The full name and id of a route's end as typed: ``cube1.pe0`` is ``sip0.cube1.pe0.pe_dma``
    (:func:`pe_shorthand`); a refusal names it as typed."""
    name = pe_shorthand(full_name(t, typed))
    return name, node_id(t, name, typed)


class _Flow(dict):
    """A mapping written on one line (``{a: 1, b: 2}``)."""


class _FlowList(list):
    """A list written on one line (``[1, 2]``)."""


class _ExportDumper(yaml.SafeDumper):
    """Block style, but the mappings and lists marked :class:`_Flow` / :class:`_FlowList` on one line."""


_ExportDumper.add_representer(
    _Flow, lambda dumper, v: dumper.represent_mapping("tag:yaml.org,2002:map", v.items(), flow_style=True))
_ExportDumper.add_representer(
    _FlowList, lambda dumper, v: dumper.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def export_yaml(data: dict, width: int = 80) -> str:
    """``data`` as YAML whose lines fit ``width``: a mapping or list of plain values on one line where it fits
    after its key and indentation (``link: {bw_gbs: 128, distance_mm: 1}``), else one item per line (PyYAML's
    own folding of one-line mappings overshoots its width by up to an item)."""

    def leaf(v) -> bool:
        return isinstance(v, (dict, list)) and not any(isinstance(x, (dict, list))
                                                       for x in (v.values() if isinstance(v, dict) else v))

    def mark(v, depth: int, key: str):
        if leaf(v) and v:
            one_line = yaml.safe_dump(v, default_flow_style=True, width=10**6, sort_keys=False).strip()
            if 2 * depth + len(key) + 2 + len(one_line) <= width:
                return _Flow(v) if isinstance(v, dict) else _FlowList(v)
        if isinstance(v, dict):
            return {k: mark(x, depth + 1, str(k)) for k, x in v.items()}
        if isinstance(v, list):
            return [mark(x, depth + 1, "- ") for x in v]
        return v

    # PyYAML folds a long string only once a line is past its width: asked for 12 columns less, a word fits
    return yaml.dump(mark(data, 0, ""), Dumper=_ExportDumper, sort_keys=False, default_flow_style=False,
                     width=width - 12, allow_unicode=True)


@topo_app.command("export", short_help="Write a preset's YAML resolved into one file.")
@user_errors
def export(
    name: Annotated[str, typer.Argument(help="Preset name (see kbfast topo list) or path to a topology YAML.")],
    out: Annotated[Path | None, typer.Option("--out", help="Write the YAML to this file (default: print it).")] = None,
) -> None:
    """Write a preset's YAML, resolved with its base into one file that loads on its own: every key the
    preset and its bases set (no comments).  Copy it, edit it and load it with --topology FILE."""
    label, data = load_raw(name)
    text = (f"# kbfast topology exported from {label}\n# (kbfast topo export {name}), its bases merged in.\n"
            "# Keys not written here take their schema defaults; docs/topology.md lists them.\n"
            + export_yaml(data))
    if out is None:
        sys.stdout.write(text)
        return
    if out.is_dir():
        raise KbfastError(f"--out {out}: a folder; give a file name, e.g. {out / 'topology.yaml'}")
    if out.exists():
        raise KbfastError(f"--out {out}: the file exists; remove it or choose another name")
    try:
        out.write_text(text)
    except OSError as err:
        raise KbfastError(f"--out {out}: cannot write it ({err.strerror or err}); choose another path") from None
    console.print(f"{label} written to {out}", highlight=False, soft_wrap=True)


@topo_app.command("show", short_help="Summarize a topology: nodes, edges, bandwidths.")
@user_errors
def show(
    topology: TopologyOpt = DEFAULT_TOPOLOGY,
    sets: SetOpt = None,
    fmt: Annotated[TextFormat, typer.Option("--format", help="table or json")] = TextFormat.table,
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw one cube's floor plan to this PNG.")] = None,
) -> None:
    """Summarize a topology: node and edge counts by kind, bandwidths, uncalibrated parameters."""
    plot = figure_path(plot, "--plot", "floorplan.png")
    spec = load(topology, sets)
    summary = summarize(build_tables(spec))
    if plot is not None:
        from kbfast.report.floorplan import plot_floorplan

        plot_floorplan(spec, plot)
    saved = param_set_path(summary["param_set"])        # a saved set whose values this system loads
    summary["param_set_file"] = None if saved is None else str(saved)
    given = {item.split("=", 1)[0].strip() for item in sets or []}       # --set wins over the set
    from_set = set(read_param_set(saved)) - given if saved is not None else set()
    summary["uncalibrated_from_param_set"] = [k for k in summary["uncalibrated"] if k in from_set]
    if fmt is TextFormat.json:
        print(json.dumps(summary, indent=2, sort_keys=False))
        return
    console.print(f"[bold]{summary['name']}[/] - {summary['description']}  (param set {summary['param_set']}"
                  + ("" if saved is None else f", values from {saved}") + ")")
    grid = summary["sip_grid"]
    console.print(f"{summary['n_sips']:,} SIPs ({summary['sip_topology']}"
                  f"{'' if grid == [0, 0] else f' {grid[0]}x{grid[1]}'}), "
                  f"cube mesh {summary['cube_mesh'][0]}x{summary['cube_mesh'][1]}, "
                  f"{summary['n_cubes']:,} cubes, {summary['n_pes']:,} PEs; "
                  f"{summary['n_nodes']:,} nodes, {summary['n_edges']:,} edges, "
                  f"tables {summary['table_bytes'] / 2**20:.1f} MiB; routing: {summary['routing_policy']}")
    nodes = Table("node kind", "count", title="Nodes")
    nodes.columns[1].justify = "right"
    for kind, count in summary["nodes_by_kind"].items():
        nodes.add_row(kind, f"{count:,}")
    edges = Table("edge kind", "count", "bw GB/s", title="Directed edges")
    for column in edges.columns[1:]:
        column.justify = "right"
    for kind, count in summary["edges_by_kind"].items():
        edges.add_row(kind, f"{count:,}", _fmt_bw(summary["edge_bw_gbs_by_kind"][kind]))
    console.print(fit(console, nodes))
    console.print(fit(console, edges, wrap=("bw GB/s",)))
    unc = Table("key", "value", "from", title="Uncalibrated parameters (never valued by the sources; "
                                              "docs/calibration.md)")
    for key, value in summary["uncalibrated"].items():
        unc.add_row(key, param_text(key, value), "--set" if key in given else f"set {summary['param_set']}"
                    if key in summary["uncalibrated_from_param_set"] else "chosen")
    console.print(fit(console, unc, wrap=("value",)))
    if plot is not None:
        console.print(f"floor plan written to {plot}", soft_wrap=True)


@topo_app.command("route", short_help="Print the route between two nodes, hop by hop.")
@user_errors
def route(
    topology: TopologyOpt,
    src: Annotated[str, typer.Argument(help="Source node, e.g. sip0.cube0.pe0 (= its pe_dma) or sip0.io0.pcie_ep.")],
    dst: Annotated[str, typer.Argument(help="Destination node, e.g. sip0.cube3.hbm_ctrl.pe2, or a PE, "
                                            "sip0.cube1.pe0 (= its pe_dma).")],
    kind: Annotated[str | None, typer.Option(help=f"Route kind: {', '.join(ROUTE_KINDS)} (default: by source).")] = None,
    sets: SetOpt = None,
    fmt: Annotated[TextFormat, typer.Option("--format", help="table or json")] = TextFormat.table,
) -> None:
    """Print the route between two nodes: hops, per-edge bandwidth, overhead and bottleneck."""
    spec = load(topology, sets)
    t = build_tables(spec)
    (src, s), (dst, d) = (_route_end(t, n) for n in (src, dst))
    if kind is None:
        kind = "pe_dma" if src.endswith(".pe_dma") else "memory" if src.endswith(".pcie_ep") else "node"
    if kind not in ROUTE_KINDS:
        raise not_one_of("--kind", kind, ROUTE_KINDS)
    info = describe_route(t, s, Router(t).route(s, d, kind))
    info["kind"] = kind
    if fmt is TextFormat.json:
        print(json.dumps(info, indent=2))
        return
    # one row per node (a hop's end is the next hop's start): the overhead a transfer pays there (the ends pay
    # none), then the edge to the next node, its bandwidth and length
    table = narrow_table(f"{kind} route {src} -> {dst}", "#", "node", "ovh ns", "edge to the next node", "bw GB/s",
                         "mm")
    table.columns[1].justify = table.columns[3].justify = "left"
    ovh = ["-" if v is None else f"{v:g}" for v in info["node_overhead_ns"]]
    for i, hop in enumerate(info["hops"]):
        table.add_row(str(i), hop["src"], ovh[i], hop["kind"],
                      "-" if hop["bw_gbs"] is None else f"{hop['bw_gbs']:g}", f"{hop['mm']:g}")
    if info["hops"]:
        table.add_row(str(len(info["hops"])), info["hops"][-1]["dst"], ovh[-1], "", "", "")
    console.print(fit(console, table, wrap=("node",), drop=("edge to the next node",)))   # names fold, never cut
    bn = info["bottleneck_bw_gbs"]
    console.print(f"{info['n_edges']} edges, transit overhead {duration(info['transit_overhead_ns'])} (ovh ns "
                  "summed), "
                  f"{info['total_mm']:g} mm ({duration(info['propagation_ns'])} propagation), "
                  f"bottleneck {'-' if bn is None else f'{bn:g}'} GB/s"
                  + (f", store-and-forward at {', '.join(info['store_and_forward'])}"
                     if info["store_and_forward"] else ""))


# Loaded-connection items shown per policy in the table view (csv and json list them all).
CONN_ITEMS_SHOWN = 8


@topo_app.command("compare-routing", short_help="Compare the routing policies on probe cases.")
@user_errors
def compare_routing_cmd(
    topology: TopologyOpt = DEFAULT_TOPOLOGY,
    case: Annotated[list[str] | None, typer.Option(
        "--case", help="Probe case (repeatable; default: the congestion cases, REMOTE_CUBE_PE_REMOTE_WORST "
                       "and REMOTE_SIP).")] = None,
    size: Annotated[list[str] | None, typer.Option("--size", help="Bytes per issuer, e.g. 16KiB (repeatable; "
                                                                  "default 16 KiB).")] = None,
    sets: SetOpt = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="table, csv or json")] = OutputFormat.table,
) -> None:
    """Run probe cases under every routing policy (kernbench, balanced, hops): exact and fast makespans,
    the UCIe connections each policy loads, and the most loaded edge (docs/routing.md)."""
    from kbfast.measure.routing_compare import compare_routing

    sizes = [positive_size(s) for s in size] if size else None
    df = compare_routing(load(topology, sets), case, sizes)
    if fmt is OutputFormat.csv:
        out = df.assign(ucie_edges=[json.dumps(d) for d in df["ucie_edges"]])
        sys.stdout.write(csv_text(out))
    elif fmt is OutputFormat.json:
        print(json.dumps({"rows": json.loads(df.to_json(orient="records"))}, indent=2))
    else:
        _print_comparison(df)


def _print_comparison(df: pd.DataFrame) -> None:
    """One block per case: the makespans per size and policy, then each policy's routes, which do not
    depend on the size: the most loaded edge, the endpoint bus passes and the loaded UCIe connections."""
    from kbfast.measure.routing_compare import REFERENCE_POLICY, top_conns

    width = max(console.width, 40)
    flagged = False
    for name, sub in df.groupby("case", sort=False):
        first = sub.iloc[0]
        n = int(first["n_issuers"])
        console.print(Text(f"{name}  ({first['group']}, {n} flow{'' if n == 1 else 's'})", style="bold"),
                      overflow="fold")
        unit = column_unit(sub[["exact_makespan_ns", "fast_makespan_ns"]].to_numpy(dtype=float))
        table = narrow_table(None, "size", "policy", with_unit("exact", unit), f"vs {REFERENCE_POLICY}",
                             with_unit("fast", unit), "fast err", "fluid err")
        table.columns[1].justify = "left"
        for nbytes, rows in sub.groupby("nbytes", sort=False):
            for k, (_, r) in enumerate(rows.iterrows()):
                errs = []
                for err in (r["fast_rel_error"], r["fluid_rel_error"]):
                    off = abs(err) > 0.05
                    flagged |= off
                    errs.append(Text(pct(err, 1) + ("!" if off else " "), style="yellow" if off else ""))
                table.add_row(format_size(nbytes) if k == 0 else "", r["policy"], in_unit(r["exact_makespan_ns"], unit),
                              "ref" if r["policy"] == REFERENCE_POLICY else pct(r["exact_vs_kernbench"], 1),
                              in_unit(r["fast_makespan_ns"], unit), *errs)
        console.print(fit(console, table))
        for _, r in sub.drop_duplicates("policy").iterrows():
            head = f"  {r['policy']:<10}"
            indent = " " * len(head)
            if not r["max_edge"]:
                console.print(f"{head}no DMA flows", highlight=False)
                continue
            if r["policy"] != REFERENCE_POLICY and bool(r["same_routes_as_kernbench"] or False):
                console.print(f"{head}same routes as {REFERENCE_POLICY}", highlight=False)
                continue
            src, dst = r["max_edge"].replace("sip0.", "").split(" -> ")
            bw = "inf" if math.isinf(r["max_edge_bw_gbs"]) else f"{r['max_edge_bw_gbs']:g}"
            flows, passes = int(r["max_edge_flows"]), int(r["bus_passes"])
            lines = pack_items(["most loaded edge", src, "->", dst], head, indent, width, sep="")
            lines.append(f"{indent}  {flows} flow{'' if flows == 1 else 's'} on {r['max_edge_kind']} ({bw} GB/s)")
            bus = f"{indent}{passes} endpoint bus pass{'' if passes == 1 else 'es'}; "
            items = top_conns(r["ucie_conns"], CONN_ITEMS_SHOWN)
            if not items:
                lines.append(bus + "no UCIe connections")
            else:
                if items[-1].endswith(" more"):
                    items[-1] += " (--format csv lists all)"
                lines += [bus + "UCIe connections:", *pack_items(items, indent + "  ", indent + "  ", width)]
            for line in lines:
                console.print(Text(line), overflow="fold")
        console.print()
    notes = ["exact: makespan of the exact replay",
             f"vs {REFERENCE_POLICY}: change of the exact makespan against the {REFERENCE_POLICY} routes",
             "fast, fast err: kbfast probe's fast evaluator, (fast - exact) / exact",
             "fluid err: the same for the fast path's fluid estimate (never replayed)"]
    for note in notes + (["!: more than 5 % off the exact replay"] if flagged else []):
        console.print(note, highlight=False)
