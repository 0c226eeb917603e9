"""Writing matplotlib figures (every plot of ``kbfast.report``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig, out: Path, dpi: int = 110) -> Path:
    """Lay out ``fig``, write it to ``out`` (its folder created) at ``dpi``, and close it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
