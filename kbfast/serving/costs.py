"""Step costs of a serving run: what one decode step of ``batch`` users at a KV length, and one prefill of a
prompt, take on the system (docs/serving.md "Step costs").

* **Shapes.** The model's steps take one KV length for every user of a decode step and one prompt length per
  prefill (kbfast.workloads.model.Shape), in whole *granules*: the tokens a layer spreads over its attention
  ring's PEs (``ring`` PEs, one KV row each).  A decode step is timed at its users' mean KV length rounded up
  to a granule: a user's attention (a score and a PV GEMM over its KV rows) grows with its own length, so the
  batch's attention is the mean's; a prefill at its prompt rounded up to a granule (padding).
* **Direct** (:class:`DirectCosts`): every distinct shape evaluated once (kbfast.measure.model.run_step), on the
  fast path (its point, no bounds) or exactly, on ``--jobs`` processes.  A shape is timed whether or not its
  KV cache fits the HBM slice (``fit_hbm`` False): the run holds its cache to :func:`memory`'s capacity
  itself, and a grid's corner (the most users at the longest KV length) may lie beyond it.
* **Interpolated** (:class:`InterpolatedCosts`): the fast path at a grid of shapes that covers the run, decode
  bilinear in (batch, KV length) (``scipy.interpolate.RegularGridInterpolator``) and prefill linear in the prompt
  length.  The decode grid holds both sides of every GEMM tile edge of the batch (its weight GEMMs' M: 33
  users need two 32-row tiles where 32 need one, a step in cost no line through its neighbours follows); then
  every interpolant is checked against direct evaluations at held-out shapes between the grid's points.  A
  held-out shape more than ``TOLERANCE`` off adds its batch and KV length (or its prompt length) to the grid,
  and the check runs again on new held-out shapes, at most ``REFINE_ROUNDS`` times.  The checks are kept
  (``checks``) and printed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from multiprocessing import get_context
from dataclasses import dataclass, field

import numpy as np

from kbfast.config.models import Transformer
from kbfast.errors import KbfastError
from kbfast.measure.model import plan_step, run_step
from kbfast.sweep.runner import worker_init
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.model import Shape, attention_ring, compile_model

TOLERANCE = 0.02          # an interpolant's largest relative error at a held-out shape (issue: within 2 %)
REFINE_ROUNDS = 4         # grid refinements after a failed check
KV_POINTS = 3             # KV lengths of the first decode grid (geometric, whole granules)
PROMPT_POINTS = 4         # prompt lengths of the first prefill grid


@dataclass(frozen=True)
class StepOptions:
    """How every step of the run is evaluated: the model on the system, with kbfast.measure.model.plan_step's
    options."""

    model: Transformer
    layout: str = "tp_pes"
    method: str = "hybrid"
    collective: str | None = None
    sequence_parallel: bool | None = None
    overlap: str | None = None


@dataclass(frozen=True)
class Memory:
    """The KV cache a working PE can hold for the run (docs/serving.md "KV capacity")."""

    granule: int              # tokens per KV row of every attention-ring PE: shapes come in whole granules
    bytes_per_token: int      # KV bytes one token adds to each working PE (every layer, K and V)
    capacity_tokens: int      # tokens of KV cache the run can hold: the slice's bytes after weights and activations
    weights: int              # per working PE, bytes
    activations: int          # the largest step's, bytes
    hbm_slice: int


def memory(t: Tables, opts: StepOptions, max_batch: int, max_prompt: int) -> Memory:
    """What the KV cache may use: each working PE's HBM slice less every layer's and the LM head's weights and
    the largest activations of a decode step of ``max_batch`` users or a prefill of ``max_prompt`` tokens."""
    g = attention_ring(t, opts.model, opts.layout)
    layer, head = compile_model(t, opts.model, Shape("decode", 1, 1, g), opts.layout, collective=opts.collective,
                                sequence_parallel=opts.sequence_parallel, overlap=opts.overlap, fit_hbm=False)
    per_token = layer.memory["kv_cache"] // g
    weights = layer.memory["weights"] + head.memory["weights"]
    acts = max(_activations(t, opts, Shape("decode", max_batch, 1, g)),
               _activations(t, opts, Shape("prefill", 1, granules(max_prompt, g), granules(max_prompt, g))))
    free = layer.memory["hbm_slice"] - weights - acts
    if free < per_token:
        raise KbfastError(f"{opts.model.name} leaves no HBM for a KV cache on layout {opts.layout}: each working PE "
                          f"holds {weights:,} B of weights and {acts:,} B of activations in a "
                          f"{layer.memory['hbm_slice']:,} B "
                          "slice\n  hint: use more SIPs (--set sips.count=N), layout tp_pes, or a smaller --max-batch")
    return Memory(g, per_token, free // per_token, weights, acts, layer.memory["hbm_slice"])


def _activations(t: Tables, opts: StepOptions, shape: Shape) -> int:
    return max(p.memory["activations"] for p in compile_model(t, opts.model, shape, opts.layout,
                                                             collective=opts.collective,
                                                             sequence_parallel=opts.sequence_parallel,
                                                             overlap=opts.overlap, fit_hbm=False))


def granules(tokens: float, g: int) -> int:
    """``tokens`` rounded up to whole granules of ``g`` (at least one)."""
    return max(int(math.ceil(tokens / g - 1e-9)), 1) * g


def decode_shape(batch: int, kv_mean: float, g: int) -> Shape:
    """The decode step of ``batch`` users whose KV lengths average ``kv_mean`` (module docstring)."""
    return Shape("decode", int(batch), 1, granules(kv_mean, g))


def prefill_shape(prompt: int, g: int) -> Shape:
    """The prefill of one prompt of ``prompt`` tokens, padded to whole granules."""
    n = granules(prompt, g)
    return Shape("prefill", 1, n, n)


def step_ns(t: Tables, router: Router, opts: StepOptions, mode: str, shape: Shape) -> float:
    """One step of ``shape`` in ``mode``: its latency, ns (on the fast path its point alone, no bounds)."""
    plan = plan_step(t, opts.model, shape, opts.layout, None, opts.method, opts.collective, opts.sequence_parallel,
                     opts.overlap, fit_hbm=False)
    return float(run_step(t, router, plan, (mode,), bounds=False).latency_ns())


_WORKER: dict[str, tuple[Tables, Router]] = {}      # a pool worker's system, built once


def _worker_step(job: tuple) -> tuple[Shape, float]:
    """A pool worker's :func:`step_ns`: the system built from its spec once per worker."""
    spec, opts, mode, shape = job
    key = repr(spec)
    if key not in _WORKER:
        t = build_tables(spec)
        _WORKER[key] = (t, Router(t))
    return shape, step_ns(*_WORKER[key], opts, mode, shape)


