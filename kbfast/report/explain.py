"""Tables for the terminal: :func:`narrow_table` and :func:`fit` (no number or status ever cut or split, at any
width), and the view of what bounds a result: the busiest resources and the critical path (kbfast.bottleneck).

Both sections fit 80 columns: a link is named by its ends with the shared SIP and cube said once, and
shares are percent with one decimal.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import pandas as pd
from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from kbfast.bottleneck import BUSY_BOUND
from kbfast.report.formats import column_unit, duration, in_unit, percent, with_unit

# short names of the resource kinds, so that the table fits 80 columns
KIND_SHORT = {"router_mesh": "mesh", "router_to_ucie_conn": "to UCIe", "ucie_conn_to_router": "from UCIe",
              "ucie_internal": "UCIe bus", "ucie_mesh": "UCIe link", "router_to_hbm": "to HBM",
              "hbm_to_router": "from HBM", "pe_to_router": "PE out", "router_to_pe": "PE in",
              "router_to_sram": "to SRAM", "sram_to_router": "from SRAM", "io_internal": "IO chiplet",
              "io_to_cube": "IO to cube", "cube_to_io": "cube to IO", "pcie": "PCIe", "command": "command",
              "pe_internal": "PE", "hbm_pc": "HBM PC"}


def narrow_table(title: str | None, *columns: str, caption: str | None = None) -> Table:
    """A table laid out for 80 columns: no outer edge, one space between columns and a rule under the header;
    the first column left-aligned, the others right-aligned (numbers).  Print it through :func:`fit`."""
    t = Table(*columns, title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, 1, 0, 0), title_justify="left", caption_justify="left")
    for col in t.columns[1:]:
        col.justify = "right"
    return t


def _header(col) -> str:
    """A column's header as one line of plain text."""
    return " ".join(col.header.plain.split() if isinstance(col.header, Text) else str(col.header).split())


def _needed(console: Console, table: Table) -> int:
    """The width ``table`` takes with every ``no_wrap`` column as wide as its widest cell (header included)
    and every other column as wide as its longest word."""
    wide = console.options.update_width(10_000)
    for col in table.columns:
        if col.no_wrap:
            col.min_width = max(Measurement.get(console, wide, c).maximum for c in (col.header, *col.cells))
    return Measurement.get(console, wide, table).minimum


def _without(table: Table, headers: Collection[str]) -> Table:
    """A copy of ``table`` without the columns whose header is in ``headers``."""
    out = Table(title=table.title, caption=table.caption, box=table.box, show_edge=table.show_edge,
                pad_edge=table.pad_edge, padding=table.padding, title_justify=table.title_justify,
                caption_justify=table.caption_justify, show_header=table.show_header, highlight=table.highlight)
    out.columns = [replace(c, _index=i)
                   for i, c in enumerate(c for c in table.columns if _header(c) not in headers)]
    out.rows = table.rows
    return out


def stacked(table: Table) -> RenderableType:
    """``table`` as one block per row: the row's first cell, then one line per other column, its header then
    its value (for a terminal too narrow for the columns side by side)."""
    heads = [_header(c) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    label = max((len(h) for h in heads[1:]), default=0) + 2
    parts: list[RenderableType] = [Text(str(table.title), style="table.title")] if table.title else []
    for i, row in enumerate(table.rows):
        first = cells[0][i]
        parts.append(Text(first, style=row.style or "bold") if isinstance(first, str) else first)
        block = Table.grid(padding=(0, 2, 0, 0))
        block.add_column(no_wrap=True, min_width=label)
        block.add_column(overflow="fold")
        for head, col in zip(heads[1:], cells[1:]):
            block.add_row(f"  {head}", col[i])
        parts.append(block)
    if table.caption:
        parts.append(Text(str(table.caption), style="table.caption"))
    return Group(*parts)


def fit(console: Console, table: Table, wrap: Collection[str] = (),
        drop: Sequence[str | tuple[str, ...]] = ()) -> RenderableType:
    """``table`` as it fits the console's width with no number or status cut or split.  Every column but those
    whose header is in ``wrap`` (names, free text: they wrap between words) is ``no_wrap``.  When the table
    is still too wide, the columns in ``drop`` (a header, or a tuple of headers that go together) are left
    out, in that order, until it fits (its caption names them); when that is not enough, the whole table is
    :func:`stacked`.  Headers are matched as one line (``"util\\nsingle"`` is ``util single``)."""
    width = console.width
    for col in table.columns:
        col.no_wrap = _header(col) not in wrap
        if not col.no_wrap:
            col.overflow = "fold"            # a word longer than the column folds, never cut
    if _needed(console, table) <= width:
        return table
    left_out: list[str] = []
    for heads in drop:
        left_out += [heads] if isinstance(heads, str) else heads
        narrower = _without(table, left_out)
        if _needed(console, narrower) <= width:
            note = f"left out at {width} columns: {', '.join(left_out)} (a wider terminal shows them)"
            narrower.caption = f"{table.caption}\n{note}" if table.caption else note
            return narrower
    return stacked(table)


def print_resources(console: Console, top: pd.DataFrame, span_label: str) -> None:
    """The busiest links and pseudo-channels: where, kind, flows, busy time and its share of ``span_label``."""
    if top.empty or top["busy_ns"].max() <= 0:
        console.print("busiest resources: none (nothing crossed a link)")
        return
    unit = column_unit(top["busy_ns"])
    t = narrow_table(f"busiest resources (busy = bytes / bandwidth, share of the {span_label})",
                     "resource", "kind", "flows", with_unit("busy", unit), "busy")
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


# what each answer of kbfast.bottleneck.bound_fields means, in words
BOUND_WORDS = {"bandwidth": "bandwidth", "compute": "compute", "hbm": "HBM access at zero load",
               "fabric_transfer": "zero-load fabric transfers (hops and streaming)",
               "fabric_wait": "waits in the fabric beyond zero load (contention, credits)",
               "ipcq_backpressure": "IPCQ backpressure (senders waiting for a free slot)",
               "ipcq_slot": "IPCQ slot posts and reads", "launch": "the launch", "other": "waits and gaps",
               "contention": "time lost to sharing",
               "zero_load_chain": "the contention-free chain of hops, transfers, slot reads and compute"}


def bound_text(row: dict) -> str | None:
    """What bounds a result in one sentence (kbfast.bottleneck.bound_fields), with the busiest resource and the
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
    """The :func:`bound_text` of ``row``, when it has one."""
    text = bound_text(row)
    if text:
        console.print(text, highlight=False)
