"""Calibration against the kernbench reference figures: evaluate every row, fit free parameters (design §12).

:data:`ROWS` maps every case of ``calibration/reference_public.csv`` to how it is measured on a system spec
in one mode (``fast`` path or ``exact`` replay) and what passes:

* **latency** (spec_fabric §8, spec_memory §10.2): one isolated probe transfer; ``err = measured /
  reference - 1``, ok when ``|err| <= 3 %``;
* **ordering** (spec_pe §10): probe latencies at 16 KiB, ok when strictly increasing;
* **centre vs corner** (spec_ccl §8.1): ``change = centre / corner - 1`` of the lrab all-reduce at 96 KiB,
  ok when ``centre < corner`` and ``0.02 <= -change <= 0.30``.  The reference fractions come from an older
  model, so only the sign and a magnitude band are checked;
* **upper bound**: the torus6 96 KiB all-reduce lies between the older model's 17.2 µs and the 30 µs guard;
* **buffer kinds**: at 64 KiB on torus6, ``tcm < hbm < sram``, each ratio to tcm within +-25 % of the
  reference ratio (1.8 and 2.0);
* **IPCQ overhead** (spec_ccl §8.2, ADR-0023 T5): IPCQ send/recv minus one DMA write of the same size, below
  100 ns on the hops h3 and h4 for every size from 128 B to 10 KB;
* **GEMM** (spec_pe §5.6): the 32x3072x32 load_ref composite window (992 ns) and the latency with the up-front
  A load (1765 ns) within 3 %; the tile counts of the reference shapes; a multi-tile GEMM slower than one
  tile, and a repeat identical;
* **retired**: ``ipcq_vs_dma_intercube`` ("IPCQ >= raw DMA") was measured on an older model.  Today's
  semantics put IPCQ about 12 ns below raw DMA (spec README, decisions).  The row reports that gap and is
  never a failure.

The all-reduce rows run on the given spec with the SIP arrangement (``sips``) of the torus6, ring6 or mesh6
preset, so a fitted or overridden parameter reaches them too.

:func:`fit` adjusts named parameters with ``scipy.optimize.least_squares`` on the relative errors of the
latency rows.  It uses the fast path only: those rows are isolated transfers, where fast == exact (parity
P1, design §7).
"""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from kbfast import __version__
from kbfast.config.loader import (PARAM_SET_DIR_ENV, apply_overrides, check_key_path, check_param_set_name,
                                  load_raw, lookup, param_set_path, preset_names, user_param_set_dir, validate)
from kbfast.config.schema import SystemSpec
from kbfast.errors import ConfigError, KbfastError
from kbfast.measure.gemm import evaluate_gemm
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import Program, ProgramBuilder
from kbfast.measure.probe import evaluate_case, exact_evaluator, fluid_evaluator, run_probes
from kbfast.report.formats import column_unit, duration, in_unit
from kbfast.tiling import plan_gemm
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import Collective, allreduce, hop_endpoints, pe2pe
from kbfast.workloads.gemm import gemm_case
from kbfast.workloads.probes import ProbeCase, build_catalogue

MODES = ("fast", "exact")
TOL = 0.03                       # latency rows: |measured / reference - 1| <= 3 %
KiB = 1024
ORDER_BYTES = 16 * KiB           # the ordering rows compare 16 KiB PE DMA writes
TILE_96K, TILE_64K = 96 * KiB, 64 * KiB
PE2PE_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192, 10240)   # 128 B .. 10 KB (spec_ccl §8.2)
PE2PE_HOPS = ("h3", "h4")        # inter-cube, horizontal and vertical
REFERENCE_FILE = "reference_public.csv"
COLUMNS = ["case", "metric", "reference", "fast", "exact", "fast_err", "exact_err", "status", "unit", "criterion"]


def reference_csv() -> Path:
    """The packaged reference figures (``calibration/reference_public.csv``, package ``kbfast.calibration``)."""
    return Path(str(resources.files("kbfast.calibration").joinpath(REFERENCE_FILE)))


def reference_table(path: Path | None = None) -> pd.DataFrame:
    """The reference rows indexed by case; ``value`` stays text (one row lists three figures)."""
    df = pd.read_csv(path or reference_csv(), dtype={"value": str})
    return df.set_index("case")


