"""The files ``probe``, ``run`` and ``check`` write on request: ``--trace``, ``--links``, ``--pcs``, ``--heatmap`` and
``check``'s parity table (``--out``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbfast.cli.common import figure_path, writable
from kbfast.errors import KbfastError
from kbfast.report.formats import clean_columns

TABLE_SUFFIXES = (".csv", ".parquet")


def table_path(path: Path, flag: str) -> Path:
    """``path`` if its suffix names a table format; else a refusal that names the flag."""
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise KbfastError(f"{flag} {str(path)!r}: the file name must end in .csv or .parquet "
                          f"(e.g. {flag} {path.with_suffix('.csv')})")
    return path


def check_outputs(trace: Path | None, links: Path | None, pcs: Path | None,
                  heatmap: Path | None) -> Path | None:
    """Refuse, before any work, a --trace/--links/--pcs/--heatmap path that cannot be written or a table
    file without a table suffix; returns the heat map's path (a folder gets ``heatmap.png``)."""
    writable(trace, "--trace")
    for flag, path in (("--links", links), ("--pcs", pcs)):
        if path is not None:
            writable(table_path(path, flag), flag)
    return figure_path(heatmap, "--heatmap", "heatmap.png")


def write_table(df: pd.DataFrame, path: Path) -> Path:
    """Write ``df`` as CSV or Parquet by the suffix, floats as a sweep's results hold them
    (kbfast.report.formats.clean_columns); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    df = clean_columns(df.copy())
    if path.suffix.lower() == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path
