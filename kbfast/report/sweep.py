"""Summaries and plots of sweep results (design §8): tables for the terminal and summary.md, PNGs with matplotlib.

Every sweep's summary has the same shape: the latency per series (one row per combination of the inputs
that vary, other than the size; the other inputs are folded into min / median / max), then the
workload's own table when it has one (latency by size for the collectives and transfers, the GEMM and
model tables), the fast-vs-exact check, the errors and the plots.  A series is a combination of the
varying input columns, so the default plots and tables need no configuration.

Axis labels carry units (:func:`axis_label`); a plot that takes medians over inputs it does not draw
names them in its title.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from kbfast.config.units import format_size
from kbfast.errors import KbfastError, did_you_mean
from kbfast.report.explain import BOUND_WORDS
from kbfast.report.figures import pyplot, save_figure
from kbfast.report.formats import TIME_UNITS, column_unit, count, in_unit, num, pct, plural, time_unit
from kbfast.report.kinds import kind_report
from kbfast.measure.registry import WORKLOADS
from kbfast.measure.rows import LOOSE_BOUND, bound_ratio

INPUTS = tuple(dict.fromkeys(("topology", "sip_topology", "n_sips", "workload", "algorithm", "tile_io", "hop", "case",
                              "buffer_kind", "n_slots", *(c for k in WORKLOADS.values() for c in k.columns))))
MAX_SERIES = 12          # lines in one plot
MAX_ROWS = 16            # rows of the latency-per-series table
MAX_PIVOT_SIZES = 32     # rows of the latency-by-size table
MAX_PIVOT_SERIES = 8     # its columns

# Axis labels with units, by column name (a column not listed is labelled by its name, with the unit its
# suffix names: _ns, _gbs / _gbps, _mm).
LABELS = {
    "latency_ns": "latency (ns)", "latency_lo_ns": "latency, lower bound (ns)",
    "latency_hi_ns": "latency, upper bound (ns)", "exact_latency_ns": "exact latency (ns)",
    "busbw_gbps": "bus bandwidth (GB/s)", "effective_bw_gbps": "effective bandwidth (GB/s)",
    "rel_error": "relative error, (fast - exact) / exact", "n_sips": "SIPs", "n_ranks": "ranks",
    "n_slots": "IPCQ ring depth (slots)", "buffer_kind": "IPCQ buffer kind", "sip_topology": "SIP topology",
    "mac_util": "MAC utilisation (fraction of peak)", "tokens_per_s": "tokens/s",
    "time_to_first_token_ns": "time to first token (ns)", "window_ns": "composite window (ns)",
    "macs_per_ns": "MAC/ns over the window", "macs_per_ns_overall": "MAC/ns over the latency",
    "m": "M", "n": "N", "k": "K",
}
UNITS = {"_ns": "ns", "_gbs": "GB/s", "_gbps": "GB/s", "_mm": "mm"}


def axis_label(col: str, df: pd.DataFrame | None = None) -> str:
    """The label of a column on a plot axis, with its unit."""
    if col == "size":
        kinds = set(df["workload"].dropna()) if df is not None and "workload" in df else set()
        kind = WORKLOADS.get(next(iter(kinds))) if len(kinds) == 1 else None
        return kind.size_label if kind is not None else "size (bytes)"     # the kind's own words (its size_label)
    if col in LABELS:
        return LABELS[col]
    unit = next((u for s, u in UNITS.items() if col.endswith(s)), None)
    return f"{col} ({unit})" if unit else col


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["error"].isna()] if "error" in df else df


def input_columns(df: pd.DataFrame) -> list[str]:
    """The input columns of a results table: the standard ones, the workload's, and the axis key paths."""
    return [c for c in (*INPUTS, *(c for c in df.columns if "." in c)) if c in df]


def series_columns(df: pd.DataFrame, x: str = "size") -> list[str]:
    """Input columns (standard ones, the workload's and axis key paths) that take more than one value, other
    than ``x`` and other than columns that merely restate ``x`` or an earlier column (one-to-one with it)."""
    cols = [c for c in input_columns(df) if c != x and df[c].astype(str).nunique() > 1]
    seen = [x] if x in df else []
    out = []
    for c in cols:
        if not any(_one_to_one(df, p, c) for p in seen):
            out.append(c)
        seen.append(c)
    return out


