"""The figure of ``kbfast search``: every candidate's throughput against its time per output token, the Pareto
front joined, the winner marked (docs/search.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbfast.report.figures import plain_log_axis, pyplot, save_figure
from kbfast.search.front import layout_label


def plot_front(table: pd.DataFrame, out: Path, title: str) -> Path:
    """Tokens/s against TPOT (ms, log), one point per timed candidate: feasible ones by layout and degrees
    (:func:`~kbfast.search.front.layout_label`), the rest faint, the front as a line, the objective's best as a
    star; a candidate beaten by its lower bound as a hollow mark at its best case (TPOT at the bound)."""
    from matplotlib.ticker import FuncFormatter

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    timed = table["timed"].astype(bool) if "timed" in table else pd.Series(True, index=table.index)
    beaten = table[~timed & table["error"].isna()]
    if len(beaten):                        # never timed: where their bounds would put them at best
        lo = beaten["tpot_lo_ms"]
        ax.scatter(lo, beaten["batch"] / (lo * 1e-3), s=10, facecolors="none", edgecolors="darkgrey", linewidths=0.6,
                   label="beaten by its lower bound (at best)")
    ok = table[table["error"].isna() & timed]
    bad = ok[~ok["feasible"]]
    if len(bad):
        ax.scatter(bad["tpot_ms"], bad["tokens_per_s"], s=12, c="lightgrey", label="fails a constraint")
    feas = ok[ok["feasible"]]
    labels = feas.apply(layout_label, axis=1) if len(feas) else pd.Series(dtype=str)
    groups = list(feas.groupby(labels, sort=False))
    colours = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20")      # each layout its own colour
    for i, (layout, part) in enumerate(groups):
        ax.scatter(part["tpot_ms"], part["tokens_per_s"], s=14, alpha=0.7, color=colours(i % 20),
                   marker="o^sD"[i // 20 % 4], label=f"layout {layout}", zorder=3)
    # the front and the best drawn hollow around their points, which stay visible (a filled mark hid the only
    # point of a layout)
    front = feas[feas["front"]].sort_values("tpot_ms")
    ax.plot(front["tpot_ms"], front["tokens_per_s"], "-o", color="black", ms=7, mfc="none", lw=1, zorder=2,
            label="Pareto front")
    best = feas[feas["best"]]
    ax.scatter(best["tpot_ms"], best["tokens_per_s"], marker="*", s=320, facecolors="none", edgecolors="red",
               linewidths=1.4, zorder=5, label="best")
    ax.set_xscale("log")
    plain_log_axis(ax.xaxis, pd.concat([ok["tpot_ms"], beaten.get("tpot_lo_ms", pd.Series(dtype=float))]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("time per output token, TPOT (ms, log scale)")
    ax.set_ylabel("throughput (output tokens/s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return save_figure(fig, out)