class DirectCosts:
    """Every distinct step shape evaluated once, in ``mode`` (fast or exact): ns; :meth:`evaluate` spreads new
    shapes over ``jobs`` spawned worker processes (kbfast.sweep.runner's workers: Ctrl-C and the parent's death
    end them).  ``progress(done, planned)`` is called after each evaluation; ``planned`` is what
    :meth:`evaluate` announced, or what is done.  Close it (a context manager) to end the workers."""

    def __init__(self, t: Tables, router: Router, opts: StepOptions, mode: str = "fast",
                 progress: Callable[[int, int], None] | None = None, jobs: int = 1):
        self.t, self.router, self.opts, self.mode, self.progress = t, router, opts, mode, progress
        self.memo: dict[Shape, float] = {}
        self.planned = 0
        self.jobs, self._pool = jobs, None

    def __enter__(self) -> DirectCosts:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def evaluate(self, shapes: list[Shape]) -> None:
        """Evaluate the ``shapes`` not evaluated yet, on the workers when ``jobs`` > 1."""
        new = sorted(set(shapes) - set(self.memo), key=repr)
        self.planned = len(self.memo) + len(new)
        if self.jobs <= 1 or len(new) <= 1:
            for shape in new:
                self(shape)
            return
        if self._pool is None:
            self._pool = get_context("spawn").Pool(self.jobs, initializer=worker_init, initargs=(os.getpid(),))
        for shape, ns in self._pool.imap_unordered(_worker_step, [(self.t.spec, self.opts, self.mode, s)
                                                                  for s in new]):
            self._done(shape, ns)

    def _done(self, shape: Shape, ns: float) -> None:
        self.memo[shape] = ns
        if self.progress is not None:
            self.progress(len(self.memo), max(self.planned, len(self.memo)))

    def __call__(self, shape: Shape) -> float:
        if shape not in self.memo:
            self._done(shape, step_ns(self.t, self.router, self.opts, self.mode, shape))
        return self.memo[shape]

    def decode_ns(self, batch: int, kv: int) -> float:
        return self(Shape("decode", batch, 1, kv))

    def prefill_ns(self, seq: int) -> float:
        return self(Shape("prefill", 1, seq, seq))


