"""Summaries and plots of GEMM sweeps (kbfast.workloads.gemm): the roofline and the stage breakdown.

Roofline: achieved MAC/ns (MACs / the whole latency, up-front loads included) against arithmetic intensity
(MACs per HBM byte the GEMM moves, those loads included), with the compute roof (``pe.gemm_macs_per_ns``) and the memory roof (intensity x the PE's
HBM bandwidth).  Stage breakdown: each PE resource's busy fraction of the window, for the square shapes
(or the largest ones), per staging.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kbfast.report.figures import pyplot, save_figure
from kbfast.report.formats import percent

RESOURCES = ("dma_read", "tcm_read", "compute", "tcm_write", "dma_write")
RATE = "pe.gemm_macs_per_ns"


def _shape(df: pd.DataFrame) -> pd.Series:
    return df["m"].astype(int).astype(str) + "x" + df["n"].astype(int).astype(str) + "x" + df["k"].astype(int).astype(str)


def gemm_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per staging (and GEMM rate when it varies): shapes, under-tile shapes, MAC utilisation (median, max),
    the best MAC/ns and the stage that bounds most shapes."""
    ok = df[df["error"].isna()] if "error" in df else df
    keys = ["staging"] + ([RATE] if RATE in ok and ok[RATE].nunique() > 1 else [])
    g = ok.groupby(keys, sort=True)
    out = pd.DataFrame({
        "shapes": g.size(), "under-tile": g["under_tile"].sum().astype(int),
        "util median": g["mac_util"].median().map(percent),
        "util max": g["mac_util"].max().map(percent),
        "best MAC/ns": g["macs_per_ns"].max().map("{:,.0f}".format),
        "bound by": g["bound_stage"].agg(lambda s: s.value_counts().index[0])})
    out.index = [f"{k[0]} @{k[1]:g}" if isinstance(k, tuple) else str(k) for k in out.index]
    out.index.name = "staging @MAC/ns" if len(keys) > 1 else "staging"
    return out


def plot_roofline(df: pd.DataFrame, out: Path) -> Path:
    """Achieved MAC/ns against MACs per HBM byte, per staging, with the compute and memory roofs."""
    ok = df[df["error"].isna()] if "error" in df else df
    fig, ax = pyplot().subplots(figsize=(7, 4.8))
    markers = dict(zip(sorted(ok[RATE].unique()) if RATE in ok else [None], "os^vD"))
    for staging, g in ok.groupby("staging", sort=True):
        for rate, h in (g.groupby(RATE) if RATE in g else [(None, g)]):
            label = staging if rate is None else f"{staging}, {rate:g} MAC/ns"
            ax.scatter(h["intensity_macs_per_byte"], h["macs_per_ns_overall"], s=14, marker=markers.get(rate, "o"),
                       label=label, alpha=0.8)
    x = np.geomspace(ok["intensity_macs_per_byte"].min() / 2, ok["intensity_macs_per_byte"].max() * 2, 200)
    for bw in sorted(ok["hbm_gbps"].unique()):
        ax.plot(x, x * bw, color="grey", lw=1, ls="--")
        ax.annotate(f"memory roof {bw:g} GB/s", (x[150], x[150] * bw * 1.15), fontsize=7, color="grey",
                    ha="right")
    for peak in sorted(ok["peak_macs_per_ns"].unique()):
        ax.axhline(peak, color="black", lw=1)
        ax.annotate(f"compute roof {peak:g} MAC/ns", (x[0], peak * 1.08), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MAC per HBM byte)")
    ax.set_ylabel("achieved MAC/ns (MACs / latency)")
    ax.set_title(f"GEMM roofline, {len(ok)} points")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, out)


MAX_SETTINGS = 4          # rows of the stage breakdown: settings of the other swept keys


def _short_key(key: str) -> str:
    """A key path as a short name for a label: ``pe.tcm_read_gbs`` -> ``tcm_read``,
    ``link.router_hbm.bw_gbs`` -> ``router_hbm``."""
    parts = key.split(".")
    name = parts[-1].removesuffix("_gbs").removesuffix("_gbps").removesuffix("_ns")
    return parts[-2] if name in ("bw", "") and len(parts) > 1 else name


