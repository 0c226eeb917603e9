"""The calibration rows: how each reference case is measured and what passes (kbfast.calibrate)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kbfast.calibrate.systems import (COLUMNS, MODES, ORDER_BYTES, PE2PE_HOPS, PE2PE_SIZES, REFERENCE_FILE, TILE_64K,
                                      TILE_96K, TOL, Bench, KiB, reference_table)
from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.measure.probe_table import probe_frame
from kbfast.measure.registry import measure_each
from kbfast.report.formats import column_unit, duration, in_unit
from kbfast.ir.tiling import plan_gemm

# The registry.

@dataclass(frozen=True)
class Outcome:
    """One row in one mode: the measured figure, its error (a relative error, or whether the check holds)
    and whether it passes (None for a retired row)."""

    value: float | str
    err: float | bool | None
    ok: bool | None


@dataclass(frozen=True)
class Row:
    """How one reference row is measured; subclasses implement ``measure``."""

    case: str
    unit: str = ""
    criterion: str = ""
    retired: bool = False
    claim: str = ""              # the reference when the CSV row states no value (default: the criterion)

    def reference(self, ref: pd.Series) -> float | str:
        """The CSV value as a number, its text when it is not one, else ``claim`` or the criterion."""
        if pd.isna(ref["value"]):
            return self.claim or self.criterion
        try:
            return float(ref["value"])
        except ValueError:
            return str(ref["value"])

    def probes(self, ref: pd.DataFrame) -> list[tuple[str, int]]:
        """The (probe case, bytes) pairs this row reads."""
        return []

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        """The row measured on ``bench``'s systems in ``mode``, against the reference table ``ref``."""
        raise NotImplementedError


@dataclass(frozen=True)
class LatencyRow(Row):
    """An isolated probe transfer vs a reference latency: ``err = latency / reference - 1``."""

    probe: str = ""
    nbytes: int = 16 * KiB
    unit: str = "ns"
    criterion: str = "within +-3 %"

    def probes(self, ref: pd.DataFrame) -> list[tuple[str, int]]:
        return [(self.probe, self.nbytes)]

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame, target: float | None = None) -> Outcome:
        got = bench.probe_ns(self.probe, self.nbytes, mode)
        err = got / (float(ref.loc[self.case, "value"]) if target is None else target) - 1.0
        return Outcome(got, err, abs(err) <= TOL)


def chain_text(values: list[float]) -> str:
    """``77.0 < 82.0 < 127.0 ns``: times in one unit, each pair joined by the relation that holds."""
    unit = column_unit(values)
    out = in_unit(values[0], unit)
    for a, b in zip(values, values[1:]):
        out += f" {'<' if a < b else '=' if a == b else '>'} {in_unit(b, unit)}"
    return f"{out} {unit}" if unit else out


@dataclass(frozen=True)
class OrderingRow(Row):
    """Probe latencies at 16 KiB, strictly increasing along ``names`` (read from the scenario when empty)."""

    names: tuple[str, ...] = ()
    criterion: str = "strictly increasing"

    def chain(self, ref: pd.DataFrame) -> list[str]:
        """The probe cases in order: ``names``, or the scenario text ``A < B < C``."""
        if self.names:
            return list(self.names)
        return [n.strip() for n in str(ref.loc[self.case, "scenario"]).split("<")]

    def probes(self, ref: pd.DataFrame) -> list[tuple[str, int]]:
        return [(n, ORDER_BYTES) for n in self.chain(ref)]

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        vals = [bench.probe_ns(n, ORDER_BYTES, mode) for n in self.chain(ref)]
        holds = all(a < b for a, b in zip(vals, vals[1:]))
        return Outcome(chain_text(vals), holds, holds)


@dataclass(frozen=True)
class CentreCornerRow(Row):
    """lrab with the centre root vs the corner root at 96 KiB: ``change = centre / corner - 1``, ok when
    ``centre < corner``.  The size of the gain is shown, not judged: the reference fractions come from a model
    before the per-flit wires and the per-PE HBM controllers, which moved the intra-SIP share the root
    changes, and the original kept only the ordering as its invariant (spec_ccl §8.1)."""

    sips: str = ""
    unit: str = "fraction"
    criterion: str = ("centre < corner; the gain's size is retired: the reference's model predates the "
                      "per-flit wires")

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        centre = bench.allreduce_ns(self.sips, "lrab", TILE_96K, mode=mode)
        corner = bench.allreduce_ns(self.sips, "lrab_corner", TILE_96K, mode=mode)
        holds = centre < corner
        return Outcome(centre / corner - 1.0, holds, holds)


def older_torus_ns(ref: pd.DataFrame) -> float:
    """The older model's torus6 96 KiB latency in ns, read from the "-> 17.2" figure (µs) of the centre-vs-corner
    row's note."""
    return float(re.search(r"-> ([0-9.]+) us", ref.loc["allreduce_center_vs_corner_torus", "note"]).group(1)) * 1e3