@dataclass
class Check:
    """One held-out shape: the interpolant's and the direct evaluation's ns."""

    kind: str           # decode or prefill
    batch: int
    tokens: int         # the KV length (decode) or the prompt (prefill)
    interpolated_ns: float
    direct_ns: float
    round: int          # 0: the first grid; k: after k refinements

    @property
    def error(self) -> float:
        return self.interpolated_ns / self.direct_ns - 1.0

    @property
    def ok(self) -> bool:
        return abs(self.error) <= TOLERANCE


def _between(grid: list[int], step: int) -> list[int]:
    """Held-out values: the geometric middle of each pair of neighbouring grid values, in whole ``step``s,
    kept where it lies strictly between them."""
    out = []
    for lo, hi in zip(grid, grid[1:]):
        mid = int(round(math.sqrt(lo * hi) / step)) * step
        if lo < mid < hi:
            out.append(mid)
    return out


def _spread(lo: int, hi: int, n: int, step: int) -> list[int]:
    """About ``n`` values from ``lo`` to ``hi`` in geometric steps, in whole ``step``s, both ends included."""
    if hi <= lo:
        return [lo]
    vals = {granules(v, step) for v in np.geomspace(lo, hi, n)}
    return sorted(vals | {lo, hi})


def _batches(most: int, rows: int) -> list[int]:
    """The decode grid's batches: powers of two up to ``most``, ``most``, and each side of every GEMM tile edge
    (``rows`` users and one more): a decode step's users are its weight GEMMs' M, so its cost jumps where M
    needs one more tile (spec_pe §5.1)."""
    out = {1 << k for k in range(int(math.log2(most)) + 1)} | {most}
    for edge in range(rows, most, rows):
        out |= {edge, edge + 1}
    return sorted(out)


def _within(what: str, x: float, grid: list[int]) -> None:
    if not grid[0] <= x <= grid[-1]:
        raise ValueError(f"{what} {x} is outside the interpolation grid [{grid[0]}, {grid[-1]}]")


