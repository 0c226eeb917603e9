"""Writing matplotlib figures (every plot of ``kbfast.report``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend, imported on first use: it takes about 0.6 s to
    import, and most commands draw nothing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out: Path, dpi: int = 110) -> Path:
    """Lay out ``fig``, write it to ``out`` (its folder created) at ``dpi``, and close it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    pyplot().close(fig)
    return out


def plain_log_axis(axis, values) -> None:
    """A log ``axis`` (``ax.xaxis``, ``ax.yaxis``) labelled in plain numbers (``0.2``, ``5``, ``20``, not
    ``2 x 10^-1``); within a decade of ``values`` the 2-9 ticks are labelled too, within two decades the 2s and
    5s, else only the decades."""
    from matplotlib.ticker import FuncFormatter

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    span = v.max() / v.min() if len(v) else 1.0
    shown = (2, 3, 4, 5, 6, 7, 8, 9) if span < 10 else (2, 5) if span < 100 else ()

    def minor(x: float, _) -> str:
        lead = round(x / 10 ** np.floor(np.log10(x)))
        return f"{x:g}" if lead in shown else ""
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))