def _one_to_one(df: pd.DataFrame, a: str, b: str) -> bool:
    pair = df[[a, b]].astype(str)
    return bool(pair.groupby(a)[b].nunique().max() == 1 and pair.groupby(b)[a].nunique().max() == 1)


def pick_series(df: pd.DataFrame, cols: list[str], limit: int) -> tuple[list[str], list[str]]:
    """(kept, folded): the columns of ``cols`` that split ``df`` into at most ``limit`` groups, taken from
    the fewest-valued up (ties in the given order), and the others, which a table or plot folds."""
    kept: list[str] = []
    for c in sorted(cols, key=lambda c: df[c].astype(str).nunique()):
        if df[[*kept, c]].astype(str).drop_duplicates().shape[0] <= limit:
            kept.append(c)
    kept = [c for c in cols if c in kept]
    return kept, [c for c in cols if c not in kept]


def series_labels(df: pd.DataFrame, cols: list[str]) -> pd.Series:
    """One label per row, e.g. ``sip_topology=torus_2d, buffer_kind=tcm``."""
    if not cols:
        return pd.Series(["all"] * len(df), index=df.index)
    if len(cols) == 1:
        return df[cols[0]].astype(str)
    return df[cols].astype(str).apply(lambda r: ", ".join(f"{c}={v}" for c, v in r.items()), axis=1)


NOT_METRICS = ("point", "error", "kbfast_version", "config_hash", "mode", "param_set", "seed",   # provenance
               "exact_latency_ns", "rel_error", "exact_in_bounds")                            # --check, some points


def inert_inputs(df: pd.DataFrame) -> dict[str, list[str]]:
    """The inputs that changed nothing, each with its values: a varying input whose values, at every
    combination of the other varying inputs (those it does not merely restate), are all present and give
    identical metrics (every column but the inputs, the provenance and the cross-check)."""
    ok = _ok(df)
    inputs = input_columns(ok) + (["size"] if "size" in ok else [])
    metrics = [c for c in ok.columns if c not in inputs and c not in NOT_METRICS]
    if ok.empty or not metrics:
        return {}
    text = ok[inputs].astype(str)
    varying = [c for c in inputs if text[c].nunique() > 1]
    result = pd.Series(_row_hashes(ok[metrics]), index=ok.index)
    out = {}
    for c in varying:
        others = [o for o in varying if o != c and not _one_to_one(text, o, c)]
        keys = [text[o] for o in others] or [pd.Series(0, index=ok.index)]
        if (text[c].groupby(keys).nunique() == text[c].nunique()).all() and (result.groupby(keys).nunique() == 1).all():
            out[c] = [str(v) for v in _natural_order(pd.Index(text[c].unique()))]
    return out


def _row_hashes(frame: pd.DataFrame) -> np.ndarray:
    """One hash per row of ``frame``'s values, equal rows equal hashes (columns hashed as they are; a column of
    values pandas cannot hash, such as lists, as text)."""
    try:
        return pd.util.hash_pandas_object(frame, index=False).to_numpy()
    except TypeError:
        return pd.util.hash_pandas_object(frame.astype(str), index=False).to_numpy()


def inert_notes(inert: dict[str, list[str]], reasons: dict[str, str] | None = None) -> list[str]:
    """One sentence per input that changed nothing (:func:`inert_inputs`), with why when ``reasons`` (axis key
    -> why, kbfast.sweep.runner.ignored_axes) names its axis (the column itself, or its key path's last part)."""
    reasons = reasons or {}
    out = []
    for col, values in inert.items():
        why = next((w for k, w in reasons.items() if k == col or k.endswith("." + col)), None)
        shown = ", ".join(values) if len(values) <= 8 else f"{', '.join(values[:3])}, …, {values[-1]}"
        out.append(f"{col} changed nothing: its values ({shown}) give the same results at every combination "
                   f"of the other inputs" + (f"; {why}" if why else "") + ".")
    return out


def check_summary(df: pd.DataFrame, drawn: int | None = None) -> dict[str, float] | None:
    """Fast-vs-exact agreement over the checked points: how many were drawn (``drawn``, else the rows with an
    exact result or an exact error) and checked, max and p95 of |relative error|, bounds held; None when no
    point was drawn."""
    ok = df["rel_error"].notna() if "rel_error" in df else pd.Series(False, index=df.index)
    if drawn is None:
        drawn = int((ok | df["check_error"].notna()).sum()) if "check_error" in df else int(ok.sum())
    if drawn == 0:
        return None
    err = df.loc[ok, "rel_error"].abs()
    held = df.loc[ok, "exact_in_bounds"] if "exact_in_bounds" in df else pd.Series(dtype=object)
    return {"drawn": drawn, "checked": int(len(err)),
            "max_abs_rel_error": float(err.max()) if len(err) else float("nan"),
            "p95_abs_rel_error": float(np.percentile(err, 95)) if len(err) else float("nan"),
            "bounds_held": int((held == True).sum()), "bounds_known": int(held.notna().sum())}  # noqa: E712


