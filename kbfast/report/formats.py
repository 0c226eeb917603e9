"""One number format for every table, and full precision without float noise in every file (design §8).

* A relative error is a signed percent with two decimals (``+0.04 %``); one that rounds to zero prints
  ``0.00 %`` with no sign, never ``-0.00 %``.
* A count is a whole number with thousands separators (``3``, ``15,360``), never ``3.000``.
* A time is scaled to its value: ns, µs, ms or s (:func:`duration`, ``20.05 ms``, never ``20,054,080.0 ns``
  or ``0.004 ms``).  A column of times takes one unit for all its rows, named in its header
  (:func:`column_unit`, :func:`in_unit`), so the rows stay comparable, unless the column spans too many
  orders of magnitude for one unit; then each cell carries its own.  Always ``µs``, never ``us``.
* A metric / value table reads each figure's unit from its name (:func:`figure`: ``latency_ns`` prints as
  ``latency  20.05 ms``, ``mac_util`` as ``84.2 %``).
* A fraction of a whole (a utilisation, a share) prints as a percent: ``91.9 %`` (:func:`percent`).
* A bandwidth keeps its unit in the column header and prints with separators and a fixed number of
  decimals (``1,394.4``).
* Files (JSON, CSV, Parquet) keep full precision; :func:`clean` drops only the last-bit noise of a float
  sum (``524856.9999999999`` -> ``524857.0``) by rounding to 12 significant digits, far below any
  modelled effect (1e-12 relative).
"""

from __future__ import annotations

import json
import math
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pandas as pd

from kbfast.config.units import format_size
from kbfast.measure.rows import LOOSE_BOUND

SIGNIFICANT_DIGITS = 12


def pct(x: float | None, digits: int = 2) -> str:
    """A relative error (a fraction) as a signed percent: ``+1.25 %``; ``0.00 %`` when it rounds to zero;
    ``-`` when unknown."""
    if x is None or not math.isfinite(x):
        return "-"
    r = round(100 * x, digits)
    return f"{0:.{digits}f} %" if r == 0 else f"{r:+.{digits}f} %"


def count(x: float | int) -> str:
    """A count: ``15,360``."""
    return f"{int(round(x)):,}"


def size_text(n: float) -> str:
    """A size in bytes as the command line takes it: ``96 KiB``, ``1 MiB``, else ``1,000 B``."""
    text = format_size(n)
    return f"{count(n)} B" if text.endswith(" B") else text


def plural(n: int, noun: str, many: str | None = None) -> str:
    """A count with its noun: ``1 replica``, ``2 replicas``, ``3 micro-batches`` (``many``: the plural when it
    is not ``noun + 's'``)."""
    return f"{count(n)} {noun if n == 1 else many or noun + 's'}"


