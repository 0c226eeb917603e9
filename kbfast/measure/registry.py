"""The workload registry: one table from a workload kind's name to its :class:`WorkloadKind` (its fields
and defaults, its generator and its measurement).

The sweep spec (``workload: {kind: ..., field: value}``), the sweep's batches, ``kbfast run``, ``kbfast
probe``, calibrate and bench read it; a new workload kind is its own module in ``kbfast.measure`` (its
``WorkloadKind``) plus one entry here.  ``prepare`` checks a point before any kernel compiles, ``build``
turns (tables, router, fields) into a Program and ``measure`` into a metric row; sizes are in bytes by then
(the spec parses suffixes).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kbfast.errors import KbfastError
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.measure.bottleneck import link_table
from kbfast.measure.collective import ALLREDUCE, COLLECTIVE, PE2PE
from kbfast.measure.gemm import GEMM
from kbfast.measure.kind import MODES, Built, Measurement, Prepared, WorkloadKind
from kbfast.measure.model import MODEL
from kbfast.measure.probe import PROBE, TRAFFIC
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router

__all__ = ["MODES", "WORKLOADS", "Built", "Measurement", "Prepared", "Stopped", "WorkloadKind", "build", "forget",
           "measure", "measure_each", "measure_modes", "occupancy", "prepare"]

WORKLOADS: dict[str, WorkloadKind] = {k.name: k for k in (ALLREDUCE, COLLECTIVE, PE2PE, PROBE, TRAFFIC, GEMM, MODEL)}


def prepare(t: Tables, router: Router, workload: dict[str, Any]) -> Prepared:
    """``workload`` (a mapping with ``kind`` and every field of that kind) checked and planned before any
    kernel compiles: bad input is refused here, by name."""
    return WORKLOADS[workload["kind"]].prepared(t, router, workload)


def build(t: Tables, router: Router, workload: dict[str, Any], prepared: Prepared | None = None) -> Built:
    """The Program of ``workload``: the one a measurement of ``prepared`` built already, else built now."""
    kind = WORKLOADS[workload["kind"]]
    return kind.built(t, router, workload, prepared or Prepared())


def measure(t: Tables, router: Router, workload: dict[str, Any], mode: str,
            prepared: Prepared | None = None) -> Measurement:
    """``workload`` measured on ``mode``'s evaluator; ``prepared`` (:func:`prepare`) shares the plan and
    the Program between the modes of one point."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    kind = WORKLOADS[workload["kind"]]
    return kind.measure(t, router, workload, mode, prepared or kind.prepared(t, router, workload))


def measure_modes(t: Tables, router: Router, workload: dict[str, Any], modes: tuple[str, ...],
                  prepared: Prepared | None = None) -> tuple[list[Measurement], KbfastError | None]:
    """``workload`` measured in each of ``modes``, in order, on one :class:`Prepared`.  A refusal of a mode
    after the first (an exact replay over the memory limit, say) ends it: the modes before are kept and the
    refusal returned, for the command to show the kept half and then exit with the refusal's code."""
    prepared = prepared or prepare(t, router, workload)
    out: list[Measurement] = []
    for mode in modes:
        try:
            out.append(measure(t, router, workload, mode, prepared))
        except KbfastError as err:
            if not out:
                raise
            return out, err
    return out, None


class Stopped(KbfastError):
    """A point of :func:`measure_each` was refused: ``finished`` holds the points measured before it (each
    in every mode), ``cause`` the refusal; the exit code is the refusal's."""

    def __init__(self, finished: list[list[Measurement]], cause: KbfastError):
        super().__init__(str(cause))
        self.finished, self.cause, self.exit_code = finished, cause, cause.exit_code


def measure_each(t: Tables, router: Router, workloads: list[dict[str, Any]],
                 modes: tuple[str, ...]) -> list[list[Measurement]]:
    """Each of ``workloads`` measured in each of ``modes`` (one list per workload, in order).  A refusal
    raises :class:`Stopped`, which carries the workloads finished before it."""
    done: list[list[Measurement]] = []
    try:
        for w in workloads:
            prepared = prepare(t, router, w)
            done.append([measure(t, router, w, mode, prepared) for mode in modes])
    except KbfastError as err:
        raise Stopped(done, err) from None
    return done


def occupancy(t: Tables, router: Router, workload: dict[str, Any], mode: str,
              span_ns: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-edge link table (utilisation over ``span_ns``, kbfast.measure.bottleneck.link_table) and the
    per (controller, pc) table of ``workload``'s Program on ``mode``'s evaluator: one more evaluation."""
    prog = build(t, router, workload).program
    res = run_exact(prog) if mode == "exact" else run_fast(prog)
    return link_table(res.edges, span_ns), res.pcs


def forget() -> None:
    """Empty every kind's memos (timings kept across points and sweeps): the next measurement is cold."""
    for kind in WORKLOADS.values():
        if kind.forget is not None:
            kind.forget()