def checked(df: pd.DataFrame) -> bool:
    """Whether any point of ``df`` has an exact result to compare with."""
    return "rel_error" in df and bool(df["rel_error"].notna().any())


def _abs_pct(x: float) -> str:
    return pct(x).lstrip("+")      # an absolute value: the percent without its sign


def check_text(chk: dict[str, float]) -> dict[str, str]:
    """The check summary as text: points checked (of those drawn, when some failed), errors in percent
    (kbfast.report.formats.pct), bounds as held / known."""
    checked = count(chk["checked"]) + (f" of {count(chk['drawn'])} drawn" if chk["drawn"] != chk["checked"] else "")
    return {"checked points": checked, "max abs rel error": _abs_pct(chk["max_abs_rel_error"]),
            "p95 abs rel error": _abs_pct(chk["p95_abs_rel_error"]),
            "exact inside fast bounds": f"{count(chk['bounds_held'])} / {count(chk['bounds_known'])}"}


def latency_unit(ns: pd.Series) -> str | None:
    """The unit of a column of latencies, text coerced to NaN (kbfast.report.formats.column_unit); None when no
    unit shows every value (each cell then carries its own, ``in_unit(ns, None)``)."""
    return column_unit(pd.to_numeric(ns, errors="coerce"))


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """The latency per series, the same shape for every sweep: one row per combination of the varying
    inputs (at most ``MAX_ROWS``; the inputs left out, such as the size, are folded in), with points, failed
    points, min / median / max latency and, where results say it (kbfast.measure.bottleneck.bound_fields), what
    bounds most of the series' points.  ``attrs['folded']`` lists the inputs folded."""
    cols = series_columns(df, x="size")
    keys, folded = pick_series(df, cols, MAX_ROWS)
    if "size" in df and df["size"].nunique() > 1:
        folded = ["size", *folded]
    unit = latency_unit(_ok(df)["latency_ns"] if "latency_ns" in df else pd.Series(dtype=float))
    frame = pd.DataFrame({"latency": pd.to_numeric(df.get("latency_ns"), errors="coerce"),
                          "failed": df["error"].notna() if "error" in df else False})
    by = [df[k].astype(str).rename(k) for k in keys] or [pd.Series("all", index=df.index, name="series")]
    g = frame.groupby(by, sort=False)
    head = {s: f"{s} ({unit})" if unit else s for s in ("min", "median", "max")}   # no unit: each cell has its own
    out = pd.DataFrame({"points": g.size(), "failed": g["failed"].sum().astype(int),
                        head["min"]: g["latency"].min(), head["median"]: g["latency"].median(),
                        head["max"]: g["latency"].max()})
    if "bound_by" in df and df["bound_by"].notna().any():     # what bounds the series' points, most often
        bound = df["bound_by"].where(df["bound_by"].notna(), None).groupby(by, sort=False)
        out["bound by"] = bound.agg(lambda v: v.mode().iloc[0] if v.notna().any() else "-")
    out = out.loc[_natural_order(out.index)]
    out.attrs["folded"] = folded
    out.attrs["time_units"] = dict.fromkeys(head.values(), unit)
    return out


def summary_notes(table: pd.DataFrame) -> list[str]:
    """What :func:`summary_table` folds (``min, median and max over size``) and what each ``bound by`` answer in
    it means (``bound by zero_load_chain: the contention-free chain of …``), for its caption."""
    out = [f"min, median and max over {', '.join(table.attrs['folded'])}"] if table.attrs["folded"] else []
    if "bound by" in table:
        out += [f"bound by {b}: {BOUND_WORDS[b]}" for b in dict.fromkeys(table["bound by"]) if b in BOUND_WORDS]
    return out