def num(x: float | None, digits: int = 1) -> str:
    """A measured value in a column whose header carries the unit: ``1,394.4``; ``-`` when unknown; a value
    that ``digits`` decimals would show as zero, to two significant digits (``0.0015``, not ``0.0``)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x != 0 and abs(x) < 0.5 * 10.0 ** -digits:
        return np.format_float_positional(x, precision=2, unique=False, fractional=False, trim="-")
    return f"{x:,.{digits}f}"


TIME_UNITS = (("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9))
TIME_DIGITS = 4          # significant digits of a single time (duration)


def time_unit(ns: Any) -> tuple[str, float]:
    """(unit, ns per unit) for one time or a column of times: the largest unit in which the largest finite
    magnitude is at least 1 (``ns`` for an empty or all-zero column)."""
    x = np.abs(np.asarray(ns, dtype=float).ravel())
    x = x[np.isfinite(x)]
    top = float(x.max()) if x.size else 0.0
    unit = TIME_UNITS[0]
    for u in TIME_UNITS:
        if top >= u[1]:
            unit = u
    return unit


COLUMN_TOP = 1e4         # a column's largest value stays below this in its unit (``9,999.9`` at most)


def column_unit(ns: Any) -> str | None:
    """The unit of a column of times, for its header: the smallest in which the largest value stays below
    ``COLUMN_TOP`` (``282.5`` ns, not ``0.282`` µs; ``29.142`` µs, not ``29,142.0`` ns), provided the smallest
    non-zero value keeps two significant digits in it (``0.077`` µs).  None when no unit shows every value:
    each cell then carries its own (``in_unit(ns, None)``)."""
    x = np.abs(np.asarray(ns, dtype=float).ravel())
    x = x[np.isfinite(x) & (x > 0)]
    if not x.size:
        return TIME_UNITS[0][0]
    top, low = float(x.max()), float(x.min())
    for name, scale in TIME_UNITS:
        if top / scale < COLUMN_TOP or name == TIME_UNITS[-1][0]:
            return name if low / scale >= (0.1 if name == "ns" else 0.01) else None
    return None


def in_unit(ns: float | None, unit: str | None, digits: int | None = None) -> str:
    """A time in ``unit`` for a column whose header names the unit: ``29.142``; ``-`` when unknown; with
    ``unit`` None (:func:`column_unit` found none), the time with its own unit (:func:`duration`).
    Decimals: ``digits``, else 1 for ns and 3 for the larger units."""
    if ns is None or not math.isfinite(ns):
        return "-"
    if unit is None:
        return duration(ns)
    scale = dict(TIME_UNITS)[unit]
    d = digits if digits is not None else (1 if unit == "ns" else 3)
    # rounded in decimal, half up, from the value as written: 204.5 ns is 0.205 µs as 199.5 ns is 0.200 µs
    # (in binary 0.2045 is a hair below its half and 0.1995 a hair above)
    v = Decimal(repr(float(ns))).scaleb(-round(math.log10(scale))).quantize(Decimal(1).scaleb(-d), ROUND_HALF_UP)
    return f"{v:,.{d}f}"


def with_unit(name: str, unit: str | None, sep: str = " ") -> str:
    """A column header naming its unit (``busy µs``, or ``latency\\nµs`` with ``sep="\\n"``); the name alone
    when ``unit`` is None (the cells carry their units)."""
    return f"{name}{sep}{unit}" if unit else name


def duration(ns: float | None) -> str:
    """One time with its unit scaled to the value, ``TIME_DIGITS`` significant digits (ns to a tenth):
    ``12.0 ns``, ``403.0 ns``, ``4.213 µs``, ``20.05 ms``, ``1.234 s``; ``-`` when unknown."""
    if ns is None or not math.isfinite(ns):
        return "-"
    if ns == 0:
        return "0 ns"
    ns = float(f"{ns:.{TIME_DIGITS}g}")             # rounded first, so 999.96 ns reads 1.000 µs
    unit, scale = time_unit(ns)
    v = ns / scale
    if unit == "ns" and abs(v) >= 1:               # ns to a tenth, the resolution of a column in ns
        return f"{v:,.1f} ns"
    if abs(v) < 1:                                 # below a nanosecond: the significant digits, not 3 decimals
        return f"{v:.{TIME_DIGITS}g} {unit}"
    whole = len(str(int(abs(v))))
    return f"{v:,.{max(TIME_DIGITS - whole, 0)}f} {unit}"


def wall_time(s: float) -> str:
    """A wall-clock wait in seconds, minutes and hours, as a person reads one: ``0.4 s`` (tenths below 10 s,
    where whole seconds would say ``0 s`` of a sweep that took 0.37 s), ``16 s``, ``27 min 20 s``,
    ``4 h 06 min``."""
    if 0.05 <= s < 9.95:
        return f"{s:.1f} s"
    s = max(int(round(s)), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600:,} h {s % 3600 // 60:02d} min"


def percent(frac: float | None, digits: int = 1) -> str:
    """A fraction of a whole (utilisation, share) as a percent: ``91.9 %``; ``-`` when unknown."""
    if frac is None or not math.isfinite(frac):
        return "-"
    return f"{100 * frac:.{digits}f} %"


# A figure's unit, read from its name (the JSON / CSV key): a time ends in ``_ns`` (``phase_end_ns[P1]``), a wall
# time in ``_s``, but never ``_per_ns`` / ``_per_s`` (a rate); a fraction of a whole is a utilisation or a busy share.
TIME_KEY = re.compile(r"(?<!_per)_ns(?=$|\[)")
WALL_KEY = re.compile(r"(?<!_per)_s$")
FRACTION_KEY = re.compile(r"(^|_)util(_|$)|utilization|^busy\[")
BANDWIDTH_KEY = re.compile(r"_gbps$")   # GB/s (bytes): busbw_gbps, effective_bw_gbps


def ratio_text(ratio: float) -> str:
    """A bound ratio (kbfast.measure.rows.bound_ratio) for a table: ``1.3x``, or ``484x loose`` beyond
    ``LOOSE_BOUND``; ``-`` when unknown."""
    if not np.isfinite(ratio):
        return "-" if np.isnan(ratio) else "inf loose"
    text = f"{ratio:,.1f}x" if ratio < 100 else f"{ratio:,.0f}x"
    return text + (" loose" if ratio > LOOSE_BOUND else "")


def figure(key: str, value: Any) -> tuple[str, str]:
    """A named figure for a metric / value table, as (label, text), its unit read from the name: a time as
    :func:`duration` (the label loses ``_ns`` / ``_s``: ``latency_ns`` -> ``latency``), a fraction of a
    whole as :func:`percent`, ``rel_error`` as :func:`pct`, ``nbytes`` as :func:`size_text`, a bandwidth
    (``_gbps``) in GB/s (``busbw_gbps`` -> ``busbw``, ``11.5 GB/s``), a whole number or ``n_*`` / ``*_flows``
    as :func:`count`, any other number as :func:`num`, anything else as text."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return key, str(value)
    if key == "rel_error":
        return key, pct(value)
    if key == "bound_ratio":
        return key, ratio_text(value)
    if FRACTION_KEY.search(key):
        return key, percent(value)
    if TIME_KEY.search(key):
        return TIME_KEY.sub("", key, count=1), duration(value)
    if WALL_KEY.search(key):
        return WALL_KEY.sub("", key), duration(value * 1e9)
    if key == "nbytes" and math.isfinite(value):
        return key, size_text(value)
    if BANDWIDTH_KEY.search(key):
        return BANDWIDTH_KEY.sub("", key), f"{num(value)} GB/s" if math.isfinite(value) else "-"
    if isinstance(value, int) or key.startswith("n_") or key.endswith("_flows"):
        return key, count(value) if math.isfinite(value) else "-"
    return key, num(value)


