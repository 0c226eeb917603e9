"""Summaries and plots of GEMM sweeps (kbfast.workloads.gemm): the roofline and the stage breakdown.

Roofline: achieved MAC/ns (MACs / the whole latency, up-front loads included) against arithmetic intensity
(MACs per HBM byte the GEMM moves, those loads included), with the compute roof (``pe.gemm_macs_per_ns``) and the memory roof (intensity x the PE's
HBM bandwidth).  Stage breakdown: each PE resource's busy fraction of the window, for the square shapes
(or the largest ones), per staging.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kbfast.report.figures import save_figure  # noqa: E402

RESOURCES = ("dma_read", "tcm_read", "compute", "tcm_write", "dma_write")
RATE = "pe.gemm_macs_per_ns"


def is_gemm(df: pd.DataFrame) -> bool:
    return "workload" in df and (df["workload"] == "gemm").all() and "macs_per_ns" in df


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
        "util median": g["mac_util"].median().map("{:.1%}".format),
        "util max": g["mac_util"].max().map("{:.1%}".format),
        "best MAC/ns": g["macs_per_ns"].max().map("{:,.0f}".format),
        "bound by": g["bound_stage"].agg(lambda s: s.value_counts().index[0])})
    out.index = [f"{k[0]} @{k[1]:g}" if isinstance(k, tuple) else str(k) for k in out.index]
    out.index.name = "staging @MAC/ns" if len(keys) > 1 else "staging"
    return out


def plot_roofline(df: pd.DataFrame, out: Path) -> Path:
    """Achieved MAC/ns against MACs per HBM byte, per staging, with the compute and memory roofs."""
    ok = df[df["error"].isna()] if "error" in df else df
    fig, ax = plt.subplots(figsize=(7, 4.8))
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


def plot_stages(df: pd.DataFrame, out: Path) -> Path:
    """Busy fraction of each PE resource over the composite window, for the square shapes (else the 6 with
    the most MACs), one panel per staging, at the default GEMM rate (the largest one swept)."""
    ok = df[df["error"].isna()] if "error" in df else df
    if RATE in ok:
        ok = ok[ok[RATE] == ok[RATE].max()]
    stagings = sorted(ok["staging"].unique())
    fig, axes = plt.subplots(1, len(stagings), figsize=(4.2 * len(stagings), 4), sharey=True, squeeze=False)
    for ax, staging in zip(axes[0], stagings):
        g = ok[ok["staging"] == staging]
        square = g[(g["m"] == g["n"]) & (g["n"] == g["k"])]
        g = (square if len(square) else g.assign(macs=g["m"] * g["n"] * g["k"]).nlargest(6, "macs"))
        g = g.sort_values(["m", "n", "k"])
        pos = np.arange(len(g))
        width = 0.8 / len(RESOURCES)
        for i, r in enumerate(RESOURCES):
            ax.bar(pos + i * width, g[f"busy[{r}]"], width, label=r)
        ax.set_xticks(pos + 0.4 - width / 2, _shape(g), rotation=30, fontsize=7)
        ax.set_title(staging)
        ax.set_xlabel("shape (M x N x K)")
        ax.set_ylim(0, 1.05)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("busy fraction of the composite window")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("where the GEMM's time goes (per PE resource)")
    return save_figure(fig, out)


def gemm_plots(df: pd.DataFrame, folder: Path) -> list[Path]:
    return [plot_roofline(df, folder / "roofline.png"), plot_stages(df, folder / "stages.png")]