def _natural_order(index: pd.Index) -> list:
    """Index labels sorted with numbers as numbers (32 before 128)."""
    def key(v: object) -> tuple:
        vals = v if isinstance(v, tuple) else (v,)
        out = []
        for s in vals:
            try:
                out.append((0, float(s), ""))
            except (TypeError, ValueError):
                out.append((1, 0.0, str(s)))
        return tuple(out)
    return sorted(index, key=key)


def size_table(df: pd.DataFrame) -> pd.DataFrame | None:
    """Latency by size (rows) and series (columns, one level per varying input) when there is one point per
    cell, at most ``MAX_PIVOT_SIZES`` sizes and ``MAX_PIVOT_SERIES`` series; else None."""
    ok = _ok(df)
    if ok.empty or "size" not in ok or ok["size"].nunique() < 2 or ok["size"].nunique() > MAX_PIVOT_SIZES:
        return None
    cols = series_columns(ok, x="size")
    keyed = ok[["size", *cols]].astype({c: str for c in cols})
    if keyed.duplicated().any() or (cols and keyed[cols].drop_duplicates().shape[0] > MAX_PIVOT_SERIES):
        return None
    unit = latency_unit(ok["latency_ns"])
    keyed = keyed.assign(latency=ok["latency_ns"], _all="all")
    table = keyed.pivot_table(index="size", columns=cols or ["_all"], values="latency", aggfunc="first")
    table = table[_natural_order(table.columns)]
    table.attrs["unit"] = unit
    table.attrs["time_units"] = dict.fromkeys(table.columns, unit)
    return table


def detail_table(df: pd.DataFrame) -> tuple[str, pd.DataFrame] | None:
    """The workload's own table, with its title: the GEMM summary, the model steps, or latency by size."""
    ok = _ok(df)
    if ok.empty:
        return None
    own = kind_report(ok)
    if own is not None:
        return own.title, own.summary(ok)
    table = size_table(df)
    if table is None:
        return None
    return (f"latency by size ({table.attrs['unit']})" if table.attrs["unit"] else "latency by size"), table


NUMBER = re.compile(r"[+-]?[\d,]+(\.\d+)?( ?%| [nµm]?s)?|-")    # a cell already formatted as a number


class TableView(NamedTuple):
    """A summary table laid out for printing (:func:`table_view`)."""

    heads: list[list[str]]      # header lines per column (a line per input level)
    md: list[str]               # markdown header per column
    rows: list[list[str]]       # formatted cells, row by row
    right: list[bool]           # right-aligned (a number) per column
    n_index: int                # leading label columns (the index), repeated in every part of a stacked table


def table_view(table: pd.DataFrame, digits: int = 3) -> TableView:
    """A summary table laid out for printing.  The index comes first (a size as ``1 KiB``); a column level
    per varying input gives one header line per level (the value), the index header naming the levels.
    Numbers, and text cells already formatted as numbers (``3,083.6``, ``-1.06 %``), align right.  Columns
    named in ``table.attrs['time_units']`` ({column: unit}) hold ns and print in that unit, or each with its
    own when the unit is None (kbfast.report.formats.in_unit)."""
    levels = [n for n in table.columns.names if n not in (None, "_all")]
    idx = table.index.to_frame(index=False) if table.index.name or isinstance(table.index, pd.MultiIndex) else None
    units = table.attrs.get("time_units", {})
    lines: list[list[str]] = []
    md: list[str] = []
    values: list[list[object]] = []
    if idx is not None:
        for i, name in enumerate(idx.columns):
            last = i == len(idx.columns) - 1
            lines.append([*(levels if last else [""] * len(levels)), str(name)])
            md.append(str(name))
            values.append([format_size(v) if name == "size" else v for v in idx[name]])
    for col in table.columns:
        key = col if isinstance(col, tuple) else (col,)
        if levels:
            lines.append([str(v) for v in key] + [""])
            md.append(", ".join(f"{n}={v}" for n, v in zip(levels, key)))
        else:
            lines.append([str(col)])
            md.append(str(col))
        values.append(list(table[col]))
    right = [all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
                 or v is None or isinstance(v, str) and NUMBER.fullmatch(v) is not None for v in vals)
             for vals in values]
    timed = [False] * (len(values) - len(table.columns)) + [c in units for c in table.columns]
    unit_of = [None] * (len(values) - len(table.columns)) + [units.get(c) for c in table.columns]
    rows = [[in_unit(None if vals[r] is None else float(vals[r]), u) if t else cell(vals[r], digits)
             for vals, u, t in zip(values, unit_of, timed)]
            for r in range(len(table))]
    return TableView(lines, md, rows, right, 0 if idx is None else len(idx.columns))


def markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A table as markdown in kbfast's number formats; a column per series reads ``key=value, ...``."""
    view = table_view(table, digits)
    return pd.DataFrame(view.rows, columns=view.md).to_markdown(
        index=False, disable_numparse=True, colalign=["right" if r else "left" for r in view.right])


def cell(v: object, digits: int = 3) -> str:
    """One table cell in kbfast's formats: a count for a whole number, ``num`` for a measured value, ``-``
    when unknown."""
    if v is None or v is pd.NA:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return count(v)
    if isinstance(v, (float, np.floating)):
        return num(float(v), digits)
    return str(v)


def write_summary(df: pd.DataFrame, path: Path, title: str, facts: dict[str, object], plots: list[Path],
                  notes: list[str] | None = None) -> Path:
    """``summary.md``, the same sections for every sweep: the facts of the run, the latency per series (and the
    ``notes`` on inputs that changed nothing, :func:`inert_notes`), the workload's own table (when it has
    one), the cross-check, the errors and the plots."""
    lines = [f"# Sweep {title}", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items()]
    table = summary_table(df)
    lines += ["", "## Latency per series", ""]
    captions = summary_notes(table)
    lines += [*(f"{c[0].upper()}{c[1:]}." for c in captions), ""] if captions else []
    lines += [markdown(table)]
    if notes:
        lines += ["", "Inputs that changed nothing:", "", *(f"- {n}" for n in notes)]
    detail = detail_table(df)
    if detail is not None:
        lines += ["", f"## {detail[0][0].upper()}{detail[0][1:]}", "", markdown(detail[1])]
    chk = check_summary(df)
    lines += ["", "## Fast vs exact", ""]
    lines += [pd.DataFrame([check_text(chk)]).to_markdown(index=False, disable_numparse=True) if chk
              else "No point was replayed exactly (`--check K` replays K of them)."]
    n_err = int(df["error"].notna().sum()) if "error" in df else 0
    lines += ["", f"## Errors ({count(n_err)} points)", ""]
    if n_err:
        errs = df.loc[df["error"].notna(), ["point", "error"]].head(20)
        errs["error"] = errs["error"].str.replace(r"\s*\n\s*", " / ", regex=True)
        lines += [errs.to_markdown(index=False)]
    else:
        lines += ["None."]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.relative_to(path.parent)})" for p in plots]
    path.write_text("\n".join(lines) + "\n")
    return path


def _require(df: pd.DataFrame, col: str | None) -> None:
    if col is not None and col not in df:
        raise KbfastError(f"column {col!r} is not in the results: {did_you_mean(col, list(df.columns))}")


def _size_axis(ax, axis: str) -> None:
    """A byte axis on a log scale: ticks at powers of 4, labelled ``1 KiB``."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    a = getattr(ax, f"{axis}axis")
    getattr(ax, f"set_{axis}scale")("log", base=2)
    a.set_major_locator(LogLocator(base=4))
    a.set_major_formatter(FuncFormatter(lambda v, _: format_size(v) if v >= 1 and float(v).is_integer() else ""))
    a.set_minor_formatter(NullFormatter())


def _log_axis(ax, axis: str, decades: float) -> None:
    """A log axis labelled in plain numbers (``2,000``, not ``2 x 10^3``); under two decades, the 2s and 5s
    between the powers of ten are labelled too."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    getattr(ax, f"set_{axis}scale")("log")
    a = getattr(ax, f"{axis}axis")
    plain = FuncFormatter(lambda v, _: f"{v:,.6g}")
    a.set_major_formatter(plain)
    few = FuncFormatter(lambda v, _: f"{v:,.6g}" if round(v / 10 ** np.floor(np.log10(v))) in (2, 5) else "")
    a.set_minor_formatter(few if decades < 2 else NullFormatter())


def folded_inputs(df: pd.DataFrame, x: str, hue_cols: list[str]) -> list[str]:
    """The input columns that vary among the rows a plot of ``df`` draws as one marker (same hue, same x)."""
    if df.empty:
        return []
    keys = [*hue_cols, x]
    groups = df.groupby([df[k].astype(str) for k in keys], sort=False)
    if groups.ngroups == len(df):
        return []
    return [c for c in input_columns(df) if c not in keys and groups[c].nunique(dropna=False).max() > 1]