@dataclass(frozen=True)
class WindowRow(Row):
    """The torus6 96 KiB lrab all-reduce between the older model's figure and the latest guard."""

    unit: str = "ns"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        got = bench.allreduce_ns("torus6", "lrab", TILE_96K, mode=mode)
        holds = older_torus_ns(ref) < got < float(ref.loc[self.case, "value"])
        return Outcome(got, holds, holds)


def buffer_kind_targets(ref: pd.DataFrame, case: str = "allreduce_buffer_kind_64k") -> dict[str, float]:
    """The reference per-kind figures (µs) of the buffer-kind row, e.g. ``{"tcm": 12.0, ...}``."""
    return {k: float(v) for k, v in re.findall(r"(tcm|hbm|sram) ([0-9.]+)", ref.loc[case, "value"])}


@dataclass(frozen=True)
class BufferKindRow(Row):
    """lrab at 64 KiB on torus6 per buffer kind: ok when tcm < hbm < sram (spec_ccl §2.7).  The ratios
    hbm/tcm and sram/tcm are shown, not judged: the reference's "about 1.8, about 2.0" come from a model before
    the per-flit wires, whose fabric share of each hop differs."""

    unit: str = "µs"   # per kind; the ratios in the text have none
    criterion: str = ("tcm < hbm < sram; the ratios (about 1.8, 2.0) are retired: the reference's model "
                      "predates the per-flit wires")

    def reference(self, ref: pd.Series) -> str:
        return f"{ref['value']} µs"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        got = {k: bench.allreduce_ns("torus6", "lrab", TILE_64K, kind=k, mode=mode) for k in ("tcm", "hbm", "sram")}
        ratios = {k: got[k] / got["tcm"] for k in ("hbm", "sram")}
        holds = got["tcm"] < got["hbm"] < got["sram"]
        text = "; ".join(f"{k} {duration(got[k])}" for k in got) + " (" + ", ".join(
            f"{k}/tcm {ratios[k]:.3f}" for k in ratios) + ")"
        return Outcome(text, holds, holds)


@dataclass(frozen=True)
class IpcqOverheadRow(Row):
    """Max over h3/h4 and 128 B .. 10 KB of IPCQ send/recv minus one DMA write, below the target."""

    unit: str = "ns"
    criterion: str = "max overhead < 100 ns"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        worst = max(bench.pe2pe_ns(h, n, mode) - bench.pe2pe_ns(h, n, mode, raw_dma=True, load=False)
                    for h in PE2PE_HOPS for n in PE2PE_SIZES)
        holds = worst < float(ref.loc[self.case, "value"])
        return Outcome(worst, holds, holds)


@dataclass(frozen=True)
class RetiredIpcqRow(Row):
    """Retired "IPCQ >= raw DMA": reports today's largest IPCQ - raw DMA gap over h3/h4, 128 B .. 10 KB
    (negative: IPCQ is faster at every size)."""

    unit: str = "ns"
    criterion: str = "retired: measured on an older model; shown: max(IPCQ - raw DMA), today below 0"
    retired: bool = True

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        gaps = [bench.pe2pe_ns(h, n, mode) - bench.pe2pe_ns(h, n, mode, raw_dma=True)
                for h in PE2PE_HOPS for n in PE2PE_SIZES]
        return Outcome(max(gaps), None, None)


@dataclass(frozen=True)
class GemmRow(Row):
    """The reference's 32x3072x32 load_ref GEMM on pe0 of cube 0 (spec_pe §5.6): the composite window
    (tile-stage records only), or the latency that also counts the up-front load of A; within +-3 %."""

    with_load: bool = False
    unit: str = "ns"
    criterion: str = "within +-3 %"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        got = bench.gemm(32, 32, 3072, "load_ref", mode)["latency_ns" if self.with_load else "window_ns"]
        err = got / float(ref.loc[self.case, "value"]) - 1.0
        return Outcome(got, err, abs(err) <= TOL)


GEMM_TILE_COUNTS = {(512, 512, 512): 2048, (128, 128, 256): 64, (32, 32, 64): 1, (32, 32, 3072): 48}


@dataclass(frozen=True)
class GemmTileCountRow(Row):
    """Tiles of the reference shapes at the configured tile (M x N x K: count)."""

    criterion: str = "512^3 -> 2048; 128x128x256 -> 64; 32x32x64 -> 1; 32x32x3072 -> 48"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        got = {s: plan_gemm(bench.spec.pe, *s).n_tile_total for s in GEMM_TILE_COUNTS}
        holds = got == GEMM_TILE_COUNTS
        return Outcome(", ".join(str(v) for v in got.values()), holds, holds)


@dataclass(frozen=True)
class GemmOrderingRow(Row):
    """A multi-tile GEMM (128x128x256, load_ref) takes longer than a single tile (32x32x64), and a repeat gives
    the identical latency."""

    criterion: str = "multi-tile > single tile; repeat identical"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        one = bench.gemm(32, 32, 64, "load_ref", mode)["latency_ns"]
        many = bench.gemm(128, 128, 256, "load_ref", mode)["latency_ns"]
        again = bench.gemm(128, 128, 256, "load_ref", mode, fresh=True)["latency_ns"]
        holds = many > one and again == many
        return Outcome(chain_text([one, many]), holds, holds)


