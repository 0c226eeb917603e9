"""The sweep report of a workload kind that has tables and plots of its own.

A kind names its report (``WorkloadKind.report``, kbfast.measure.kind); :data:`REPORTS` gives it.  This is
the one place the report dispatches on a kind: a new kind with its own report adds its module here and one
entry to the table, and a kind without one gets the sweep's common tables and plots (kbfast.report.sweep).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kbfast.measure.registry import WORKLOADS
from kbfast.report.gemm import gemm_plots, gemm_summary
from kbfast.report.model import LINE_PLOTS, model_plots, model_summary


@dataclass(frozen=True)
class KindReport:
    """A kind's own report: its detail table (title and summary), its plots, and the line plots drawn against
    ``x`` as every sweep's lines are (kbfast.report.sweep.plot_xy)."""

    title: str                                        # the detail table's title
    needs: str                                        # a metric column its successful rows carry
    summary: Callable[[pd.DataFrame], pd.DataFrame]
    plots: Callable[[pd.DataFrame, Path], list[Path]]
    line_plots: tuple[tuple[str, str], ...] = ()      # (y column, file name)
    x: str | None = None                              # the axis of its line plots, the default x when it varies


REPORTS = {
    "gemm": KindReport("GEMMs per staging", "macs_per_ns", gemm_summary, gemm_plots),
    "model": KindReport("model steps", "mac_util", model_summary, model_plots, LINE_PLOTS, "n_sips"),
}


def kind_report(ok: pd.DataFrame) -> KindReport | None:
    """The own report of the one workload kind of ``ok`` (successful rows), when the kind names one and the
    rows carry its figures; None for mixed or common kinds."""
    kinds = set(ok["workload"]) if "workload" in ok else set()
    kind = WORKLOADS.get(next(iter(kinds))) if len(kinds) == 1 else None
    report = REPORTS.get(kind.report) if kind is not None and kind.report else None
    return report if report is not None and report.needs in ok else None