LOG_SPAN = 10            # an axis whose positive values span at least this factor is logarithmic


def _axis_values(col: str, vals: pd.Series, df: pd.DataFrame) -> tuple[pd.Series, str]:
    """The values an axis draws and its label: a time (``_ns``) in the unit of its column
    (:func:`latency_unit`, else the one its largest value reads 1 or more in), any other column as it is
    (:func:`axis_label`)."""
    label = axis_label(col, df)
    if not col.endswith("_ns"):
        return vals, label
    unit = latency_unit(vals) or time_unit(vals)[0]
    return vals / dict(TIME_UNITS)[unit], label.replace("(ns)", f"({unit})") if "(ns)" in label else f"{label} ({unit})"


def _short(label: str) -> str:
    """An axis label without its unit, for a title: ``latency``."""
    return re.sub(r"\s*\([^)]*\)$", "", label)


def default_x(df: pd.DataFrame) -> str | None:
    """The x axis of a plot of ``df`` when none is given, as the sweep's own plots draw it: the size when it
    varies, a model sweep's ``n_sips`` when it varies, else the numeric input with the most values (a GEMM's
    ``m``); None when no numeric input varies."""
    ok = _ok(df)
    own = kind_report(ok)
    for x in ("size", *((own.x,) if own is not None and own.x else ())):
        if x in ok and ok[x].nunique() > 1:
            return x
    numeric = [c for c in input_columns(ok) if pd.to_numeric(ok[c], errors="coerce").notna().all()
               and ok[c].nunique() > 1 and ok[c].dtype != bool]
    return max(numeric, key=lambda c: ok[c].nunique(), default=None)


