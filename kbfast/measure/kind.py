"""What a workload kind is to the measuring layer: its fields, its generator and its measurement.

Each kind is one :class:`WorkloadKind`, defined in its own module of ``kbfast.measure`` (``collective``,
``probe``, ``gemm``, ``model``) and listed once in ``kbfast.measure.registry.WORKLOADS``.  Everything above
(sweeps, ``kbfast run``, ``kbfast probe``, calibrate, bench) reaches a kind through the registry: checking a
point before any kernel compiles (``prepare``), building its Program (``build``), measuring one point
(``measure``) and a batch of points (``measure_points``), and the data that presents it (``columns``,
``size_label``, ``report``).  No code outside a kind's own module branches on the kind's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.ir import Program
from kbfast.measure.methods import MODES
from kbfast.measure.warmup import FAST_KERNELS
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router


@dataclass(frozen=True)
class Built:
    """A workload's Program, and what its kind's measurement needs besides it: a collective (its launch: a
    collective counts latency from it, spec_pe §3.6), a probe case or traffic pattern, a GEMM case, a model
    step's first piece (the model kind measures the whole step)."""

    program: Program
    collective: Any = None
    case: Any = None
    gemm: Any = None
    model: Any = None


@dataclass
class Prepared:
    """One point checked before any kernel compiles (its kind's ``prepare``), and what its measurements in
    several modes and a trace of it share.

    ``plan``: the kind's plan of the point (a GEMM's case, a model step's compiled pieces, a probe case; None
    for a kind without one); ``built``: the point's Program, once a measurement has built it, so that
    ``--compare`` and ``--trace`` build it once; ``replay``: the exact replay a hybrid measurement of the point
    made, so that its exact mode (``--compare``, ``--trace``) does not replay it again."""

    plan: Any = None
    built: Built | None = None
    replay: Any = None


@dataclass(frozen=True)
class Measurement:
    """One point measured on one evaluator.

    ``row``: the metric row, the result columns a sweep stores for the point (built in one place per kind);
    ``result``: what the evaluator returned, for the tables and pictures a command adds (a
    ``kbfast.sim.result.Result``, a model's ``StepResult``; None where the figures come without one);
    ``details``: what a command shows besides the metric row, in the kind's own words (may be empty)."""

    row: dict[str, Any]
    result: Any = None
    details: dict[str, Any] | None = None


Measure = Callable[[Tables, Router, dict[str, Any], str, Prepared], Measurement]
MeasureBatch = Callable[[Tables, Router, list[dict[str, Any]], list[SystemSpec]], list[dict[str, Any]]]


