"""The table view of what bounds a result: the busiest resources and the critical path (kbfast.bottleneck).

Both sections fit 80 columns: a link is named by its ends with the shared SIP and cube said once, and
shares are percent with one decimal.
"""

from __future__ import annotations

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from kbfast.report.formats import num

# short names of the resource kinds, so that the table fits 80 columns
KIND_SHORT = {"router_mesh": "mesh", "router_to_ucie_conn": "to UCIe", "ucie_conn_to_router": "from UCIe",
              "ucie_internal": "UCIe bus", "ucie_mesh": "UCIe link", "router_to_hbm": "to HBM",
              "hbm_to_router": "from HBM", "pe_to_router": "PE out", "router_to_pe": "PE in",
              "router_to_sram": "to SRAM", "sram_to_router": "from SRAM", "io_internal": "IO chiplet",
              "io_to_cube": "IO to cube", "cube_to_io": "cube to IO", "pcie": "PCIe", "command": "command",
              "pe_internal": "PE", "hbm_pc": "HBM PC"}


def _table(title: str, *columns: str) -> Table:
    t = Table(*columns, title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
    for col in t.columns[1:]:
        col.justify, col.no_wrap = "right", True
    t.columns[0].overflow = "fold"
    return t


def print_resources(console: Console, top: pd.DataFrame, span_label: str) -> None:
    """The busiest links and pseudo-channels: where, kind, flows, busy time and its share of ``span_label``."""
    if top.empty or top["busy_ns"].max() <= 0:
        console.print("busiest resources: none (nothing crossed a link)")
        return
    t = _table(f"busiest resources (busy = bytes / bandwidth, share of the {span_label})",
               "resource", "kind", "flows", "busy ns", "busy")
    t.columns[1].justify = "left"
    for r in top.itertuples(index=False):
        t.add_row(r.resource, KIND_SHORT.get(r.kind, r.kind), "-" if r.flows != r.flows else f"{int(r.flows)}",
                  num(r.busy_ns), f"{100 * r.utilization:.1f} %")
    console.print(t)


def print_critical_path(console: Console, parts: dict[str, float]) -> None:
    """The critical path by category, largest first, with each one's share of the total."""
    total = sum(parts.values())
    t = _table("critical path (last PE back to launch)", "part", "ns", "share")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        if v > 0:
            t.add_row(k.replace("_", " "), num(v), f"{100 * v / total:.1f} %" if total > 0 else "-")
    t.add_row("total", num(total), "100.0 %" if total > 0 else "-", style="bold")
    console.print(t)