def derive(spec: SystemSpec, overrides: dict[str, Any], label: str = "calibrate") -> SystemSpec:
    """``spec`` with dotted-key overrides, validated again (a ``ConfigError`` names ``label`` and the key)."""
    return validate(label, apply_overrides(spec.model_dump(), overrides, label=label))


def _run(p: Program, mode: str):
    return run_exact(p) if mode == "exact" else run_fast(p)


def collective_ns(c: Collective, mode: str) -> float:
    """Latency of a collective or pe2pe transfer: max ``pe_exec_ns`` from the start barrier (spec_ccl §8)."""
    return _run(c.program, mode).latency_ns(c.launch_ns)[0]


class Bench:
    """The systems the rows of one spec run on, each built once: the spec and its 6-SIP variants.

    ``sips`` names a preset whose SIP arrangement replaces the spec's (``torus6``, ``ring6``, ``mesh6``);
    every other key keeps the spec's value.
    """

    def __init__(self, spec: SystemSpec):
        self.spec = spec
        self._systems: dict[tuple, tuple[Tables, Router]] = {}
        self._catalogue: dict[str, ProbeCase] | None = None
        self._memo: dict[tuple, float] = {}
        self._gemm: dict[tuple, dict] = {}

    def system(self, sips: str | None = None, buffer_kind: str | None = None) -> tuple[Tables, Router]:
        key = (sips, buffer_kind)
        if key not in self._systems:
            over: dict[str, Any] = {}
            if sips is not None:
                over["sips"] = load_raw(sips)[1]["sips"]
            if buffer_kind is not None:
                over["ipcq.buffer_kind"] = buffer_kind
            t = build_tables(derive(self.spec, over, f"{self.spec.name} with {over}") if over else self.spec)
            self._systems[key] = (t, Router(t))
        return self._systems[key]

    def gemm(self, m: int, n: int, k: int, staging: str, mode: str, fresh: bool = False) -> dict:
        """The GEMM figures (kbfast.workloads.gemm) of one GEMM on pe0 of cube 0; ``fresh`` runs it again."""
        key = ("gemm", m, n, k, staging, mode)
        if fresh or key not in self._gemm:
            t, r = self.system()
            self._gemm[key] = evaluate_gemm(t, r, gemm_case(t, r, m, n, k, staging), exact=mode == "exact")
        return self._gemm[key]

    def catalogue(self) -> dict[str, ProbeCase]:
        if self._catalogue is None:
            self._catalogue = build_catalogue(*self.system())
        return self._catalogue

    def _cached(self, key: tuple, compute: Callable[[], float]) -> float:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def probe_ns(self, case: str, nbytes: int, mode: str) -> float:
        """Mean DMA latency (issue to response) of a probe case (spec_pe §10)."""
        if case not in self.catalogue():
            raise KbfastError(f"probe case {case} does not exist on {self.spec.name}")
        evaluator = exact_evaluator if mode == "exact" else fluid_evaluator
        return self._cached(("probe", case, nbytes, mode), lambda: float(
            evaluate_case(*self.system(), self.catalogue()[case], nbytes, evaluator)["latency_ns"]))

    def probe_frame(self, mode: str) -> pd.DataFrame:
        """``run_probes`` of every probe case the probe rows use, at the sizes they use (for the invariants)."""
        by_size: dict[int, set[str]] = {}
        ref = reference_table()
        for row in ROWS.values():
            for case, nbytes in row.probes(ref):
                by_size.setdefault(nbytes, set()).add(case)
        evaluator = exact_evaluator if mode == "exact" else fluid_evaluator
        t, r = self.system()
        frames = [run_probes(t, r, [self.catalogue()[n] for n in sorted(names)], [nbytes], evaluator)
                  for nbytes, names in sorted(by_size.items())]
        return pd.concat(frames, ignore_index=True)

    def allreduce_ns(self, sips: str, algorithm: str, nbytes: int, kind: str = "tcm", mode: str = "exact") -> float:
        """One all-reduce of ``nbytes`` per cube tile on the spec with the SIPs of preset ``sips``."""
        return self._cached(("allreduce", sips, algorithm, nbytes, kind, mode), lambda: collective_ns(
            allreduce(*self.system(sips, kind), nbytes, algorithm), mode))

    def ipcq_ns(self, hop: str, n: int, mode: str = "exact") -> float:
        """One IPCQ send/recv of ``n`` bytes over a hop class (spec_pe §11.6)."""
        return self._cached(("ipcq", hop, n, mode), lambda: collective_ns(pe2pe(*self.system(), hop, n), mode))

    def raw_dma_ns(self, hop: str, n: int, mode: str = "exact") -> float:
        """The same transfer as a raw DMA: local HBM load, then the remote store (spec_pe §11.6)."""
        return self._cached(("raw", hop, n, mode), lambda: collective_ns(
            pe2pe(*self.system(), hop, n, raw_dma=True), mode))

    def dma_write_ns(self, hop: str, n: int, mode: str = "exact") -> float:
        """One PE DMA write of ``n`` bytes into the peer PE's HBM slice, issue to response."""
        def compute() -> float:
            t, r = self.system()
            s, d = hop_endpoints(t, hop)
            b = ProgramBuilder(t, r, name=f"dma-write-{hop}")
            w = b.dma(b.pe_agent(pe_block(t, *s)), hbm_ctrl(t, *d), n, write=True)
            return _run(b.build(), mode).op_latency_ns(w)
        return self._cached(("write", hop, n, mode), compute)


