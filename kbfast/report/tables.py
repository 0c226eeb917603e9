"""Tables for the terminal, laid out so that no number or status is ever cut or split, at any width.

* :func:`narrow_table`: a rich table laid out for 80 columns (no outer edge, one space between columns).
* :func:`fit`: that table as it fits the console: numbers and statuses ``no_wrap``, optional columns left
  out (and named) when it is too wide, one block per row (:func:`stacked`) when even that is not enough; a
  title or caption wider than the columns on lines of its own.
* :func:`fit_table`: column widths and wrapped headers for a table of text cells (the sweep summaries,
  kbfast.report.sweep.table_view): headers break only between their pieces (after ``.``, ``_``, ``-`` or at
  a space), text cells at spaces, numbers never.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import NamedTuple, Protocol

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from kbfast.report.wrap import QuantityText, quantities


def narrow_table(title: str | None, *columns: str, caption: str | None = None) -> Table:
    """A table laid out for 80 columns: no outer edge, one space between columns and a rule under the header;
    the first column left-aligned, the others right-aligned (numbers).  Print it through :func:`fit`."""
    t = Table(*columns, title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, 1, 0, 0), title_justify="left", caption_justify="left")
    for col in t.columns[1:]:
        col.justify = "right"
    return t


def _header(col) -> str:
    """A column's header as one line of plain text: its lines joined by a space, or by nothing after a line
    that :func:`wrap_name` broke inside a word (``pe.`` / ``gemm_`` / ``macs_`` is ``pe.gemm_macs_``)."""
    lines = col.header.plain.split() if isinstance(col.header, Text) else str(col.header).split()
    return "".join(line + ("" if line.endswith((".", "_", "-")) or i == len(lines) - 1 else " ")
                   for i, line in enumerate(lines))


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
    parts: list[RenderableType] = [QuantityText(str(table.title), style="table.title")] if table.title else []
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
        parts.append(QuantityText(str(table.caption), style="table.caption"))
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
        return _lines_apart(console, table)
    left_out: list[str] = []
    for heads in drop:
        left_out += [heads] if isinstance(heads, str) else heads
        narrower = _without(table, left_out)
        if _needed(console, narrower) <= width:
            note = f"left out at {width} columns: {', '.join(left_out)} (a wider terminal shows them)"
            narrower.caption = f"{table.caption}\n{note}" if table.caption else note
            return _lines_apart(console, narrower)
    return stacked(table)


def _lines_apart(console: Console, table: Table) -> RenderableType:
    """``table`` with a title or caption wider than its columns as lines of their own, above and below it,
    which wrap at the console's width; rich wraps them within the columns (``busiest resources (busy =
    bytes / bandwidth, share`` over ``of the latency)`` above a 52-column table)."""
    width = _needed(console, table)
    head, foot = (x if x and max(len(line) for line in str(x).split("\n")) > width else None
                  for x in (table.title, table.caption))
    if head is None and foot is None:
        return table
    table.title = None if head else table.title
    table.caption = None if foot else table.caption
    return Group(*([QuantityText(str(head), style="table.title")] if head else []), table,
                 *([QuantityText(str(foot), style="table.caption")] if foot else []))


def pack_items(items: list[str], first: str, indent: str, width: int, sep: str = ",") -> list[str]:
    """Lines of at most ``width`` characters: ``first`` then the items, ``sep``-separated, packed greedily;
    continuation lines start with ``indent``.  An item is never split across lines (one longer than the
    line gets a line of its own, which the console then folds)."""
    lines: list[str] = []
    line = first
    for i, item in enumerate(items):
        piece = item + (sep if i < len(items) - 1 else "")
        bare = line in (first, indent)
        if not bare and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = indent + piece
        else:
            line = line + piece if bare else f"{line} {piece}"
    return lines + [line]


def wrap_quantities(text: str, width: int) -> str:
    """``text`` as lines of at most ``width`` characters (a longer quantity keeps a line of its own), broken only
    between :func:`quantities`: a number never leaves its comparator or its unit."""
    return "\n".join(pack_items(quantities(text), "", "", width, sep=""))


def _pieces(text: str) -> list[tuple[str, bool]]:
    """The pieces a header may break between, each with whether it starts a word: a line breaks after a
    dot, an underscore or a hyphen (``pe.`` / ``tcm_`` / ``read_`` / ``gbs``) and at a space."""
    return [(p, i == 0) for word in text.split(" ") for i, p in enumerate(re.findall(r"[^._-]+[._-]?|[._-]", word)
                                                                           or [""])]


def wrap_name(name: str, width: int = 12) -> list[str]:
    """A header as lines of at most ``width`` characters, broken only between pieces (:func:`_pieces`): a
    word is never cut, and a piece longer than ``width`` stays whole."""
    lines: list[str] = []
    for piece, starts_word in _pieces(name):
        join = " " if starts_word and lines and lines[-1] else ""
        if lines and len(lines[-1]) + len(join) + len(piece) <= width:
            lines[-1] += join + piece
        else:
            lines.append(piece)
    return lines or [name]


GAP = 2      # characters between two columns of a terminal table (:func:`narrow_table`)


class TableFit(NamedTuple):
    """The width of each column of a terminal table and its header, wrapped to it (:func:`fit_table`)."""

    widths: list[int]
    heads: list[str]          # header lines joined by newlines, the levels aligned across the table


class TextTable(Protocol):
    """What :func:`fit_table` reads of a table: header lines per column, rows of text cells, and whether each
    column is right-aligned (numbers)."""

    heads: list[list[str]]
    rows: list[list[str]]
    right: list[bool]


def fit_table(view: TextTable, width: int) -> TableFit:
    """Column widths for ``view`` in ``width`` characters that split no number and cut no word: headers break
    between their pieces (:func:`wrap_name`), text cells at spaces, numbers never.  Columns narrow from the
    widest, headers first (down to their column's widest cell), then text cells, down to their least width
    (the longest number, word or header piece); a table wider even so keeps those least widths (the caller
    stacks it, :func:`fit`)."""
    cols = range(len(view.heads))
    cells = [[r[j] for r in view.rows] for j in cols]
    w = [max([len(h) for h in view.heads[j]] + [len(c) for c in cells[j]]) for j in cols]
    least = [max([len(p) for h in view.heads[j] for p, _ in _pieces(h)]
                 + [len(c) if view.right[j] else max(map(len, c.split(" "))) for c in cells[j]]) for j in cols]
    cell_width = [max([least[j]] + [len(c) for c in cells[j]]) for j in cols]
    for floor in (cell_width, least):         # wrap headers first, then text cells at their spaces
        while sum(w) + GAP * (len(w) - 1) > width:
            narrower = [j for j in cols if w[j] > floor[j]]
            if not narrower:
                break
            j = max(narrower, key=lambda j: w[j])
            w[j] -= 1
    wrapped = [[wrap_name(h, w[j]) for h in view.heads[j]] for j in cols]
    depth = [max(len(c[i]) for c in wrapped) for i in range(len(wrapped[0]))] if wrapped else []
    heads = ["\n".join(line for i, lines in enumerate(c) for line in [""] * (depth[i] - len(lines)) + lines)
             for c in wrapped]        # a level that wraps in one column gets blank lines above it in the others
    return TableFit(w, heads)
