"""Summaries and plots of sweep results (design §8): tables for the terminal and summary.md, PNGs with matplotlib.

The series of a plot are the input columns that vary across the results,
other than the x axis (for example ``sip_topology`` in the seed grid), so the
default plots need no configuration.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kbfast.config.units import format_size  # noqa: E402
from kbfast.errors import KbfastError, did_you_mean  # noqa: E402
from kbfast.report.figures import save_figure  # noqa: E402
from kbfast.report.gemm import gemm_plots, gemm_summary, is_gemm  # noqa: E402
from kbfast.report.model import is_model, model_plots, model_summary  # noqa: E402

INPUTS = ("topology", "sip_topology", "n_sips", "workload", "algorithm", "tile_io", "hop", "case", "buffer_kind",
          "n_slots")
MAX_SERIES = 12


def series_columns(df: pd.DataFrame, x: str = "size") -> list[str]:
    """Input columns (standard ones and axis key paths) that take more than one value, other than ``x`` and
    other than columns that merely restate ``x`` or an earlier column (one-to-one with it)."""
    axis_cols = [c for c in df.columns if "." in c]
    cols = [c for c in (*INPUTS, *axis_cols) if c in df and c != x and df[c].astype(str).nunique() > 1]
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


def series_labels(df: pd.DataFrame, cols: list[str]) -> pd.Series:
    """One label per row, e.g. ``sip_topology=torus_2d, buffer_kind=tcm``."""
    if not cols:
        return pd.Series(["all"] * len(df), index=df.index)
    if len(cols) == 1:
        return df[cols[0]].astype(str)
    return df[cols].astype(str).apply(lambda r: ", ".join(f"{c}={v}" for c, v in r.items()), axis=1)


def check_summary(df: pd.DataFrame) -> dict[str, float] | None:
    """Fast-vs-exact agreement over the checked points: count, max and p95 of |relative error|, bounds held."""
    if "rel_error" not in df or df["rel_error"].notna().sum() == 0:
        return None
    err = df["rel_error"].dropna().abs()
    held = df.loc[df["rel_error"].notna(), "exact_in_bounds"] if "exact_in_bounds" in df else pd.Series(dtype=object)
    return {"checked": int(len(err)), "max_abs_rel_error": float(err.max()),
            "p95_abs_rel_error": float(np.percentile(err, 95)),
            "bounds_held": int((held == True).sum()), "bounds_known": int(held.notna().sum())}  # noqa: E712


def check_text(chk: dict[str, float]) -> dict[str, str]:
    """The check summary as text: errors in percent, bounds as held / known."""
    return {"checked points": str(chk["checked"]), "max abs rel error": f"{chk['max_abs_rel_error']:.3%}",
            "p95 abs rel error": f"{chk['p95_abs_rel_error']:.3%}",
            "exact inside fast bounds": f"{chk['bounds_held']} / {chk['bounds_known']}"}


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """Latency in µs by size (rows) and series (columns) when both are few; otherwise per-series statistics
    (a GEMM sweep: kbfast.report.gemm.gemm_summary)."""
    ok = df[df["error"].isna()] if "error" in df else df
    if is_gemm(ok):
        return gemm_summary(ok)
    if is_model(ok):
        return model_summary(ok)
    if ok.empty:
        return pd.DataFrame()
    cols = series_columns(ok)
    labels = series_labels(ok, cols).rename("series")
    us = (ok["latency_ns"] / 1e3).rename("latency_us")
    one_per_cell = not pd.concat([labels, ok["size"]], axis=1).duplicated().any() if "size" in ok else False
    if one_per_cell and ok["size"].nunique() <= 32 and labels.nunique() <= 8:
        table = pd.concat([labels, ok["size"], us], axis=1).pivot(index="size", columns="series", values="latency_us")
        table.index = [format_size(n) for n in table.index]
        table.index.name = "size"
        table.columns = [f"{c} (µs)" for c in table.columns]
        return table
    g = pd.concat([labels, us, ok.get("busbw_gbps")], axis=1).groupby("series")
    return g.agg(points=("latency_us", "size"), min_latency_us=("latency_us", "min"),
                 median_latency_us=("latency_us", "median"), max_latency_us=("latency_us", "max"),
                 max_busbw_gbps=("busbw_gbps", "max"))


def write_summary(df: pd.DataFrame, path: Path, title: str, facts: dict[str, object], plots: list[Path]) -> Path:
    """``summary.md``: the facts of the run, the latency table, the cross-check and the plots."""
    lines = [f"# Sweep {title}", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items()]
    table = summary_table(df)
    if not table.empty:
        lines += ["", "## Latency", "", table.to_markdown(floatfmt=".3f")]
    chk = check_summary(df)
    if chk:
        lines += ["", "## Fast vs exact", "", pd.DataFrame([check_text(chk)]).to_markdown(index=False)]
    if "error" in df and df["error"].notna().any():
        errs = df.loc[df["error"].notna(), ["point", "error"]].head(20)
        errs["error"] = errs["error"].str.replace(r"\s*\n\s*", " / ", regex=True)
        lines += ["", f"## Errors ({int(df['error'].notna().sum())} points)", "", errs.to_markdown(index=False)]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.relative_to(path.parent)})" for p in plots]
    path.write_text("\n".join(lines) + "\n")
    return path


def _require(df: pd.DataFrame, col: str | None) -> None:
    if col is not None and col not in df:
        raise KbfastError(f"column {col!r} is not in the results: {did_you_mean(col, list(df.columns))}")


def plot_xy(df: pd.DataFrame, x: str, y: str, hue: str | list[str] | None, out: Path, title: str = "",
            loglog: bool | None = None) -> Path:
    """One line per hue value: the median of y at each x.  Axes are logarithmic with ``loglog``, or by
    default when a positive axis spans more than 100x."""
    for col in (x, y, *([hue] if isinstance(hue, str) else hue or [])):
        _require(df, col)
    ok = df[df["error"].isna()] if "error" in df else df
    ok = ok[np.isfinite(pd.to_numeric(ok[y], errors="coerce"))]
    hue_cols = [hue] if isinstance(hue, str) else list(hue or [])
    labels = series_labels(ok, hue_cols)
    groups = list(ok.groupby(labels, sort=True))
    if len(groups) > MAX_SERIES:
        raise KbfastError(f"{len(groups)} series are too many for one plot; choose a --hue with fewer values")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, g in groups:
        g = g.groupby(x, as_index=False)[y].median().sort_values(x)
        ax.plot(g[x], g[y], marker="o", ms=3, label=label if hue_cols else None)
    for axis, col in (("x", x), ("y", y)):
        vals = pd.to_numeric(ok[col], errors="coerce")
        wide = len(vals) and vals.min() > 0 and vals.max() / vals.min() > 100
        if loglog or (loglog is None and wide):
            getattr(ax, f"set_{axis}scale")("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if hue_cols:
        ax.legend(fontsize=7, title=", ".join(hue_cols), title_fontsize=7)
    return save_figure(fig, out)


def plot_parity(df: pd.DataFrame, out: Path) -> Path:
    """Fast against exact latency for the checked points, with the y = x line and each point's bounds."""
    c = df[df["rel_error"].notna()] if "rel_error" in df else df.iloc[:0]
    if c.empty:
        raise KbfastError("no cross-checked points to plot; run the sweep with --check K")
    fig, ax = plt.subplots(figsize=(5, 5))
    lo = np.minimum(c["exact_latency_ns"], c["latency_ns"]).min()
    hi = np.maximum(c["exact_latency_ns"], c["latency_ns"]).max()
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="fast = exact")
    if c["latency_lo_ns"].notna().all():
        ax.errorbar(c["exact_latency_ns"], c["latency_ns"], fmt="none", ecolor="#9ab",
                    yerr=[c["latency_ns"] - c["latency_lo_ns"], c["latency_hi_ns"] - c["latency_ns"]], label="bounds")
    ax.scatter(c["exact_latency_ns"], c["latency_ns"], s=14, zorder=3, label="point estimate")
    if lo > 0 and hi / lo > 100:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("exact latency (ns)")
    ax.set_ylabel("fast latency (ns)")
    ax.set_title(f"fast vs exact, {len(c)} points")
    ax.legend(fontsize=7)
    return save_figure(fig, out)


def default_plots(df: pd.DataFrame, folder: Path) -> list[Path]:
    """Latency and busbw against size per series (log-log), and the parity scatter when points were checked."""
    ok = df[df["error"].isna()] if "error" in df else df
    if ok.empty:
        return []
    out = []
    if is_gemm(ok) or is_model(ok):
        out += gemm_plots(ok, folder) if is_gemm(ok) else model_plots(ok, folder)
        if check_summary(df):
            out.append(plot_parity(df, folder / "parity.png"))
        return out
    hue = series_columns(ok)
    if len(series_labels(ok, hue).unique()) > MAX_SERIES:
        hue = hue[:1] if ok[hue[0]].nunique() <= MAX_SERIES else []
    if "size" in ok and ok["size"].nunique() > 1:
        out.append(plot_xy(ok, "size", "latency_ns", hue, folder / "latency_vs_size.png", "latency vs size",
                           loglog=True))
        if ok["busbw_gbps"].notna().any():
            out.append(plot_xy(ok, "size", "busbw_gbps", hue, folder / "busbw_vs_size.png",
                               "bus bandwidth vs size", loglog=True))
    if check_summary(df):
        out.append(plot_parity(df, folder / "parity.png"))
    return out