# ----------------------------------------------------------------------------------------------------------------
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
    ``centre < corner`` and ``0.02 <= -change <= 0.30`` (the reference fractions are from an older model)."""

    sips: str = ""
    unit: str = "fraction"
    criterion: str = "centre < corner by 2 to 30 % (the reference is from an older model)"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        centre = bench.allreduce_ns(self.sips, "lrab", TILE_96K, mode=mode)
        corner = bench.allreduce_ns(self.sips, "lrab_corner", TILE_96K, mode=mode)
        change = centre / corner - 1.0
        holds = centre < corner and 0.02 <= -change <= 0.30
        return Outcome(change, holds, holds)


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
    """lrab at 64 KiB on torus6 per buffer kind: tcm < hbm < sram, and hbm/tcm, sram/tcm each within
    +-25 % of the reference ratio rounded to one decimal (1.8, 2.0; spec_ccl §2.7)."""

    unit: str = "ratio"
    criterion: str = "tcm < hbm < sram; hbm/tcm, sram/tcm within 25 % of 1.8, 2.0"

    def reference(self, ref: pd.Series) -> str:
        return f"{ref['value']} µs"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        us = buffer_kind_targets(ref, self.case)
        got = {k: bench.allreduce_ns("torus6", "lrab", TILE_64K, kind=k, mode=mode) for k in ("tcm", "hbm", "sram")}
        ratios = {k: got[k] / got["tcm"] for k in ("hbm", "sram")}
        holds = got["tcm"] < got["hbm"] < got["sram"] and all(
            abs(ratios[k] / round(us[k] / us["tcm"], 1) - 1) <= 0.25 for k in ratios)
        text = "; ".join(f"{k} {duration(got[k])}" for k in got) + " (" + ", ".join(
            f"{k}/tcm {ratios[k]:.3f}" for k in ratios) + ")"
        return Outcome(text, holds, holds)


@dataclass(frozen=True)
class IpcqOverheadRow(Row):
    """Max over h3/h4 and 128 B .. 10 KB of IPCQ send/recv minus one DMA write, below the target."""

    unit: str = "ns"
    criterion: str = "max overhead < 100 ns"

    def measure(self, bench: Bench, mode: str, ref: pd.DataFrame) -> Outcome:
        worst = max(bench.ipcq_ns(h, n, mode) - bench.dma_write_ns(h, n, mode)
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
        gaps = [bench.ipcq_ns(h, n, mode) - bench.raw_dma_ns(h, n, mode) for h in PE2PE_HOPS for n in PE2PE_SIZES]
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
                               "fast": None, "exact": None, "fast_err": None, "exact_err": None}
        oks = []
        try:
            for mode in modes:
                o = row.measure(bench, mode, ref)
                rec[mode], rec[f"{mode}_err"] = o.value, o.err
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


# ----------------------------------------------------------------------------------------------------------------
# Fitting (design §12).

# key -> (lo, hi, finite-difference step in the key's unit).  Bandwidths enter as n / bw and lengths as
# mm * ns_per_mm, so their responses are smooth.  Keys under ``cube.`` move the floor plan: router columns,
# node positions and so routes change in steps, and with ns_per_mm = 0 geometry reaches latency only through
# those route changes.  Their response is piecewise constant; the coarse step samples it.
FIT_DEFAULTS: dict[str, tuple[float, float, float]] = {
    "fabric.ns_per_mm": (0.0, 5.0, 0.01),
    "link.io_conn.bw_gbs": (32.0, 1024.0, 0.1),
    "link.io_to_cube.bw_gbs": (32.0, 1024.0, 0.1),
    "link.ucie_internal.bw_gbs": (32.0, 2048.0, 0.1),
    "link.pcie_ep_noc.bw_gbs": (32.0, 1024.0, 0.1),
    "cube.geometry.w_mm": (10.0, 20.0, 0.5),
    "cube.pe_layout.pe_pitch_mm": (1.0, 2.45, 0.1),
}
NO_SENSITIVITY = 1e-12           # a Jacobian column below this (relative error per unit of u) moves no row


@dataclass(frozen=True)
class FitParam:
    """A free parameter: dotted key, bounds, finite-difference step (key's unit), start value."""

    key: str
    lo: float
    hi: float
    step: float
    start: float

    @property
    def smooth(self) -> bool:
        """False for floor-plan keys (``cube.*``), whose response is piecewise constant."""
        return not self.key.startswith("cube.")

    @property
    def span(self) -> float:
        return self.hi - self.lo


def parse_fit(items: list[str], spec: SystemSpec) -> list[FitParam]:
    """``KEY`` or ``KEY=LO:HI`` -> FitParams; bad keys and bounds raise ``ConfigError`` naming the key."""
    params: list[FitParam] = []
    for item in items:
        key, _, bounds = item.partition("=")
        key = key.strip()
        check_key_path("--fit", key)
        if key in [p.key for p in params]:
            raise ConfigError("--fit", key, item, "the key is given twice")
        try:
            value = lookup(spec, key)
        except KeyError:
            raise ConfigError("--fit", key, item, "not a parameter of the validated system (a key inside a "
                              "mapping such as routing.weight_mm cannot be fitted)",
                              "fit a bandwidth, length or time, e.g. fabric.ns_per_mm") from None
        if not isinstance(value, float):
            raise ConfigError("--fit", key, value, "not a continuous parameter (only real-valued keys are fitted)",
                              "fit a bandwidth, length or time")
        if bounds:
            try:
                lo, hi = (float(x) for x in bounds.split(":"))
            except ValueError:
                raise ConfigError("--fit", key, bounds, "bounds must be LO:HI", f"e.g. --fit {key}=1:2") from None
        elif key in FIT_DEFAULTS:
            lo, hi, _ = FIT_DEFAULTS[key]
        else:
            raise ConfigError("--fit", key, item, "no default bounds for this key",
                              f"give them as {key}=LO:HI; keys with default bounds: {', '.join(FIT_DEFAULTS)}")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            swapped = f"{hi:g}:{lo:g}" if math.isfinite(lo + hi) and lo > hi else "1:2"
            raise ConfigError("--fit", key, bounds, "bounds need finite LO < HI", f"e.g. --fit {key}={swapped}")
        for end in (lo, hi):   # both ends must give a valid system
            derive(spec, {key: end}, label="--fit")
        default_step = (hi - lo) / (20 if key.startswith("cube.") else 1000)   # coarse for the floor plan
        step = min(FIT_DEFAULTS[key][2] if key in FIT_DEFAULTS else default_step, (hi - lo) / 2)
        params.append(FitParam(key, lo, hi, step, min(max(float(value), lo), hi)))
    if not params:
        raise KbfastError("--fit needs at least one key")
    return params


@dataclass
class FitResult:
    """Fitted values, residuals (relative errors per row) before and after, and sensitivities.

    ``sensitivity[key][case]`` = d err / d(dp / scale), scale = :func:`sensitivity_scale` (|p| at the
    solution, the bound span when p = 0), from a bounded forward difference with the key's step; None for a
    key with no sensitivity.  ``fitted`` lists the keys that moved at least one row and so were fitted.
    """

    params: list[FitParam]
    values: dict[str, float]
    fitted: list[str]
    cases: list[str]
    reference: dict[str, float]
    before: dict[str, float]
    after: dict[str, float]
    sensitivity: dict[str, dict[str, float] | None]
    nfev: int
    message: str

    @property
    def fitted_values(self) -> dict[str, float]:
        return {k: self.values[k] for k in self.fitted}


def sensitivity_scale(p: FitParam, value: float) -> float:
    """What a relative change of ``p`` is relative to: its value, or its bound span when the value is 0."""
    return abs(value) if abs(value) > 1e-9 * p.span else p.span


def fit(spec: SystemSpec, params: list[FitParam], reference: dict[str, float] | None = None,
        cases: Iterable[str] = LATENCY_ROWS) -> FitResult:
    """Least squares on ``err_i = latency_i(p) / reference_i - 1`` over the latency rows, fast path.

    Each key is scaled to ``u = (p - lo) / (hi - lo)`` in [0, 1]; ``scipy.optimize.least_squares``
    (trf, bounds [0, 1]) uses a Jacobian of bounded forward differences with the key's step (backward at the
    upper bound).  A key whose column is zero at the start moves no row: it is reported with no sensitivity
    and keeps its value.  The fast path equals the exact replay on these isolated transfers (parity P1).
    """
    from scipy.optimize import least_squares

    cases = list(cases)
    ref = reference_table()
    target = reference or {c: float(ref.loc[c, "value"]) for c in cases}
    rows = [ROWS[c] for c in cases]
    if not all(isinstance(r, LatencyRow) for r in rows):
        raise KbfastError(f"fit: only latency rows can be fitted ({', '.join(LATENCY_ROWS)})")
    lo = np.array([p.lo for p in params])
    span = np.array([p.span for p in params])
    start = np.array([p.start for p in params])
    u0 = (start - lo) / span
    memo: dict[tuple, np.ndarray] = {}

    def values_at(u: np.ndarray) -> np.ndarray:
        """p = lo + u (hi - lo); exactly the start value where u is the start, exactly a bound at 0 and 1
        (trf keeps its iterates strictly inside the bounds)."""
        u = np.where(u < 1e-9, 0.0, np.where(u > 1 - 1e-9, 1.0, u))
        return np.where(u == u0, start, lo + u * span)

    def residuals(u: np.ndarray) -> np.ndarray:
        key = tuple(float(v) for v in values_at(u))
        if key not in memo:
            bench = Bench(derive(spec, {p.key: v for p, v in zip(params, key)}, label="--fit"))
            memo[key] = np.array([r.measure(bench, "fast", ref, target[r.case]).err for r in rows])
        return memo[key]

    def jacobian(u: np.ndarray, cols: list[int]) -> np.ndarray:
        base = residuals(u)
        jac = np.zeros((len(rows), len(cols)))
        for j, col in enumerate(cols):
            h = params[col].step / span[col]
            h = h if u[col] + h <= 1.0 else -h
            up = u.copy()
            up[col] += h
            jac[:, j] = (residuals(up) - base) / h
        return jac

    before = residuals(u0)
    moving = np.abs(jacobian(u0, list(range(len(params))))).max(axis=0) > NO_SENSITIVITY
    cols = [i for i in range(len(params)) if moving[i]]
    u = u0.copy()
    nfev, message = 0, "no parameter moves any row: nothing fitted"
    if cols:
        def sub(x: np.ndarray) -> np.ndarray:
            full = u0.copy()
            full[cols] = x
            return full

        sol = least_squares(lambda x: residuals(sub(x)), u0[cols], jac=lambda x: jacobian(sub(x), cols),
                            bounds=(0.0, 1.0), method="trf", x_scale=1.0, xtol=1e-12, ftol=1e-12, gtol=1e-12,
                            max_nfev=200)
        u, nfev, message = sub(sol.x), int(sol.nfev), str(sol.message)
    after = residuals(u)
    values = dict(zip([p.key for p in params], map(float, values_at(u))))
    jac = jacobian(u, list(range(len(params))))
    sensitivity: dict[str, dict[str, float] | None] = {}
    for i, p in enumerate(params):
        col = jac[:, i] / span[i] * sensitivity_scale(p, values[p.key])
        sensitivity[p.key] = {c: float(s) for c, s in zip(cases, col)} if moving[i] or np.any(col) else None
    return FitResult(params, values, [params[i].key for i in cols], cases, dict(target),
                     dict(zip(cases, map(float, before))), dict(zip(cases, map(float, after))), sensitivity,
                     nfev, message)


def topology_labels(topology: str | Path | None = None) -> dict[str, list[str]]:
    """``param_set`` label -> the topologies that name it: every preset, and ``topology`` (a preset name or a
    YAML file) when given."""
    names = [*preset_names(), *([str(topology)] if topology is not None else [])]
    out: dict[str, list[str]] = {}
    for name in dict.fromkeys(names):
        label = load_raw(name)[1].get("param_set")
        if isinstance(label, str):
            out.setdefault(label, []).append(name)
    return out


def param_set_file(name: str, overwrite: bool = False, topology: str | Path | None = None) -> Path:
    """Where ``--save NAME`` writes: ``NAME.yaml`` in the user's parameter-set folder (``$KBFAST_CALIBRATION_DIR``
    or ``~/.config/kbfast/calibration``, :func:`kbfast.config.loader.user_param_set_dir`), checked before any
    fit runs: a plain name; a folder that is one and can be written (created when missing); and, unless
    ``overwrite``, neither the name of a saved set (in any folder searched) nor a label that a topology's
    ``param_set`` uses (the presets' and ``topology``'s): a set under that label would change every later
    run of those topologies."""
    check_param_set_name("--save", "param_set", name)
    folder = user_param_set_dir()
    hint = f"set {PARAM_SET_DIR_ENV} to a writable folder"
    if folder.exists() and not folder.is_dir():
        raise ConfigError("--save", "param_set", name, f"{folder} is a file, not a parameter-set folder", hint)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kbfast-write-test-"):
            pass
    except OSError as err:
        raise ConfigError("--save", "param_set", name, f"cannot write parameter sets to {folder} "
                          f"({err.strerror or err})", hint) from None
    if not overwrite:
        existing = param_set_path(name)
        if existing is not None:
            raise ConfigError("--save", "param_set", name, f"a parameter set of that name exists: {existing}",
                              "give another name, or add --overwrite to replace it")
        users = topology_labels(topology).get(name)
        if users:
            raise ConfigError("--save", "param_set", name,
                              f"it is the param_set label of {', '.join(users)}: saved under it, the fitted "
                              "values would change every later run of them",
                              "give another name and load it with --set param_set=NAME; --overwrite saves "
                              "under the label all the same")
    return folder / f"{name}.yaml"


def param_set_document(name: str, result: FitResult, spec: SystemSpec, topology: str,
                       overrides: dict[str, Any]) -> dict[str, Any]:
    """The YAML document of a saved set: the fitted values and their provenance (no clock time: the same
    fit writes the same file)."""
    csv = reference_csv()
    return {
        "name": name,
        "description": f"fitted by kbfast calibrate on {topology}",
        "values": dict(result.fitted_values),
        "provenance": {
            "kbfast_version": __version__,
            "topology": topology,
            "topology_param_set": spec.param_set,
            "overrides": {k: v for k, v in overrides.items()},
            "reference": {"file": csv.name, "sha256": hashlib.sha256(csv.read_bytes()).hexdigest()},
            "rows": list(result.cases),
            "mode": "fast",
            "method": "scipy.optimize.least_squares trf on u = (p - lo) / (hi - lo), bounded forward differences",
            "parameters": {p.key: {"start": p.start, "lo": p.lo, "hi": p.hi, "step": p.step,
                                   "fitted": p.key in result.fitted, "value": result.values[p.key]}
                           for p in result.params},
            "residuals": {c: {"reference": result.reference[c], "before": result.before[c], "after": result.after[c]}
                          for c in result.cases},
            "sensitivity": result.sensitivity,
        },
    }


def save_param_set(name: str, result: FitResult, spec: SystemSpec, topology: str,
                   overrides: dict[str, Any], overwrite: bool = False) -> Path:
    """Write ``NAME.yaml`` in the user's parameter-set folder (:func:`param_set_file`, see
    :func:`param_set_document`); a topology loads it by ``param_set``."""
    if not result.fitted:
        raise KbfastError(f"--save {name}: no parameter was fitted (none moves a row), nothing to save")
    path = param_set_file(name, overwrite, topology)
    doc = param_set_document(name, result, spec, topology, overrides)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# kbfast parameter set, written by `kbfast calibrate --fit ... --save`\n"
                        + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    except OSError as err:
        raise ConfigError("--save", "param_set", name, f"cannot write {path}: {err.strerror}",
                          f"set {PARAM_SET_DIR_ENV} to a writable folder") from None
    return path