def plot_xy(df: pd.DataFrame, x: str, y: str, hue: str | list[str] | None, out: Path, title: str = "") -> Path:
    """One line per hue value: y at each x, the median where several rows share a (hue, x) cell, and then
    the title names the inputs that vary among them.  ``hue`` defaults to the varying inputs, as many as
    make at most ``MAX_SERIES`` lines (:func:`pick_series`).  An axis is logarithmic when its values are
    positive and span at least ``LOG_SPAN`` (sizes labelled ``1 KiB``, other numbers in full); a time is
    drawn in the unit of its column (:func:`_axis_values`); labels carry units (:func:`axis_label`); the title
    defaults to "<y> vs <x>" in words.  The sweep's plots and ``kbfast plot`` draw through here."""
    from matplotlib.ticker import NullFormatter

    for col in (x, y, *([hue] if isinstance(hue, str) else hue or [])):
        _require(df, col)
    ok = _ok(df)
    ok = ok[np.isfinite(pd.to_numeric(ok[y], errors="coerce"))]
    if hue is None:
        hue = pick_series(ok, series_columns(ok, x), MAX_SERIES)[0]
    hue_cols = [hue] if isinstance(hue, str) else list(hue or [])
    keys = ok[hue_cols].astype(str) if hue_cols else pd.DataFrame({"_": "all"}, index=ok.index)
    groups = {k if isinstance(k, tuple) else (k,): g.index for k, g in keys.groupby(list(keys.columns), sort=False)}
    order = _natural_order(pd.Index(list(groups)))           # the legend in the inputs' order, numbers as numbers
    if len(groups) > MAX_SERIES:
        raise KbfastError(f"{len(groups)} series are too many for one plot; choose a --hue with fewer values")
    xs, x_label = _axis_values(x, ok[x], ok)
    ys, y_label = _axis_values(y, pd.to_numeric(ok[y]), ok)
    drawn = pd.DataFrame({"x": xs, "y": ys}, index=ok.index)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    if len(groups) > 10:
        ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)     # a colour per line
    for key in order:
        g = drawn.loc[groups[key]].groupby("x", as_index=False)["y"].median().sort_values("x")
        ax.plot(g["x"], g["y"], marker="o", ms=3, label=", ".join(key) if hue_cols else None)
    for axis, col, vals in (("x", x, xs), ("y", y, ys)):
        vals = pd.to_numeric(vals, errors="coerce")
        if len(vals) and vals.min() > 0 and vals.max() / vals.min() >= LOG_SPAN:
            if col == "size":
                _size_axis(ax, axis)
            else:
                _log_axis(ax, axis, float(np.log10(vals.max() / vals.min())))
    ticks = np.sort(pd.to_numeric(xs, errors="coerce").dropna().unique())
    if x != "size" and 1 < len(ticks) <= MAX_SERIES:                  # a few input values: a tick at each
        ax.set_xticks(ticks, [f"{v:,g}" for v in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    folded = folded_inputs(ok, x, hue_cols)
    note = f" (median over {', '.join(folded)})" if folded else ""
    ax.set_title(textwrap.fill((title or f"{_short(y_label)} vs {_short(x_label)}") + note, 80), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if hue_cols:
        ax.legend(fontsize=7, title=", ".join(hue_cols), title_fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.02, 1.0))
    return save_figure(fig, out)


def plot_parity(df: pd.DataFrame, out: Path) -> Path:
    """Fast against exact latency for the checked points on log axes, in one time unit scaled to them (as
    :func:`_axis_values` picks it), with the y = x line and each point's bounds."""
    c = df[df["rel_error"].notna()] if "rel_error" in df else df.iloc[:0]
    if c.empty:
        raise KbfastError("no cross-checked points to plot; run the sweep with --check K")
    fig, ax = pyplot().subplots(figsize=(5.5, 5))
    cols = [k for k in ("exact_latency_ns", "latency_ns", "latency_lo_ns", "latency_hi_ns") if k in c]
    ns = pd.concat([c[k] for k in cols])
    unit = latency_unit(ns) or time_unit(ns)[0]          # as _axis_values picks it
    v = {k: c[k] / dict(TIME_UNITS)[unit] for k in cols}
    vals = pd.concat(v.values())
    vals = vals[vals > 0]
    lo, hi = vals.min() / 1.5, vals.max() * 1.5
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="fast = exact")
    if "latency_lo_ns" in c and c["latency_lo_ns"].notna().all():
        ratio = np.array([bound_ratio(lo_, p_, hi_) for lo_, p_, hi_ in
                          zip(c["latency_lo_ns"], c["latency_ns"], c["latency_hi_ns"])])
        for sel, colour, label in ((ratio <= LOOSE_BOUND, "#9ab", f"fast bounds (within {LOOSE_BOUND:g}x)"),
                                   (ratio > LOOSE_BOUND, "#d95f02", "fast bounds, loose (up to "
                                    f"{np.nanmax(ratio, initial=0):,.0f}x the point)")):
            if sel.any():
                below, above = v["latency_ns"] - v["latency_lo_ns"], v["latency_hi_ns"] - v["latency_ns"]
                ax.errorbar(v["exact_latency_ns"][sel], v["latency_ns"][sel], fmt="none", ecolor=colour,
                            yerr=[below[sel], above[sel]], label=label)
    ax.scatter(v["exact_latency_ns"], v["latency_ns"], s=14, zorder=3, label="fast point estimate")
    for axis in "xy":                                    # plain numbers, as the other plots' log axes
        _log_axis(ax, axis, np.log10(hi / lo))
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"exact latency ({unit})")
    ax.set_ylabel(f"fast latency ({unit})")
    chk = check_summary(df)
    ax.set_title(f"fast vs exact, {plural(len(c), 'point')}, max abs rel error {_abs_pct(chk['max_abs_rel_error'])}",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, out)


def default_plots(df: pd.DataFrame, folder: Path) -> list[Path]:
    """Latency and bus bandwidth against size, one line per series (:func:`plot_xy`, as ``kbfast plot`` draws
    them; the inputs that would make too many lines are folded into medians and named in the title), and
    the parity scatter when points were checked.  A kind with a report of its own (kbfast.report.kinds: GEMM,
    model): its line plots and its own plots."""
    ok = _ok(df)
    if ok.empty:
        return []
    out = []
    own = kind_report(ok)
    if own is not None:   # its line plots (a model's latency and tokens/s against SIPs), then its own plots
        out += [plot_xy(ok.dropna(subset=[y]), own.x, y, None, folder / name) for y, name in own.line_plots
                if y in ok and ok[y].notna().any()]
        out += own.plots(ok, folder)
        if checked(df):
            out.append(plot_parity(df, folder / "parity.png"))
        return out
    if "size" in ok and ok["size"].nunique() > 1:
        out.append(plot_xy(ok, "size", "latency_ns", None, folder / "latency_vs_size.png"))
        if ok["busbw_gbps"].notna().any():
            out.append(plot_xy(ok, "size", "busbw_gbps", None, folder / "busbw_vs_size.png"))
    if checked(df):
        out.append(plot_parity(df, folder / "parity.png"))
    return out
