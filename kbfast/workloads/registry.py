"""The workload registry: one table from a workload kind to its generator, fields and defaults.

The sweep spec (``workload: {kind: ..., field: value}``), the sweep's batches and the bench read it; a new
workload kind is one entry here.  ``build`` turns (tables, router, fields) into a Program; sizes are in
bytes by then (the spec parses suffixes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbfast.errors import KbfastError
from kbfast.ir import Program
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.config.models import load_model
from kbfast.workloads.collectives import Collective, allreduce, pe2pe
from kbfast.workloads.commands import TileLowering
from kbfast.workloads.gemm import GemmCase, gemm_case, parse_epilogues
from kbfast.workloads.model import STEP_DEFAULTS, Piece, Shape, build_piece, compile_model, refuse_unread, shape_for
from kbfast.workloads.probe_catalogue import ProbeCase, build_catalogue, random_traffic, select


@dataclass(frozen=True)
class Built:
    """A workload's Program, and what measures it: a collective counts latency from its launch (spec_pe
    §3.6); a probe case or traffic pattern is measured by ``kbfast.probe.evaluate_case``; a GEMM by
    ``kbfast.workloads.gemm.gemm_metrics``; a model step by ``kbfast.evaluate_model``."""

    program: Program
    collective: Collective | None = None
    case: ProbeCase | None = None
    gemm: GemmCase | None = None
    model: Piece | None = None         # a model step's first piece (kbfast.evaluate_model measures the step)


@dataclass(frozen=True)
class WorkloadKind:
    """One workload kind: its fields with their defaults, and its generator."""

    name: str
    description: str
    fields: dict[str, Any]                 # field -> default (``size`` may carry a unit suffix)
    build: Callable[[Tables, Router, dict[str, Any]], Built]
    bool_fields: tuple[str, ...] = ()      # fields that take true or false only
    dim_fields: tuple[str, ...] = ()       # positive integers, K / M suffixes allowed (kbfast.workloads.gemm.parse_dim)
    columns: tuple[str, ...] = ()          # fields copied into the result table
    batched: bool = False                  # the fast path evaluates all its points in one call (kbfast.fast.rescale)
    batch_fields: tuple[str, ...] = ()     # fields a batch's points may differ in (besides size)
    batch_system_keys: tuple[str, ...] = ("ipcq.buffer_kind", "ipcq.n_slots")   # system keys they may differ in
    max_batch: int | None = None           # points per batch (None: the sweep's limit)
    bus_bandwidth: bool = False            # a collective: report bus bandwidth (not for point-to-point)
    kernels: tuple[str, ...] = ()          # Numba kernels its generator compiles on a first run (kbfast.warmup)
    fast_kernels: tuple[str, ...] = ("runs", "fast")   # Numba kernels its fast path compiles on a first run
    # Keys its result never depends on (a system key path, ``ipcq.`` for a whole section, or
    # ``workload.<field>``), always or when a field has a value: (field, value, keys).  Sweeps cross-check
    # one of the points that differ only there.  Topology keys always matter.
    ignores: tuple[str, ...] = ()
    ignores_if: tuple[tuple[str, Any, tuple[str, ...]], ...] = ()
    # A point's fields checked against each other and completed before the point runs: (spec label, fields)
    # -> fields; a ConfigError names the spec, the key and the value.
    resolve: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None

    def ignored_keys(self, workload: dict[str, Any]) -> tuple[str, ...]:
        """The keys a workload of this kind with these fields does not read."""
        return self.ignores + tuple(k for f, v, keys in self.ignores_if if workload.get(f) == v for k in keys)

    def ignored_reason(self, key: str, workload: dict[str, Any]) -> str:
        """Why ``key`` does not change a result of this workload, in words."""
        for f, v, keys in self.ignores_if:
            if workload.get(f) == v and any(key == k or (k.endswith(".") and key.startswith(k)) for k in keys):
                return f"the {self.name} workload with {f}={v} does not read it"
        return f"the {self.name} workload does not read it"


def _allreduce(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    c = allreduce(t, router, int(w["size"]), w["algorithm"], w["ranks"], tile_io=bool(w["tile_io"]))
    return Built(c.program, collective=c)


def _pe2pe(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    c = pe2pe(t, router, w["hop"], int(w["size"]), raw_dma=bool(w["raw_dma"]), consume=bool(w["consume"]))
    return Built(c.program, collective=c)


def _probe(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    case = select(build_catalogue(t, router), [str(w["case"])])[0]
    return Built(case.program(t, router, int(w["size"])), case=case)


def _traffic(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    if w["pattern"] != "random":
        raise KbfastError(f"unknown traffic pattern {w['pattern']!r}: use random")
    case = random_traffic(t, int(w["n_flows"]), int(w["flow_seed"]))
    return Built(case.program(t, router, int(w["size"])), case=case)


def _gemm(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    case = gemm_case(t, router, int(w["m"]), int(w["n"]), int(w["k"]), staging=str(w["staging"]), pe=str(w["pe"]),
                     b_from=w["b_from"], epilogues=parse_epilogues(t, w["epilogues"]))
    return Built(case.program, gemm=case)


def _model(t: Tables, router: Router, w: dict[str, Any]) -> Built:
    """The first piece of the model step (a transformer's layer) as its exact Program; the sweep evaluates a
    model point through kbfast.evaluate_model, and this Program serves the link and PC tables."""
    model = load_model(str(w["model"]))
    shape = model_shape(model, w)
    piece = compile_model(t, model, shape, str(w["layout"]))[0]
    return Built(build_piece(t, router, piece, TileLowering(piece.commands)), model=piece)


def model_shape(model, w: dict[str, Any]) -> Shape | None:
    """The step's shape from a model workload's fields (None for a model without one, which refuses them:
    kbfast.workloads.model.shape_for)."""
    return shape_for(model, w["phase"], None if w["batch"] is None else int(w["batch"]), w["seq"], w["kv_len"])


def _model_fields(label: str, w: dict[str, Any]) -> dict[str, Any]:
    """A model point's fields: the step options its model does not read are refused (``workload.phase`` on the
    TP MLP, say), and a transformer's phase and batch defaults filled in (decode, 1) so its row names them;
    the shape itself is checked when the point runs.  A model that cannot be read is left to the point, which
    records why."""
    try:
        model = _model_of(str(w["model"]))
    except KbfastError:
        return w
    refuse_unread(model, w, label)
    if model.kind != "transformer":
        return w
    return {**w, **{k: v for k, v in STEP_DEFAULTS.items() if w[k] is None}}


_MODELS: dict[tuple, Any] = {}


def _model_of(name: str):
    """``load_model(name)``, remembered while the file is unchanged (a sweep expands thousands of points)."""
    path = Path(name)
    stat = path.stat() if path.is_file() else None
    key = (name, stat and (stat.st_mtime_ns, stat.st_size))
    if key not in _MODELS:
        _MODELS[key] = load_model(name)
    return _MODELS[key]


WORKLOADS: dict[str, WorkloadKind] = {k.name: k for k in (
    WorkloadKind("allreduce", "one all-reduce of `size` bytes per rank (kbfast run allreduce)",
                 {"algorithm": "lrab", "size": "96KiB", "ranks": None, "tile_io": True}, _allreduce,
                 bool_fields=("tile_io",), columns=("algorithm", "tile_io"), batched=True, bus_bandwidth=True,
                 kernels=("collectives",), fast_kernels=("runs", "fast", "points"),
                 ignores_if=(("algorithm", "lrab", ("ipcq.n_slots",)),)),   # one message in flight per channel
    WorkloadKind("pe2pe", "one PE-to-PE transfer of a hop class, IPCQ or raw DMA (kbfast run pe2pe)",
                 {"hop": "h3", "size": "4KiB", "raw_dma": False, "consume": True}, _pe2pe,
                 bool_fields=("raw_dma", "consume"), columns=("hop",),
                 ignores_if=(("raw_dma", True, ("ipcq.", "workload.consume")),)),
    WorkloadKind("probe", "one case of the probe catalogue (kbfast probe --list)",
                 {"case": "SAME_CUBE_PE_LOCAL", "size": "16KiB"}, _probe, columns=("case",), ignores=("ipcq.",)),
    WorkloadKind("traffic", "random PE-to-HBM flows",
                 {"pattern": "random", "n_flows": 64, "flow_seed": 0, "size": "16KiB"}, _traffic, ignores=("ipcq.",)),
    WorkloadKind("gemm", "one GEMM through a PE's tile pipeline (kbfast run gemm)",
                 {"m": 512, "n": 512, "k": 512, "staging": "load_ref", "pe": "sip0.cube0.pe0", "b_from": None,
                  "epilogues": ""},
                 _gemm, dim_fields=("m", "n", "k"), columns=("m", "n", "k", "staging"), batched=True,
                 batch_fields=("m", "n", "k", "staging"), fast_kernels=("runs", "fast", "pipeline"), ignores=("ipcq.",),
                 max_batch=25),   # a fluid GEMM takes up to seconds: progress and workers move every few seconds
    WorkloadKind("model", "one step of a model: a transformer layer x layers + LM head, the TP MLP or the "
                          "attention panels (kbfast run model)",
                 {"model": "llama3_70b", "phase": None, "batch": None, "seq": None, "kv_len": None, "layers": None,
                  "layout": "tp_pes", "method": "hybrid"},          # phase and batch: decode and 1 for a transformer
                 _model, columns=("model", "phase", "batch", "layout"), kernels=("collectives",), resolve=_model_fields,
                 batched=True, batch_fields=("model", "phase", "batch", "seq", "kv_len", "layers", "layout", "method"),
                 batch_system_keys=(),                          # a batch shares one system: tables and timings
                 max_batch=25,                                  # 0.1 s a point: small batches keep workers busy
                 fast_kernels=("runs", "fast", "pipeline", "exact")),   # the stand-in is replayed exactly
)}


def build(t: Tables, router: Router, workload: dict[str, Any]) -> Built:
    """The Program of ``workload`` (a mapping with ``kind`` and every field of that kind)."""
    return WORKLOADS[workload["kind"]].build(t, router, workload)