def figures(row: dict[str, Any]) -> list[tuple[str, str]]:
    """:func:`figure` of every item of ``row``; a time whose label would equal another key is labelled a time
    (``contention_ns`` is ``contention time`` beside ``contention``: its text carries the unit)."""
    out = []
    for key, value in row.items():
        label, text = figure(key, value)
        out.append((f"{label} time" if label != key and label in row else label, text))
    return out


def clean(x: Any) -> Any:
    """A value for a file: floats rounded to 12 significant digits (float noise gone, precision kept),
    recursively through dicts and lists; numpy scalars become Python ones; NaN stays NaN."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and math.isfinite(x) and x != 0.0:
        return float(f"{x:.{SIGNIFICANT_DIGITS}g}")
    return x


def to_json(obj: Any) -> str:
    """JSON of ``obj`` with :func:`clean` floats, indented; NaN written as null."""
    def nan_to_none(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: nan_to_none(u) for k, u in v.items()}
        if isinstance(v, list):
            return [nan_to_none(u) for u in v]
        return None if isinstance(v, float) and math.isnan(v) else v
    return json.dumps(nan_to_none(clean(obj)), indent=2, default=str)


def csv_text(df: pd.DataFrame) -> str:
    """``df`` as CSV text, floats as :func:`clean_columns` writes them (``0.19770879315099998`` is
    ``0.197708793151``), without the index; ``df`` itself unchanged."""
    return clean_columns(df.copy()).to_csv(index=False)


def clean_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every float column's values as :func:`clean` gives them (for results tables); NaN,
    infinities and zeros unchanged."""
    fmt = f"{{:.{SIGNIFICANT_DIGITS}g}}".format
    for col in df.columns:
        if df[col].dtype.kind != "f":    # by the column's type: a nullable integer column reads back as floats
            continue
        x = df[col].to_numpy(dtype=float, na_value=np.nan)
        ok = np.isfinite(x) & (x != 0)
        if ok.any():
            y = x.copy()
            y[ok] = np.array(list(map(fmt, x[ok])), dtype=float)
            df[col] = y
    return df
