"""Calibration against the public reference numbers (calibration/reference_public.csv): the probe rows.

How each row is measured lives in ``kbfast.calibrate.ROWS``; here the probe rows run on the DEFAULT topology
(no overrides) through the exact replay.  The tolerance for the fitted numbers is +-3 % (``calibrate.TOL``);
the local 16 KiB DMA must be exact (spec_memory §10.2 (A) reproduces it by hand: 77 ns).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kbfast.calibrate import (LATENCY_ROWS, ROWS, TOL, Bench, LatencyRow, OrderingRow, probe_table, reference_csv,
                              reference_table)
from kbfast.config.schema import SystemSpec
from kbfast.measure.probe_table import check_invariants

REPO = Path(__file__).resolve().parents[1]
KiB = 1024
EXACT = {"pe_dma_local_16k"}    # rows that must match exactly, not within TOL
ORDERING_ROWS = tuple(c for c, r in ROWS.items() if isinstance(r, OrderingRow))


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    df = reference_table()
    assert {"scenario", "metric", "value"} <= set(df.columns) and df.index.name == "case"
    return df


@pytest.fixture(scope="module")
def bench(spec: SystemSpec) -> Bench:
    # ``spec`` (conftest) is the default topology, load_system() with no overrides
    return Bench(spec)


@pytest.fixture(scope="module")
def probes(bench: Bench) -> pd.DataFrame:
    """Every catalogue case the targets and orderings need, at each size they need (exact replay)."""
    return probe_table(bench, "exact")


def latency(probes: pd.DataFrame, case: str, nbytes: int) -> float:
    row = probes[(probes["case"] == case) & (probes["nbytes"] == nbytes)]
    assert len(row) == 1, (case, nbytes)
    return float(row["latency_ns"].iloc[0])


def test_reference_csv_is_the_repo_copy() -> None:
    repo_copy = REPO / "calibration" / "reference_public.csv"
    assert reference_csv().is_file()
    if repo_copy.is_file():   # the editable install reads the repository's folder
        assert reference_csv() == repo_copy


def test_latency_rows(ref: pd.DataFrame) -> None:
    assert sorted(LATENCY_ROWS) == sorted(["pe_dma_local_16k", "pe_dma_remote_cube_worst_16k", "pe_dma_remote_sip_16k",
                                           "host_write_64k"])
    # the other latency rows are the GEMM windows (kbfast.calibrate.GemmRow), not probe transfers
    gemm = ["gemm_load_ref_32x3072x32_window", "gemm_load_ref_32x3072x32_with_a_load"]
    assert sorted(ref.index[ref["metric"] == "latency_ns"]) == sorted([*LATENCY_ROWS, *gemm])


@pytest.mark.parametrize("ref_case", sorted(LATENCY_ROWS))
def test_latency_targets(ref: pd.DataFrame, probes: pd.DataFrame, ref_case: str) -> None:
    assert ref_case in ref.index, f"{ref_case} missing from {reference_csv()}"
    row = ref.loc[ref_case]
    assert row["metric"] == "latency_ns"
    target = float(row["value"])
    entry = ROWS[ref_case]
    assert isinstance(entry, LatencyRow)
    got = latency(probes, entry.probe, entry.nbytes)
    if ref_case in EXACT:
        assert got == target, f"{entry.probe}@{entry.nbytes}B: {got} ns, reference {target} ns"
    else:
        assert abs(got - target) <= TOL * target, (
            f"{entry.probe}@{entry.nbytes}B: {got} ns vs reference {target} ns ({100 * (got / target - 1):+.2f} %, "
            f"tolerance +-{100 * TOL:.0f} %)")


def test_local_16k_is_exactly_77(probes: pd.DataFrame) -> None:
    # spec_memory §10.2 (A): 64 flits + 13 ns.  Not taken from the CSV, so a CSV edit cannot hide a regression.
    assert latency(probes, "SAME_CUBE_PE_LOCAL", 16 * KiB) == 77.0


@pytest.mark.parametrize("ref_case", ORDERING_ROWS)
def test_orderings(ref: pd.DataFrame, probes: pd.DataFrame, bench: Bench, ref_case: str) -> None:
    assert ref_case in ref.index and ref.loc[ref_case, "metric"] == "ordering"
    names = ROWS[ref_case].chain(ref)
    unknown = [n for n in names if n not in bench.catalogue()]
    assert not unknown, f"{ref_case}: {unknown} are not probe cases"
    assert len(names) >= 3
    vals = [latency(probes, n, 16 * KiB) for n in names]
    assert all(a < b for a, b in zip(vals, vals[1:])), dict(zip(names, vals))


def test_every_probe_ordering_row_is_checked(ref: pd.DataFrame) -> None:
    # Ordering rows about the probe catalogue (PE DMA at 16 KiB) must all be ordering rows of the registry.
    probe_rows = [c for c in ref.index[ref["metric"] == "ordering"]
                  if c.startswith(("pe_dma_", "probe_"))]
    assert sorted(probe_rows) == sorted(ORDERING_ROWS)


def test_probe_invariants_hold_for_calibration_cases(probes: pd.DataFrame) -> None:
    failed = [c for c in check_invariants(probes) if not c.passed]
    assert not failed, failed
