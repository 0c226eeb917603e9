"""Sizes with suffixes and geometric ranges, as users write them on the command line and in sweep specs."""

from __future__ import annotations

import re
from fractions import Fraction

from kbfast.errors import KbfastError, shown

_SUFFIX = {"": 1, "B": 1, "KB": 1000, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 1 << 10, "MIB": 1 << 20,
           "GIB": 1 << 30, "TIB": 1 << 40, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_GEOM = re.compile(r"\s*geom\(\s*([^,]+?)\s*,\s*([^,]+?)\s*,\s*[xX]\s*(\d+(?:\.\d+)?)\s*\)\s*")


MAX_BYTES = 1 << 40   # 1 TiB: the largest size kbfast takes (far beyond any cube's HBM; 2^63 overflowed the arrays)


def parse_size(text: str | int) -> int:
    """Bytes from ``4096``, ``16KiB``, ``1MiB``, ``96KB``, ``1TiB`` (KB = 1000 B, KiB = 1024 B), at most 1 TiB."""
    echo = shown(text, 60)
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise KbfastError(f"size {echo} is not a size; use bytes or a suffix: 256B, 16KiB, 1MiB, 96KB")
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).upper() if m else None
    if m is None or unit not in _SUFFIX:
        raise KbfastError(f"size {echo} is not understood; use bytes or a suffix: 256B, 16KiB, 1MiB, 96KB")
    too_large = (f"size {echo} is more than the limit of 1 TiB ({MAX_BYTES:,} bytes): a size is at most 1 TiB, "
                 "per rank or per issuer; e.g. 1MiB")
    whole, _, frac = m.group(1).partition(".")
    whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
    if len(frac) > 20:
        raise KbfastError(f"size {echo} is not a whole number of bytes")
    if len(whole) > 20:   # beyond the limit whatever the unit (and beyond int()'s digit limit)
        raise KbfastError(too_large)
    scaled = Fraction(int(whole) * 10 ** len(frac) + int(frac or 0), 10 ** len(frac)) * _SUFFIX[unit]
    if scaled.denominator != 1:
        raise KbfastError(f"size {echo} is not a whole number of bytes")
    if scaled > MAX_BYTES:
        raise KbfastError(too_large)
    return int(scaled)


def format_size(n: float) -> str:
    """The inverse of :func:`parse_size` for display: ``98304`` -> ``96 KiB``, ``16`` -> ``16 B``."""
    n = int(n)
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def is_geom(text: object) -> bool:
    """Whether ``text`` is written as a geometric range ``geom(START, STOP, xFACTOR)``."""
    return isinstance(text, str) and text.strip().startswith("geom(")


def parse_geom(text: str) -> list[int]:
    """``geom(16B, 64MiB, x2)`` -> [16, 32, ..., 64 MiB]: START * FACTOR**k up to and including STOP."""
    m = _GEOM.fullmatch(text)
    if m is None:
        raise KbfastError(f"range {text!r} is not understood; write geom(START, STOP, xFACTOR), e.g. geom(16B, 64MiB, x2)")
    start, stop, factor = parse_size(m.group(1)), parse_size(m.group(2)), float(m.group(3))
    if start <= 0 or stop < start or factor <= 1:
        raise KbfastError(f"range {text!r} needs 0 < START <= STOP and a factor > 1")
    out, value = [], float(start)
    while value <= stop * (1 + 1e-12):
        out.append(int(round(value)))
        value *= factor
    return out