ROWS: dict[str, Row] = {r.case: r for r in (
    LatencyRow("pe_dma_local_16k", probe="SAME_CUBE_PE_LOCAL"),
    LatencyRow("pe_dma_remote_cube_worst_16k", probe="REMOTE_CUBE_PE_REMOTE_WORST"),
    LatencyRow("pe_dma_remote_sip_16k", probe="REMOTE_SIP"),
    OrderingRow("pe_dma_distance_order_16k"),
    LatencyRow("host_write_64k", probe="H2D_CUBE0", nbytes=64 * KiB),
    OrderingRow("probe_pe_local_vs_half", names=("SAME_CUBE_PE_LOCAL", "PROBE_PE_SAME_HALF", "PROBE_PE_CROSS_HALF")),
    CentreCornerRow("allreduce_center_vs_corner_torus", sips="torus6"),
    CentreCornerRow("allreduce_center_vs_corner_ring", sips="ring6"),
    CentreCornerRow("allreduce_center_vs_corner_mesh", sips="mesh6"),
    WindowRow("allreduce_torus_96k_latest", criterion="17.2 µs < latency < 30 µs"),
    BufferKindRow("allreduce_buffer_kind_64k"),
    RetiredIpcqRow("ipcq_vs_dma_intercube", claim="IPCQ >= raw DMA"),
    IpcqOverheadRow("ipcq_overhead_target"),
    GemmRow("gemm_load_ref_32x3072x32_window"),
    GemmRow("gemm_load_ref_32x3072x32_with_a_load", with_load=True),
    GemmTileCountRow("gemm_tile_counts"),
    GemmOrderingRow("gemm_multi_vs_single_tile"),
)}
LATENCY_ROWS = tuple(c for c, r in ROWS.items() if isinstance(r, LatencyRow))


def probe_table(bench: Bench, mode: str) -> pd.DataFrame:
    """The probe table (kbfast.measure.probe_table) on ``bench``'s system of every probe case the probe rows
    use, at the sizes they use, on the fluid fast path or exactly (for the invariants)."""
    by_size: dict[int, set[str]] = {}
    ref = reference_table()
    for row in ROWS.values():
        for case, nbytes in row.probes(ref):
            by_size.setdefault(nbytes, set()).add(case)
    points = [{"kind": "probe", "case": name, "size": nbytes, "method": "fluid"}
              for nbytes, names in sorted(by_size.items()) for name in sorted(names)]
    return probe_frame([m[0].details for m in measure_each(*bench.system(), points, (mode,))])


def check_registry(ref: pd.DataFrame) -> None:
    """Every reference row has an entry in :data:`ROWS` and every entry a reference row."""
    missing, extra = sorted(set(ref.index) - set(ROWS)), sorted(set(ROWS) - set(ref.index))
    if missing or extra:
        raise KbfastError(f"{REFERENCE_FILE}: rows without an evaluation in kbfast.calibrate.ROWS: {missing}; "
                          f"entries without a reference row: {extra}")


def evaluate_rows(spec: SystemSpec, modes: Iterable[str] = MODES, ref: pd.DataFrame | None = None,
                  bench: Bench | None = None) -> pd.DataFrame:
    """One row per reference case, in the CSV's order: reference, the figure and error per mode, status.

    ``status`` is ``retired`` for a retired row, ``n/a`` when the system lacks what the row measures (a
    second cube or SIP), ``ok`` when the row passes in every evaluated mode, else ``off``.  Columns of a mode
    that was not evaluated are empty.
    """
    modes = tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise KbfastError(f"modes {list(modes)}: use fast and/or exact")
    ref = reference_table() if ref is None else ref
    check_registry(ref)
    bench = bench or Bench(spec)
    out = []
    for case in ref.index:
        row = ROWS[case]
        rec: dict[str, Any] = {"case": case, "metric": ref.loc[case, "metric"],
                               "reference": row.reference(ref.loc[case]),
                               "fast": None, "exact": None, "fast_err": None, "exact_err": None, "fast_ok": None,
                               "exact_ok": None}
        oks = []
        try:
            for mode in modes:
                o = row.measure(bench, mode, ref)
                rec[mode], rec[f"{mode}_err"], rec[f"{mode}_ok"] = o.value, o.err, o.ok
                oks.append(o.ok)
        except KbfastError as err:      # the system lacks what the row measures (one cube, one SIP, ...)
            rec.update(status="n/a", unit=row.unit, criterion=f"not measurable here: {err}")
            out.append(rec)
            continue
        rec["status"] = "retired" if row.retired else ("ok" if all(oks) else "off")
        rec.update(unit=row.unit, criterion=row.criterion)
        out.append(rec)
    return pd.DataFrame(out, columns=COLUMNS)


def all_ok(df: pd.DataFrame) -> bool:
    """Every row that is not retired passes (the exit code of ``kbfast calibrate``)."""
    return bool((df["status"] != "off").all())