@dataclass
class InterpolatedCosts:
    """Decode and prefill costs interpolated from the fast path on grids, with their checks (module
    docstring)."""

    direct: DirectCosts
    batches: list[int]
    kvs: list[int]
    prompts: list[int]
    checks: list[Check] = field(default_factory=list)

    @classmethod
    def build(cls, direct: DirectCosts, max_batch: int, kv_range: tuple[int, int], prompt_range: tuple[int, int],
              g: int) -> InterpolatedCosts:
        """Grids covering decode steps of 1 to ``max_batch`` users at KV lengths in ``kv_range`` and prefills
        of prompts in ``prompt_range`` (tokens; rounded to granules of ``g``), evaluated, checked and refined."""
        rows = direct.t.spec.pe.tile.m
        kvs = _spread(granules(kv_range[0], g), granules(kv_range[1], g), KV_POINTS, g)
        prompts = _spread(granules(prompt_range[0], g), granules(prompt_range[1], g), PROMPT_POINTS, g)
        self = cls(direct, _batches(max_batch, rows), kvs, prompts)
        self._fit()
        for rnd in range(REFINE_ROUNDS + 1):
            failed = self._check(rnd, g)
            if not failed or rnd == REFINE_ROUNDS:
                break
            for c in failed:          # the failing shape's lines join the grid
                if c.kind == "decode":
                    self.batches = sorted(set(self.batches) | {c.batch})
                    self.kvs = sorted(set(self.kvs) | {c.tokens})
                else:
                    self.prompts = sorted(set(self.prompts) | {c.tokens})
            self._fit()
        return self

    def _fit(self) -> None:
        """Evaluate the grids (directly, each shape once) and make the interpolants."""
        d = self.direct
        d.evaluate([Shape("decode", b, 1, kv) for b in self.batches for kv in self.kvs]
                   + [Shape("prefill", 1, p, p) for p in self.prompts])
        self._decode = np.array([[d.decode_ns(b, kv) for kv in self.kvs] for b in self.batches])
        self._prefill = np.array([d.prefill_ns(s) for s in self.prompts])
        axes = [np.array(a, float) for a in (self.batches, self.kvs)]
        keep = [len(a) > 1 for a in axes]
        values = self._decode.reshape([len(a) for a, k in zip(axes, keep) if k] or [1])
        from scipy.interpolate import RegularGridInterpolator     # 0.5 s to import: only where a table is built

        self._interp = RegularGridInterpolator([a for a, k in zip(axes, keep) if k], values) if any(keep) else None
        self._keep = keep

    def _check(self, rnd: int, g: int) -> list[Check]:
        """Held-out shapes of this round against direct evaluations; the failed ones."""
        bs, ks, ps = _between(self.batches, 1), _between(self.kvs, g), _between(self.prompts, g)
        shapes = set()
        if bs or ks:          # an axis with no held-out value: its far end, where the other axis weighs most
            bb = bs or [self.batches[-1]]
            kk = ks or [self.kvs[-1]]
            shapes |= {(bb[0], kk[-1]), (bb[-1], kk[0]), (bb[len(bb) // 2], kk[len(kk) // 2]), (bb[-1], kk[-1])}
        held = sorted({ps[0], ps[len(ps) // 2], ps[-1]}) if ps else []
        self.direct.evaluate([Shape("decode", b, 1, kv) for b, kv in shapes]
                             + [Shape("prefill", 1, p, p) for p in held])
        new = [Check("decode", b, kv, self.decode_ns(b, kv), self.direct.decode_ns(b, kv), rnd)
               for b, kv in sorted(shapes)]
        new += [Check("prefill", 1, s, self.prefill_ns(s), self.direct.prefill_ns(s), rnd) for s in held]
        self.checks += new
        return [c for c in new if not c.ok]

    def decode_ns(self, batch: int, kv: int) -> float:
        """A decode step of ``batch`` users at KV length ``kv``, within the grid (the run's shapes are:
        kbfast.serving.serve builds it over them); outside it a ValueError, never an extrapolation."""
        _within("decode users", batch, self.batches)
        _within("decode KV length", kv, self.kvs)
        if self._interp is None:
            return float(self._decode[0, 0])
        point = [x for x, k in zip((batch, kv), self._keep) if k]
        return float(self._interp(np.array([point], float))[0])

    def prefill_ns(self, seq: int) -> float:
        """The prefill of a ``seq``-token prompt, within the grid (as :meth:`decode_ns`)."""
        _within("prefill prompt", seq, self.prompts)
        return float(np.interp(seq, self.prompts, self._prefill))