@dataclass(frozen=True)
class WorkloadKind:
    """One workload kind: its fields with their defaults, its generator and its measurement.

    ``prepare(tables, router, workload)`` checks a point and plans it in pure Python (no kernel compiles), so
    that a command refuses bad input at once; ``measure(tables, router, workload, mode, prepared)`` measures
    one point (``mode`` in ``MODES``) into a :class:`Measurement`, from the point's :class:`Prepared`;
    ``measure_batch(tables, router, workloads, systems)`` measures points of one batch on the fast path (they
    share the tables of the first point and differ only in ``batch_fields``, the size and the
    ``batch_system_keys`` of their ``systems``) into one metric row each, in order.  A kind without
    ``measure_batch`` is measured point by point (:meth:`measure_points`)."""

    name: str
    description: str
    fields: dict[str, Any]                 # field -> default (``size`` may carry a unit suffix)
    build: Callable[[Tables, Router, dict[str, Any]], Built]
    measure: Measure
    measure_batch: MeasureBatch | None = None
    bool_fields: tuple[str, ...] = ()      # fields that take true or false only
    dim_fields: tuple[str, ...] = ()       # positive integers, K / M suffixes allowed (kbfast.workloads.gemm.parse_dim)
    columns: tuple[str, ...] = ()          # fields copied into the result table
    batch_fields: tuple[str, ...] = ()     # fields a batch's points may differ in (besides size)
    batch_system_keys: tuple[str, ...] = ("ipcq.buffer_kind", "ipcq.n_slots")   # system keys they may differ in
    max_batch: int | None = None           # points per batch (None: the sweep's limit)
    # A batched kind batches a point only when this holds of its workload (None: always): the all-reduce kind
    # batches its fluid points, whose kernel is the fluid schedule, and measures its hybrid ones one by one.
    batch_if: Callable[[dict[str, Any]], bool] | None = None
    kernels: tuple[str, ...] = ()          # Numba kernels its generator compiles on a first run (kbfast.measure.warmup)
    fast_kernels: tuple[str, ...] = FAST_KERNELS   # Numba kernels its fast path compiles on a first run
    # Keys its result never depends on (a system key path, ``ipcq.`` for a whole section, or
    # ``workload.<field>``), always or when a field has a value: (field, value, keys).  Sweeps cross-check
    # one of the points that differ only there.  Topology keys always matter.
    ignores: tuple[str, ...] = ()
    ignores_if: tuple[tuple[str, Any, tuple[str, ...]], ...] = ()
    # A point's fields checked against each other and completed before the point runs: (spec label, fields)
    # -> fields; a ConfigError names the spec, the key and the value.
    resolve: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None
    # Fields that name a file (a model YAML, say) and how it is read: (field, loader); a sweep reads each value
    # before any point runs (kbfast.sweep.spec.check_files).
    file_fields: tuple[tuple[str, Callable[[str], Any]], ...] = ()
    # Fields whose value names one of a fixed set (an algorithm, a layout, a fast method), with no topology:
    # (field, check(fields)), a KbfastError when the value names nothing; a sweep runs them on every value
    # before any point runs (kbfast.sweep.spec.check_names).  Checks that need the topology (a PE's name, a
    # probe case) stay in ``prepare``.
    checks: tuple[tuple[str, Callable[[dict[str, Any]], None]], ...] = ()
    # The point's plan, checked before any kernel compiles (a ConfigError or KbfastError names the bad input).
    prepare: Callable[[Tables, Router, dict[str, Any]], Any] | None = None
    # Empties the kind's memos (timings kept across points), for a cold measurement (kbfast bench).
    forget: Callable[[], None] | None = None
    size_label: str = "size (bytes)"       # what ``size`` means, on a plot's axis (kbfast.report.sweep)
    report: str | None = None              # the name of its own sweep tables and plots (kbfast.report.kinds)

    @property
    def batched(self) -> bool:
        """Whether the fast path measures a batch of its points together (it has ``measure_batch``)."""
        return self.measure_batch is not None

    def batches(self, workload: dict[str, Any]) -> bool:
        """Whether the fast path measures ``workload`` together with the other points of its batch
        (``measure_batch``, when ``batch_if`` holds)."""
        return self.measure_batch is not None and (self.batch_if is None or self.batch_if(workload))

    def measure_points(self, t: Tables, router: Router, workloads: list[dict[str, Any]],
                       systems: list[SystemSpec]) -> list[dict[str, Any]]:
        """The fast-path metric rows of points of one batch: ``measure_batch``, or point by point."""
        if self.batches(workloads[0]):
            return self.measure_batch(t, router, workloads, systems)
        return [self.measure(t, router, w, "fast", self.prepared(t, router, w)).row for w in workloads]

    def prepared(self, t: Tables, router: Router, workload: dict[str, Any]) -> Prepared:
        """``workload`` checked and planned (``prepare``; no plan for a kind without one)."""
        return Prepared(None if self.prepare is None else self.prepare(t, router, workload))

    def built(self, t: Tables, router: Router, workload: dict[str, Any], prepared: Prepared) -> Built:
        """The point's Program: the one a measurement of ``prepared`` built, else built now and kept there."""
        if prepared.built is None:
            prepared.built = self.build(t, router, workload)
        return prepared.built

    def misnamed(self, workload: dict[str, Any]) -> tuple[str, KbfastError] | None:
        """The first of ``checks`` that refuses ``workload``'s value: (field, the refusal), else None."""
        for name, check in self.checks:
            try:
                check(workload)
            except KbfastError as err:
                return name, err
        return None

    def ignored_keys(self, workload: dict[str, Any]) -> tuple[str, ...]:
        """The keys a workload of this kind with these fields does not read."""
        return self.ignores + tuple(k for f, v, keys in self.ignores_if if workload.get(f) == v for k in keys)

    def ignored_reason(self, key: str, workload: dict[str, Any]) -> str:
        """Why ``key`` does not change a result of this workload, in words."""
        for f, v, keys in self.ignores_if:
            if workload.get(f) == v and any(key == k or (k.endswith(".") and key.startswith(k)) for k in keys):
                return f"the {self.name} workload with {f}={v} does not read it"
        return f"the {self.name} workload does not read it"
