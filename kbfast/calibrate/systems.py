"""The reference figures and the systems the calibration rows run on (kbfast.calibrate)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from kbfast.config.loader import apply_overrides, load_raw, validate
from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.measure.methods import MODES
from kbfast.measure.registry import WORKLOADS, Measurement, measure
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import ProbeCase, build_catalogue

TOL = 0.03                       # latency rows: |measured / reference - 1| <= 3 %
KiB = 1024
ORDER_BYTES = 16 * KiB           # the ordering rows compare 16 KiB PE DMA writes
TILE_96K, TILE_64K = 96 * KiB, 64 * KiB
PE2PE_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192, 10240)   # 128 B .. 10 KB (spec_ccl §8.2)
PE2PE_HOPS = ("h3", "h4")        # inter-cube, horizontal and vertical
REFERENCE_FILE = "reference_public.csv"
COLUMNS = ["case", "metric", "reference", "fast", "exact", "fast_err", "exact_err", "fast_ok", "exact_ok", "status", "unit",
           "criterion"]
# the rows as the CSV and JSON hold them (kbfast.cli.calibrate.file_table): a type per column, a figure that is
# text (an ordering, three buffer kinds) in its ``_text`` column, an error that is a pass or fail in ``_ok``
FILE_COLUMNS = ["case", "metric", "reference", "fast", "exact", "fast_err", "exact_err", "fast_ok", "exact_ok",
                "reference_text", "fast_text", "exact_text", "status", "unit", "criterion"]


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
        """Tables and router of the spec with the SIPs of preset ``sips`` and IPCQ ``buffer_kind`` (built once)."""
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

    def measure(self, workload: dict[str, Any], mode: str, sips: str | None = None,
                buffer_kind: str | None = None) -> Measurement:
        """``workload`` (its kind's other fields at their defaults) measured through the registry on
        :meth:`system` ``(sips, buffer_kind)``."""
        t, r = self.system(sips, buffer_kind)
        return measure(t, r, {**WORKLOADS[workload["kind"]].fields, **workload}, mode)

    def gemm(self, m: int, n: int, k: int, staging: str, mode: str, fresh: bool = False) -> dict:
        """The GEMM figures (kbfast.workloads.gemm) of one GEMM on pe0 of cube 0; ``fresh`` runs it again."""
        key = ("gemm", m, n, k, staging, mode)
        if fresh or key not in self._gemm:
            self._gemm[key] = self.measure({"kind": "gemm", "m": m, "n": n, "k": k, "staging": staging}, mode).details
        return self._gemm[key]

    def catalogue(self) -> dict[str, ProbeCase]:
        """The probe catalogue of the spec's system (built once)."""
        if self._catalogue is None:
            self._catalogue = build_catalogue(*self.system())
        return self._catalogue

    def _cached(self, key: tuple, compute: Callable[[], float]) -> float:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def probe_ns(self, case: str, nbytes: int, mode: str) -> float:
        """Mean DMA latency (issue to response) of a probe case (spec_pe §10), on the fluid fast path or exactly."""
        if case not in self.catalogue():
            raise KbfastError(f"probe case {case} does not exist on {self.spec.name}")
        return self._cached(("probe", case, nbytes, mode), lambda: float(self.measure(
            {"kind": "probe", "case": case, "size": nbytes, "method": "fluid"}, mode).details["latency_ns"]))

    def allreduce_ns(self, sips: str, algorithm: str, nbytes: int, kind: str = "tcm", mode: str = "exact") -> float:
        """One all-reduce of ``nbytes`` per cube tile on the spec with the SIPs of preset ``sips``."""
        return self._cached(("allreduce", sips, algorithm, nbytes, kind, mode), lambda: self.measure(
            {"kind": "allreduce", "algorithm": algorithm, "size": nbytes}, mode, sips, kind).row["latency_ns"])

    def pe2pe_ns(self, hop: str, n: int, mode: str = "exact", **fields: bool) -> float:
        """One PE-to-PE transfer of ``n`` bytes over a hop class (spec_pe §11.6): IPCQ send/recv, or with
        ``raw_dma=True`` the raw DMA load and store (``load=False``: the store into the peer's slice alone,
        issue to response)."""
        return self._cached(("pe2pe", hop, n, mode, *sorted(fields.items())), lambda: self.measure(
            {"kind": "pe2pe", "hop": hop, "size": n, **fields}, mode).row["latency_ns"])
