"""Per-resource tables that ``probe`` and ``run`` write on request (``--links``, ``--pcs``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbfast.errors import KbfastError

TABLE_SUFFIXES = (".csv", ".parquet")


def table_path(path: Path, flag: str) -> Path:
    """``path`` if its suffix names a table format; else a refusal that names the flag."""
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise KbfastError(f"{flag} {str(path)!r}: the file name must end in .csv or .parquet "
                          f"(e.g. {flag} {path.with_suffix('.csv')})")
    return path


def write_table(df: pd.DataFrame, path: Path) -> Path:
    """Write ``df`` as CSV or Parquet by the suffix; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path
