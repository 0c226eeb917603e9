"""``kbfast topo``: inspect topologies and routes."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kbfast.cli.common import SetOpt, console, load, user_errors
from kbfast.config import DEFAULT_TOPOLOGY, preset_names
from kbfast.errors import KbfastError
from kbfast.topology.builder import build_tables
from kbfast.topology.names import node_id
from kbfast.topology.routing import ROUTE_KINDS, Router
from kbfast.topology.summary import describe_route, summarize

topo_app = typer.Typer(help="Inspect topologies: summaries, floor plans and routes.", no_args_is_help=True)


class TextFormat(str, Enum):
    table = "table"
    json = "json"


TopologyOpt = Annotated[str, typer.Argument(help="Preset name or path to a topology YAML.")]


def _fmt_bw(values: list[float | None]) -> str:
    return ", ".join("-" if v is None else f"{v:g}" for v in values)


@topo_app.command("list")
@user_errors
def list_presets() -> None:
    """List the topology presets shipped with kbfast."""
    for name in preset_names():
        console.print(name)


@topo_app.command("show")
@user_errors
def show(
    topology: TopologyOpt = DEFAULT_TOPOLOGY,
    sets: SetOpt = None,
    fmt: Annotated[TextFormat, typer.Option("--format", help="table or json")] = TextFormat.table,
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw one cube's floor plan to this PNG.")] = None,
) -> None:
    """Summarize a topology: node and edge counts by kind, bandwidths, uncalibrated parameters."""
    spec = load(topology, sets)
    summary = summarize(build_tables(spec))
    if plot is not None:
        from kbfast.report.floorplan import plot_floorplan

        plot_floorplan(spec, plot)
    if fmt is TextFormat.json:
        print(json.dumps(summary, indent=2, sort_keys=False))
        return
    console.print(f"[bold]{summary['name']}[/] - {summary['description']}  (param set {summary['param_set']})")
    grid = summary["sip_grid"]
    console.print(f"{summary['n_sips']} SIPs ({summary['sip_topology']}"
                  f"{'' if grid == [0, 0] else f' {grid[0]}x{grid[1]}'}), "
                  f"cube mesh {summary['cube_mesh'][0]}x{summary['cube_mesh'][1]}, "
                  f"{summary['n_cubes']} cubes, {summary['n_pes']} PEs; "
                  f"{summary['n_nodes']:,} nodes, {summary['n_edges']:,} edges, "
                  f"tables {summary['table_bytes'] / 2**20:.1f} MiB; routing: {summary['routing_policy']}")
    nodes = Table("node kind", "count", title="Nodes")
    for kind, count in summary["nodes_by_kind"].items():
        nodes.add_row(kind, f"{count:,}")
    edges = Table("edge kind", "count", "bw GB/s", title="Directed edges")
    for kind, count in summary["edges_by_kind"].items():
        edges.add_row(kind, f"{count:,}", _fmt_bw(summary["edge_bw_gbs_by_kind"][kind]))
    console.print(nodes)
    console.print(edges)
    unc = Table("key", "value", title="Uncalibrated parameters (chosen defaults, see docs/calibration.md)")
    for key, value in summary["uncalibrated"].items():
        unc.add_row(key, str(value))
    console.print(unc)
    if plot is not None:
        console.print(f"floor plan written to {plot}")


@topo_app.command("route")
@user_errors
def route(
    topology: TopologyOpt,
    src: Annotated[str, typer.Argument(help="Source node, e.g. sip0.cube0.pe0 (= its pe_dma) or sip0.io0.pcie_ep.")],
    dst: Annotated[str, typer.Argument(help="Destination node, e.g. sip0.cube3.hbm_ctrl.pe2.")],
    kind: Annotated[str | None, typer.Option(help=f"Route kind: {', '.join(ROUTE_KINDS)} (default: by source).")] = None,
    sets: SetOpt = None,
    fmt: Annotated[TextFormat, typer.Option("--format", help="table or json")] = TextFormat.table,
) -> None:
    """Print the route between two nodes: hops, per-edge bandwidth, overhead and bottleneck."""
    spec = load(topology, sets)
    t = build_tables(spec)
    if src.rsplit(".", 1)[-1].startswith("pe") and src.count(".") == 2:
        src = f"{src}.pe_dma"
    s, d = node_id(t, src), node_id(t, dst)
    if kind is None:
        kind = "pe_dma" if src.endswith(".pe_dma") else "memory" if src.endswith(".pcie_ep") else "node"
    if kind not in ROUTE_KINDS:
        raise KbfastError(f"--kind {kind!r} is not a route kind; use one of {', '.join(ROUTE_KINDS)}")
    info = describe_route(t, s, Router(t).route(s, d, kind))
    info["kind"] = kind
    if fmt is TextFormat.json:
        print(json.dumps(info, indent=2))
        return
    table = Table("#", "from", "to", "edge kind", "bw GB/s", "mm", title=f"{kind} route {src} -> {dst}")
    for i, hop in enumerate(info["hops"]):
        table.add_row(str(i), hop["src"], hop["dst"], hop["kind"],
                      "-" if hop["bw_gbs"] is None else f"{hop['bw_gbs']:g}", f"{hop['mm']:g}")
    console.print(table)
    bn = info["bottleneck_bw_gbs"]
    console.print(f"{info['n_edges']} edges, transit overhead {info['transit_overhead_ns']:g} ns, "
                  f"{info['total_mm']:g} mm ({info['propagation_ns']:g} ns propagation), "
                  f"bottleneck {'-' if bn is None else f'{bn:g}'} GB/s"
                  + (f", store-and-forward at {', '.join(info['store_and_forward'])}"
                     if info["store_and_forward"] else ""))