def settings(df: pd.DataFrame) -> tuple[list[str], pd.Series]:
    """The swept key paths that vary in ``df`` other than the GEMM rate (the settings each shape was run
    at, e.g. the TCM and HBM bandwidths of the bundled spec), and each row's setting as a label:
    ``tcm_read 512, tcm_write 512, router_hbm 256 GB/s``."""
    keys = [c for c in df.columns if "." in c and c != RATE and df[c].nunique() > 1]
    if not keys:
        return [], pd.Series("", index=df.index)
    unit = " GB/s" if all(k.endswith(("_gbs", "_gbps")) for k in keys) else ""
    labels = df[keys].apply(lambda r: ", ".join(f"{_short_key(k)} {v:g}" if isinstance(v, (int, float)) else
                                                f"{_short_key(k)} {v}" for k, v in r.items()), axis=1)
    return keys, labels + unit


def plot_stages(df: pd.DataFrame, out: Path) -> Path:
    """Busy share of each PE resource over the composite window, for the square shapes (else the 6 with
    the most MACs): one panel per staging (columns) and per setting of the other swept keys (rows, at most
    ``MAX_SETTINGS``, each panel titled with its setting), at the largest GEMM rate swept (named in the
    title)."""
    from matplotlib.ticker import PercentFormatter

    ok = df[df["error"].isna()] if "error" in df else df
    rate = ok[RATE].max() if RATE in ok else None
    if rate is not None:
        ok = ok[ok[RATE] == rate]
    stagings = sorted(ok["staging"].unique())
    keys, setting = settings(ok)
    rows = sorted(setting.unique(), key=lambda lab: ok.loc[setting == lab, keys].iloc[0].tolist() if keys else 0,
                  reverse=True)
    shown = rows[:MAX_SETTINGS]
    shapes = ok[["m", "n", "k"]].drop_duplicates()
    square = shapes[(shapes["m"] == shapes["n"]) & (shapes["n"] == shapes["k"])]
    shapes = square if len(square) else shapes.assign(macs=shapes.prod(axis=1)).nlargest(6, "macs")[["m", "n", "k"]]
    shapes = shapes.sort_values(["m", "n", "k"])
    fig, axes = pyplot().subplots(len(shown), len(stagings), figsize=(4.4 * len(stagings), 3.4 * len(shown) + 0.6),
                             sharey=True, squeeze=False)
    width = 0.8 / len(RESOURCES)
    for r, lab in enumerate(shown):
        for ax, staging in zip(axes[r], stagings):
            g = ok[(ok["staging"] == staging) & (setting == lab)].merge(shapes, on=["m", "n", "k"])
            g = g.sort_values(["m", "n", "k"])
            pos = np.arange(len(g))
            for i, res in enumerate(RESOURCES):
                ax.bar(pos + i * width, g[f"busy[{res}]"], width, label=res)
            ax.set_xticks(pos + 0.4 - width / 2, _shape(g), rotation=30, fontsize=7)
            ax.set_title(f"{staging}" + (f"\n{lab}" if lab else ""), fontsize=9)
            ax.set_ylim(0, 1.05)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.grid(True, axis="y", alpha=0.3)
        axes[r][0].set_ylabel("busy, % of the composite window", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("shape (M x N x K)")
    axes[0][-1].legend(fontsize=7, title="PE resource", title_fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    title = "where the GEMM's time goes (per PE resource)" + (f", at {rate:g} MAC/ns" if rate is not None else "")
    if len(rows) > len(shown):
        title += f"; the first {len(shown)} of {len(rows)} settings of {', '.join(keys)}"
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, out)


def gemm_plots(df: pd.DataFrame, folder: Path) -> list[Path]:
    """A GEMM sweep's own plots: the roofline and the stage breakdown."""
    return [plot_roofline(df, folder / "roofline.png"), plot_stages(df, folder / "stages.png")]
