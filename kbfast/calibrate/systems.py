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
from kbfast.measure.gemm import evaluate_gemm
from kbfast.measure.methods import MODES
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import Program, ProgramBuilder
from kbfast.measure.probe import evaluate_case, exact_evaluator, fluid_evaluator
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import Collective, allreduce, hop_endpoints, pe2pe
from kbfast.workloads.gemm import gemm_case
from kbfast.workloads.probe_catalogue import ProbeCase, build_catalogue

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

    def gemm(self, m: int, n: int, k: int, staging: str, mode: str, fresh: bool = False) -> dict:
        """The GEMM figures (kbfast.workloads.gemm) of one GEMM on pe0 of cube 0; ``fresh`` runs it again."""
        key = ("gemm", m, n, k, staging, mode)
        if fresh or key not in self._gemm:
            t, r = self.system()
            self._gemm[key] = evaluate_gemm(t, r, gemm_case(t, r, m, n, k, staging), exact=mode == "exact")
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
        """Mean DMA latency (issue to response) of a probe case (spec_pe §10)."""
        if case not in self.catalogue():
            raise KbfastError(f"probe case {case} does not exist on {self.spec.name}")
        evaluator = exact_evaluator if mode == "exact" else fluid_evaluator
        return self._cached(("probe", case, nbytes, mode), lambda: float(
            evaluate_case(*self.system(), self.catalogue()[case], nbytes, evaluator)["latency_ns"]))

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
