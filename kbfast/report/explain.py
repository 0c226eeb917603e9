"""The view of what bounds a result: the busiest resources, the critical path and the bound
(kbfast.measure.bottleneck), as tables for the terminal (kbfast.report.tables).

They fit 80 columns: a link is named by its ends with the shared SIP and cube said once, and shares are
percent with one decimal.
"""

from __future__ import annotations

import pandas as pd
from rich.console import Console

from kbfast.measure.rows import BUSY_BOUND, PATHS
from kbfast.report.formats import column_unit, duration, in_unit, percent, with_unit
from kbfast.report.tables import fit, narrow_table


# short names of the resource kinds, so that the table fits 80 columns
KIND_SHORT = {"router_mesh": "mesh", "router_to_ucie_conn": "to UCIe", "ucie_conn_to_router": "from UCIe",
              "ucie_internal": "UCIe bus", "ucie_mesh": "UCIe link", "router_to_hbm": "to HBM",
              "hbm_to_router": "from HBM", "pe_to_router": "PE out", "router_to_pe": "PE in",
              "router_to_sram": "to SRAM", "sram_to_router": "from SRAM", "io_internal": "IO chiplet",
              "io_to_cube": "IO to cube", "cube_to_io": "cube to IO", "pcie": "PCIe", "command": "command",
              "pe_internal": "PE", "hbm_pc": "HBM PC"}


def print_resources(console: Console, top: pd.DataFrame, span_label: str) -> None:
    """The busiest links and pseudo-channels: where, kind, flows, busy time and its share of ``span_label``."""
    if top.empty or top["busy_ns"].max() <= 0:
        console.print("busiest resources: none (nothing crossed a link)")
        return
    unit = column_unit(top["busy_ns"])
    grouped = top["resource"].str.match(r"sip\d+[-,]").any()     # kbfast.measure.bottleneck.top_resources
    t = narrow_table(f"busiest resources (busy = bytes / bandwidth, share of the {span_label})",
                     "resource", "kind", "flows", with_unit("busy", unit), "busy",
                     caption="sip0-1.…: the same resource in each of those SIPs, each as busy" if grouped else None)
    t.columns[1].justify = "left"
    for r in top.itertuples(index=False):
        t.add_row(r.resource, KIND_SHORT.get(r.kind, r.kind), "-" if r.flows != r.flows else f"{int(r.flows)}",
                  in_unit(r.busy_ns, unit), percent(r.utilization))
    console.print(fit(console, t, wrap=("resource",)))


def print_critical_path(console: Console, parts: dict[str, float]) -> None:
    """The critical path by category, largest first, with each one's share of the total."""
    total = sum(parts.values())
    unit = column_unit([*parts.values(), total])
    t = narrow_table("critical path (last PE back to launch)", "part", with_unit("time", unit), "share")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        if v > 0:
            t.add_row(k.replace("_", " "), in_unit(v, unit), percent(v / total) if total > 0 else "-")
    t.add_row("total", in_unit(total, unit), percent(1.0) if total > 0 else "-", style="bold")
    console.print(fit(console, t))


# what each answer of kbfast.measure.bottleneck.bound_fields means, in words
BOUND_WORDS = {"bandwidth": "bandwidth", "compute": "compute", "hbm": "HBM access at zero load",
               "fabric_transfer": "zero-load fabric transfers (hops and streaming)",
               "fabric_wait": "waits in the fabric beyond zero load (contention, credits)",
               "ipcq_backpressure": "IPCQ backpressure (senders waiting for a free slot)",
               "ipcq_slot": "IPCQ slot posts and reads", "launch": "the launch", "other": "waits and gaps",
               "contention": "time lost to sharing",
               "zero_load_chain": "the contention-free chain of hops, transfers, slot reads and compute"}


def bound_text(row: dict) -> str | None:
    """What bounds a result in one sentence (kbfast.measure.bottleneck.bound_fields), with the busiest resource and the
    time sharing costs: a resource is named as the bound only when it is busy enough to matter."""
    by, share = row.get("bound_by"), row.get("bound_share")
    if not by:
        return None
    res, util = row.get("bottleneck_resource"), row.get("bottleneck_utilization")
    if by == "bandwidth":
        text = f"bound by: bandwidth; {res} is busy {percent(util)} of the latency"
    else:
        of = "of the critical path" if by not in ("contention", "zero_load_chain") else "of the latency"
        text = f"bound by: {BOUND_WORDS.get(by, by)}, {percent(share)} {of}"
        if res:
            text += (f"; the busiest resource, {res}, is {percent(util)} busy (below {percent(BUSY_BOUND, 0)}: "
                     "not a bandwidth bound)")
    lost = row.get("contention_ns")
    if lost is not None and lost == lost and lost > 0 and by != "contention":
        text += f"; sharing costs {duration(lost)} ({percent(lost / row['latency_ns'])})"
    return text + "."


def print_bound(console: Console, row: dict) -> None:
    """The :func:`bound_text` of ``row``, when it has one, wrapped at the console's width (the command line's
    console keeps each figure on one line with its unit, ``59.9 %``, ``6.498 µs``: kbfast.report.wrap)."""
    text = bound_text(row)
    if text:
        console.print(text, highlight=False)



def print_sensitivity(console: Console, rows: list[dict], latency_ns: float) -> None:
    """Each resource class made 2x faster, then each path (its classes together; kbfast.measure.sensitivity):
    the latency then, and the gain, largest first within each."""
    unit = column_unit([latency_ns, *(r["latency_ns"] for r in rows)])
    paths = [r for r in rows if r.get("scope") == "path"]
    t = narrow_table(f"sensitivity: each resource class {rows[0]['factor']:g}x faster, alone"
                     + (", then each critical path's classes together" if paths else "")
                     + f" (fast path; now {in_unit(latency_ns, unit)} {unit})", "resource",
                     with_unit("latency", unit), "gain",
                     caption="; ".join(f"{name}: {' + '.join(classes)}" for name, classes in PATHS.values())
                     if paths else None)
    n_classes = len(rows) - len(paths)
    for i, r in enumerate(rows):
        t.add_row(r["resource"], in_unit(r["latency_ns"], unit), percent(r["gain"]),
                  end_section=bool(paths) and i == n_classes - 1)       # a rule between classes and paths
    console.print(fit(console, t, wrap=("resource",)))
