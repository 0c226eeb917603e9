"""Text that wraps between quantities: a number never leaves its comparator or its unit, at any width.

* :func:`quantities`: a text's words, each quantity (``<= 60 s``, ``28.23 µs``, ``4 batches``) one piece.
* :class:`QuantityText`: a rich ``Text`` that wraps and measures by those pieces (rich's own wrap breaks at
  every space: ``sram 28.23`` over ``µs``).
* :class:`QuantityConsole`: a rich ``Console`` whose strings, printed or in table cells, are such texts: the
  command line's consoles (kbfast.cli.common).
"""

from __future__ import annotations

import re

from rich._wrap import divide_line
from rich.cells import cell_len
from rich.console import Console
from rich.containers import Lines
from rich.measure import Measurement
from rich.text import Text

_UNIT_WORD = re.compile(r"[A-Za-zµ%]{1,3}[,;:)]?|[^\s(]*/\S+")   # a unit after a number: s, ms, M, x, MiB, points/min
_NUMBER = re.compile(r"[(]?[\d][\d.,e]*[,;:)]?")
_COMPARATORS = ("<=", ">=", "<", ">")
_GLUE = "_"          # stands for a space inside a quantity while rich divides a line (one cell, not a space)


def _joins(words: list[str]) -> list[bool]:
    """Per word, whether it joins the word before it into one quantity: after a comparator or an arrow (both its
    sides: ``32x32x64 -> 48``), after a number its unit (a short word, or one with a slash) or what it counts
    (a lower-case word: ``4 batches``), then further unit words, and an option's number (``--check 3``); a word
    ending in ``,``, ``;``, ``:`` or ``)`` closes a quantity (``below 50 %: not``)."""
    out: list[bool] = []
    join_next = False                  # the next word joins: after a comparator or an arrow
    counted = False                    # the last word is a number: a lower-case word joins it
    unit_follows = False               # the last word is a number or a unit: a unit word joins it
    option = False                     # the last word is an option (``--check``) not yet given its value
    for word in words:
        number = _NUMBER.fullmatch(word) is not None
        unit = _UNIT_WORD.fullmatch(word) is not None
        option_value = number and option
        arrow = word == "->"
        out.append(bool(out) and (join_next or option_value or arrow or counted and word[:1].islower()
                                  or unit_follows and (number or unit)))
        open_ended = not word.endswith((",", ";", ":", ")"))
        join_next = open_ended and (word in _COMPARATORS or arrow)
        counted = open_ended and number and not option_value
        unit_follows = open_ended and not option_value and (number or unit_follows and unit)
        option = word.startswith("--")
    return out


def quantities(text: str) -> list[str]:
    """``text``'s words, each quantity joined into one (:func:`_joins`): ``<= 60 s``, ``20 M events/s,`` and
    ``4 batches`` stay whole, to be wrapped between."""
    out: list[str] = []
    for word, joins in zip(words := text.split(), _joins(words)):
        if joins:
            out[-1] += " " + word
        else:
            out.append(word)
    return out


def glued(text: str) -> str:
    """``text`` with the spaces inside each quantity (:func:`quantities`) as ``_GLUE``: the same length, so a
    line divided between its words is divided between quantities.  A quantity never spans lines."""
    if "\n" in text:
        return "\n".join(glued(line) for line in text.split("\n"))
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    chars = list(text)
    for k, joins in enumerate(_joins([text[a:b] for a, b in spans])):
        if joins:
            chars[spans[k - 1][1]:spans[k][0]] = _GLUE * (spans[k][0] - spans[k - 1][1])
    return "".join(chars)


class QuantityText(Text):
    """A rich ``Text`` that wraps only between quantities (:func:`glued`), and whose least width is its widest
    quantity; otherwise rich's (a quantity wider than the line folds, as a word does)."""

    @classmethod
    def of(cls, text: Text) -> QuantityText:
        """``text`` (its plain string, styles and layout) as a :class:`QuantityText`."""
        return cls(text.plain, style=text.style, justify=text.justify, overflow=text.overflow, no_wrap=text.no_wrap,
                   end=text.end, tab_size=text.tab_size, spans=list(text.spans))

    def wrap(self, console: Console, width: int, *, justify=None, overflow=None, tab_size: int = 8,
             no_wrap: bool | None = None) -> Lines:
        """rich's ``Text.wrap``, dividing each line at :func:`glued`'s word boundaries, the lines without the space
        they broke at."""
        if no_wrap or (no_wrap is None and self.no_wrap) or overflow == "ignore":
            return super().wrap(console, width, justify=justify, overflow=overflow, tab_size=tab_size,
                                no_wrap=no_wrap)
        wrap_justify = justify or self.justify or "default"
        wrap_overflow = overflow or self.overflow or "fold"
        lines = Lines()
        for line in self.split(allow_blank=True):
            if "\t" in line:
                line.expand_tabs(tab_size)
            new_lines = line.divide(divide_line(glued(line.plain), width, fold=wrap_overflow == "fold"))
            for part in new_lines:
                part.rstrip()              # no trailing space where a line broke (rich keeps it)
            if wrap_justify:
                new_lines.justify(console, width, justify=wrap_justify, overflow=wrap_overflow)
            for part in new_lines:
                part.truncate(width, overflow=wrap_overflow)
            lines.extend(new_lines)
        return lines

    def __rich_measure__(self, console: Console, options) -> Measurement:
        """rich's measure, with the widest quantity as the least width."""
        measured = super().__rich_measure__(console, options)
        pieces = glued(self.plain).split()
        least = max((cell_len(p) for p in pieces), default=measured.minimum)
        return Measurement(max(measured.minimum, least), max(measured.maximum, least))


class QuantityConsole(Console):
    """A rich ``Console`` whose strings (printed, or table cells) wrap between quantities (:class:`QuantityText`)."""

    def render_str(self, text: str, **kwargs) -> Text:
        """A string in a renderable (a table cell) as a :class:`QuantityText`."""
        return QuantityText.of(super().render_str(text, **kwargs))

    def _collect_renderables(self, *args, **kwargs):
        """rich's, with the text it joins from a ``print``'s strings as a :class:`QuantityText` (rich joins them
        into a new plain ``Text``)."""
        return [QuantityText.of(r) if type(r) is Text else r for r in super()._collect_renderables(*args, **kwargs)]
