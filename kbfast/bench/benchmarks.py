"""Benchmarks behind ``kbfast bench`` (docs/bench.md).  Figures, not timed tests.

Every benchmark warms up (JIT, caches) before it measures, runs on one core
(Numba kernels are single-threaded), and returns one or more rows with the
measured value, its unit and the design target.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.report.formats import duration
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import build_catalogue, random_pe_flows


@dataclass(frozen=True)
class Target:
    """A design target (docs/bench.md): as printed, its bound in the row's unit, and which way is better."""

    text: str
    bound: float
    higher_is_better: bool

    def met(self, value: float) -> bool:
        """Whether ``value`` (in the row's unit) meets the target."""
        return value >= self.bound if self.higher_is_better else value <= self.bound


# the design targets (docs/bench.md), one per line of its table that a row measures (in that row's unit)
TARGETS = {
    "mixed_grid": Target(">= 1e6 points/min", 1e6, True),
    "allreduce_1024": Target("<= 0.25 s, topology build included", 0.25, False),
    "exact_events": Target(">= 20 M events/s, every scenario", 20.0, True),
    "seed_grid": Target("<= 1 s", 1.0, False),
    "vs_simpy": Target(">= 100 x, every case", 100.0, True),
    "memory_1024": Target("<= 1024 MiB", 1024.0, False),
    "first_run": Target("<= 45 s (moonshot 15 s)", 45.0, False),
    "gemm_points": Target(">= 1 M points/min", 1.0, True),
    "gemm_4096": Target("<= 1 ms", 1.0, False),
    "model_step": Target("<= 1 s", 1.0, False),
    "gemm_sweep": Target("<= 10 s", 10.0, False),
    "model_point": Target("<= 20 ms", 20.0, False),
    "model_sweep": Target("<= 60 s", 60.0, False),
    "flows": Target(">= 10 M flows/s", 10.0, True),
    "search": Target(">= 1,000 Llama-3-70B candidates in <= 60 s", 1000.0, True),
}
NO_TARGET = "- (none set)"
HIGHER_UNITS = ("/", "x faster")     # units of rates: a larger value is better


@dataclass(frozen=True)
class BenchRow:
    """One figure of a benchmark: its value and unit, the design target, whether it is met (None: no target),
    and which way is better (a rate: higher; a time, a size or a share: lower), for paired comparisons."""

    name: str
    value: float
    unit: str
    target: str
    ok: bool | None
    detail: str = ""
    higher_is_better: bool = False


def row(name: str, value: float, unit: str, target: str | None = None, detail: str = "", scale: float = 1.0) -> BenchRow:
    """A figure against its design target (``TARGETS[target]``; None: the design sets none), the bound
    multiplied by ``scale`` (a cut of a sweep the target counts whole)."""
    higher = any(u in unit for u in HIGHER_UNITS)
    if target is None:
        return BenchRow(name, value, unit, NO_TARGET, None, detail, higher)
    tgt = TARGETS[target]
    assert tgt.higher_is_better == higher, (name, unit)
    text = tgt.text if scale == 1.0 else f"{tgt.text} (x {scale:g} for this cut)"
    return BenchRow(name, value, unit, text, Target(text, tgt.bound * scale, higher).met(value), detail, higher)


def _best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_topology_1024() -> list[BenchRow]:
    """Build the 1024-SIP what-if (16,384 cubes): time and table memory."""
    spec = load_system("whatif_1024")
    build_tables(load_system())  # warm imports
    tracemalloc.start()
    t0 = time.perf_counter()
    t = build_tables(spec)
    dt = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return [row("topology build, 1024 SIPs", dt, "s", None, f"{t.n_nodes:,} nodes, {t.n_edges:,} edges"),
            row("topology memory, 1024 SIPs", peak / 2**20, "MiB", "memory_1024",
                f"tables {t.nbytes() / 2**20:.0f} MiB, peak during build {peak / 2**20:.0f} MiB")]


def bench_routes_1024(n: int = 100_000) -> list[BenchRow]:
    """Resolve a batch of random PE-to-HBM routes on the 1024-SIP what-if."""
    t = build_tables(load_system("whatif_1024"))
    src, dst = random_pe_flows(t, n)
    Router(t).routes(src[:10], dst[:10])  # JIT warm-up
    router = Router(t)
    t0 = time.perf_counter()
    rs = router.routes(src, dst)
    cold = time.perf_counter() - t0
    warm = _best_of(lambda: router.routes(src, dst), 2)
    return [row("route lookup, 1e5 random pairs, 1024 SIPs (cold trees)", cold, "s", None,
                f"{len(rs.edges):,} route edges"),
            row("route lookup, 1e5 random pairs, 1024 SIPs (cached trees)", warm, "s")]


def bench_exact_rate() -> list[BenchRow]:
    """Exact-mode event rate and the two 128-issuer probe scenarios."""
    t = build_tables(load_system())
    router = Router(t)
    cat = build_catalogue(t, router)
    rows = []
    for name, nbytes in (("sip_local_all", 16 << 10), ("sip_hotspot_pe0", 16 << 10)):
        p = cat[name].program(t, router, nbytes)
        run_exact(p)
        wall = _best_of(lambda: run_exact(p))
        rows.append(row(f"exact {name} 16 KiB (128 issuers)", wall, "s"))
    for name, nbytes in (("REMOTE_CUBE_PE_REMOTE_WORST", 4 << 20), ("sip_hotspot_pe0", 256 << 10)):
        p = cat[name].program(t, router, nbytes)
        run_exact(p)
        res = min((run_exact(p) for _ in range(3)), key=lambda r: r.wall_s)
        rate = res.n_events / res.wall_s
        rows.append(row(f"exact event rate, {name} {nbytes >> 10} KiB", rate / 1e6, "M flit-hop events/s",
                        "exact_events", f"{res.n_events:,} events in {res.wall_s * 1e3:.1f} ms"))
    return rows


def bench_gemm(n_points: int = 100_000) -> list[BenchRow]:
    """The GEMM tile pipeline, kernel rows timed by name: one 4096^3 GEMM (2^20 tiles) on the fast path; GEMM
    points per minute through the batched max-plus path (plans, closed forms, recurrence, figures: what a GEMM
    sweep runs per batch: the recurrence, and for multi-tile GEMMs whose writes meet their reads the steady
    state, whose short exact replays the first points pay and the later ones share);
    exact-mode event rate on a 1024^3 GEMM (16,384 tiles, both operands streamed), and the fast schedule on
    the same Program (kbfast.workloads.gemm, kbfast.measure.gemm)."""
    from kbfast.measure.gemm import maxplus_rows
    from kbfast.fast.evaluate import run_fast
    from kbfast.workloads.gemm import gemm_case
    t = build_tables(load_system())
    router = Router(t)
    big = gemm_case(t, router, 4096, 4096, 4096, "load_ref", program=False)
    maxplus_rows(t, router, [big])
    one = _best_of(lambda: maxplus_rows(t, router, [big]), 5)
    rng = np.random.default_rng(0)
    dims = rng.choice([16, 32, 64, 128, 256, 512, 1024, 2048, 4096], (n_points, 3))
    stagings = rng.choice(["ref_ref", "load_ref", "load_load"], n_points)
    t0 = time.perf_counter()
    cases = [gemm_case(t, router, int(m), int(n), int(k), str(s), program=False)
             for (m, n, k), s in zip(dims.tolist(), stagings)]
    maxplus_rows(t, router, cases)
    rate = n_points / (time.perf_counter() - t0) * 60
    from kbfast.fast.pipeline import pipeline
    args = (16384, 64, 2, 773.0, 0.0, 0.0, 19.0, 21.0, 16.0, 16.0, 16.0, 4.0, 21.0, 21.0)
    pipeline(*args)
    kernel = _best_of(lambda: pipeline(*args), 20)
    rows = [row("fast: the 4096^3 recurrence alone (steady state in closed form)", kernel * 1e6, "µs"),
            row("fast: one GEMM 4096^3 load_ref (2^20 tiles, closed forms included)", one * 1e3, "ms", "gemm_4096",
                f"latency {duration(maxplus_rows(t, router, [big])[0]['latency_ns'])}"),
            row(f"fast: GEMM points per minute, {n_points:,} random shapes x stagings, one core", rate / 1e6,
                "M points/min", "gemm_points")]
    run_exact(gemm_case(t, router, 32, 32, 128, "ref_ref").program)            # JIT warm-up
    case = gemm_case(t, router, 1024, 1024, 1024, "ref_ref")
    res = min((run_exact(case.program) for _ in range(3)), key=lambda r: r.wall_s)
    ev_rate = res.n_events / res.wall_s
    run_fast(gemm_case(t, router, 32, 32, 128, "ref_ref").program)
    fast = _best_of(lambda: run_fast(case.program), 2)
    return rows + [
        row("exact event rate, GEMM 1024^3 ref_ref", ev_rate / 1e6, "M events/s", "exact_events",
            f"{res.n_events:,} events in {res.wall_s * 1e3:.1f} ms, {case.plan.n_tile_total:,} tiles"),
        row("fast schedule (fluid), GEMM 1024^3 ref_ref (bounds included)", fast, "s", None,
            f"{case.program.n_ops:,} ops")]


def bench_simpy_ratio() -> list[BenchRow]:
    """Exact mode vs the SimPy reference on the same scenario (DMA probes, and one IPCQ all-reduce)."""
    try:
        from kbfast.reference.simpy_ref import run_simpy
    except ModuleNotFoundError:
        return [BenchRow("exact vs SimPy reference", float("nan"), "x faster", TARGETS["vs_simpy"].text, None,
                         "skipped: the reference needs simpy (pip install -e '.[reference]')", True)]
    from kbfast.workloads.collectives import allreduce

    t = build_tables(load_system())
    router = Router(t)
    cat = build_catalogue(t, router)
    cases = [(f"{name} {nbytes >> 10} KiB", cat[name].program(t, router, nbytes))
             for name, nbytes in (("all_pe_cube0_to_pe0", 16 << 10), ("REMOTE_CUBE_PE_REMOTE_WORST", 64 << 10))]
    t6 = build_tables(load_system("torus6"))
    cases.append(("IPCQ lrab all-reduce, torus6 16 KiB", allreduce(t6, Router(t6), 16 << 10).program))
    rows = []
    for name, p in cases:
        run_exact(p)
        exact = _best_of(lambda: run_exact(p))
        ref = _best_of(lambda: run_simpy(p), 1)
        rows.append(row(f"exact vs SimPy reference, {name}", ref / exact, "x faster", "vs_simpy",
                        f"exact {exact * 1e3:.2f} ms, SimPy {ref * 1e3:.1f} ms"))
    return rows


def bench_fast_flows() -> list[BenchRow]:
    """Batched isolated-flow evaluations (kbfast.fast.isolated) and 1e5 random flows on the 1024-SIP what-if, routes
    included (best of 3, each with a router of its own)."""
    from kbfast.fast.isolated import isolated_latencies
    from kbfast.sim.lowering import transfer_routes

    rows = []
    for preset, n in (("ahbm_2sip", 1_000_000), ("whatif_1024", 100_000)):
        t = build_tables(load_system(preset))
        rng = np.random.default_rng(0)
        src, dst = random_pe_flows(t, n)
        nbytes = rng.integers(1, 1 << 20, n)
        isolated_latencies(transfer_routes(t, Router(t), src[:10], dst[:10]), src[:10], dst[:10], nbytes[:10])
        # best of 3, each with a router of its own: its routing trees are built within the time every time
        wall = _best_of(lambda: isolated_latencies(transfer_routes(t, Router(t), src, dst), src, dst, nbytes))
        if preset == "ahbm_2sip":
            rows.append(row("fast isolated flows, batched (routes included)", n / wall / 1e6, "M flows/s", "flows",
                            f"{n:,} random PE->HBM flows, 1 B to 1 MiB"))
        else:
            rows.append(row("fast: 1e5 random flows on 1024 SIPs (routes included)", wall, "s"))
    return rows


def bench_network() -> list[BenchRow]:
    """The queueing network (kbfast.fast.network), the hybrid's point where a replay does not fit: lrab over 256
    SIPs at 96 KiB (about 257 M replay events, so not replayed), and the tree over every PE of torus6 at 96 KiB
    beside its exact replay; best of 3, flows built within the time, compilation before it."""
    from kbfast.fast.evaluate import network_schedule
    from kbfast.fast.plan import plan_fast
    from kbfast.workloads.collectives import allreduce

    rows = []
    for preset, alg, ranks, label in (("whatif_256", "lrab", None, "lrab over 256 SIPs"),
                                      ("torus6", "tree", "all_pes", "the tree over every PE of torus6")):
        t = build_tables(load_system(preset))
        p = allreduce(t, Router(t), 96 * 1024, alg, ranks).program
        plan = plan_fast(p)
        events = network_schedule(p, plan)[1]        # JIT warm-up
        wall = _best_of(lambda: network_schedule(p, plan))
        detail = f"{events / 1e6:.2f} M network events, {events / wall / 1e6:.1f} M events/s"
        if alg == "tree":
            ex = _best_of(lambda: run_exact(p), 1)
            detail += f"; its exact replay {ex:.2f} s"
        rows.append(row(f"fast: queueing network, {label}, 96 KiB", wall, "s", None, detail))
    return rows


SEED_SIZES = (8, 32, 64, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 49152)   # n_elem, f16


def bench_allreduce() -> list[BenchRow]:
    """The 36-point seed grid exactly; fast all-reduce points per minute; one large all-reduce."""
    from kbfast.fast.evaluate import run_fast
    from kbfast.workloads.collectives import allreduce

    rows = []
    programs = []
    for preset in ("ring6", "torus6", "mesh6"):
        t = build_tables(load_system(preset))
        router = Router(t)
        programs += [allreduce(t, router, n * 2).program for n in SEED_SIZES]
    run_exact(programs[0])
    t0 = time.perf_counter()
    events = sum(run_exact(p).n_events for p in programs)
    wall = time.perf_counter() - t0
    rows.append(row("exact: 36-point seed all-reduce grid (6 SIPs)", wall, "s", "seed_grid",
                    f"{events:,} events, {events / wall / 1e6:.1f} M events/s"))
    from kbfast.measure.collective import allreduce_points

    n_points = 0
    wall = 0.0
    for preset in ("ring6", "torus6", "mesh6", "torus16"):
        t = build_tables(load_system(preset))
        router = Router(t)
        sizes, kinds, slots = (a.ravel() for a in np.meshgrid(2 * np.array(SEED_SIZES), ["tcm", "sram", "hbm"],
                                                              [1, 2, 4, 8], indexing="ij"))
        allreduce_points(t, router, sizes[:2], kinds[:2], slots[:2])   # JIT and plan warm-up
        wall += _best_of(lambda: allreduce_points(t, router, sizes, kinds, slots))
        n_points += len(sizes)
    rows.append(row("fast: mixed all-reduce grid, batched (topology x size x buffer kind x n_slots)",
                    n_points / wall * 60, "points/min", "mixed_grid",
                    f"{n_points} distinct points in {wall:.2f} s (best of 3 per topology), one symbolic "
                    f"build per topology; an n_slots above a run's ring peak reuses that run"))
    t = build_tables(load_system("whatif_1024"))
    router = Router(t)
    run_fast(allreduce(t, router, 96 * 1024).program)     # JIT warm-up
    wall = gen = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        coll = allreduce(t, router, 96 * 1024)
        t1 = time.perf_counter()
        res = run_fast(coll.program)
        if time.perf_counter() - t0 < wall:
            wall, gen = time.perf_counter() - t0, t1 - t0
    rows.append(row("fast: one lrab all-reduce, 1024 SIPs (16,384 cubes), 96 KiB, generation + evaluation",
                    wall, "s", None,
                    f"{res.program.n_ops:,} ops; best of 3: generation {gen:.2f} s, evaluation {wall - gen:.2f} s"))
    t0 = time.perf_counter()
    t = build_tables(load_system("whatif_1024"))
    built = time.perf_counter() - t0
    run_fast(allreduce(t, Router(t), 96 * 1024).program)
    whole = time.perf_counter() - t0
    rows.append(row("fast: the same, topology build included", whole, "s", "allreduce_1024",
                    f"build {built:.2f} s, routes, generation and evaluation {whole - built:.2f} s"))
    return rows


def bench_sweep(n_random: int | None = None) -> list[BenchRow]:
    """The bundled 10^5-point mixed all-reduce sweep end to end (expansion, batches, 2 processes, Parquet), and
    the share of one process's time spent outside the evaluators on a 10^4-point cut of it."""
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from kbfast.sweep.runner import run_sweep
    from kbfast.sweep.spec import load_spec

    spec = load_spec("mixed_1e5")

    def cut(n: int):
        axes = [spec.axes[0], {"random": {**spec.axes[1]["random"], "n": n}}]
        return replace(spec, axes=axes)

    full = cut(n_random) if n_random else spec
    with tempfile.TemporaryDirectory() as tmp:
        run_sweep(cut(2), Path(tmp) / "warm")   # JIT caches
        one = run_sweep(cut(1000), Path(tmp) / "one")
        t0 = time.perf_counter()
        out = run_sweep(full, Path(tmp) / "full", jobs=2)
        wall = time.perf_counter() - t0
    n = out.n_points
    overhead = (one.wall_s - one.eval_s) / one.wall_s
    return [row(f"sweep: mixed all-reduce sweep end to end, 2 processes ({n:,} points)", wall, "s", None,
                f"{n / wall * 60:,.0f} points/min, {out.n_errors} errors"),
            row("sweep: time outside the evaluators, 1 process", 100 * overhead, "%", None,
                f"{one.n_points:,} points in {one.wall_s:.1f} s, {one.eval_s:.1f} s in evaluators")]


MAIN_JOB = ("sweep", "seed36", "--check", "3", "--overwrite")


def bench_model() -> list[BenchRow]:
    """Model steps (kbfast.measure.model): a whole 80-layer Llama-3-70B decode step on the fast path, the
    model's compilation and its GEMM command timings included (kernels warm); one such layer exactly."""
    from kbfast.config.models import load_model
    from kbfast.measure.model import evaluate_piece      # the exact layer alone: the kind measures whole steps
    from kbfast.measure.registry import WORKLOADS, forget, measure
    from kbfast.workloads.model import compile_model, shape_for

    t = build_tables(load_system())
    router = Router(t)
    # the reference's all-reduce (lrab), stage by stage (no overlap), as the paired figures before auto and
    # prefetch were measured; their own costs are the next rows'
    fields = {**WORKLOADS["model"].fields, "kind": "model", "phase": "decode", "batch": 1, "kv_len": 4096,
              "collective": "lrab", "overlap": "none"}
    small = {**fields, "model": "llama32_1b", "kv_len": 512}
    measure(t, router, small, "fast")                    # JIT
    measure(t, router, small, "exact")
    forget()                            # cold: the model traced and its GEMM commands timed afresh
    t0 = time.perf_counter()
    step = measure(t, router, fields, "fast").result
    fast_s = time.perf_counter() - t0
    forget()
    t0 = time.perf_counter()
    auto = measure(t, router, {**fields, "collective": "auto"}, "fast").result
    auto_s = time.perf_counter() - t0
    forget()
    t0 = time.perf_counter()
    ahead = measure(t, router, {**fields, "overlap": "prefetch"}, "fast").result
    ahead_s = time.perf_counter() - t0
    forget()
    t0 = time.perf_counter()
    piped = measure(t, router, {**fields, "pp": 2}, "fast").result
    piped_s = time.perf_counter() - t0
    m = load_model("llama3_70b")
    layer = compile_model(t, m, shape_for(m, "decode", 1, None, 4096), collective="lrab", overlap="none")[0]
    t0 = time.perf_counter()
    ex = evaluate_piece(t, router, layer, "exact")
    exact_s = time.perf_counter() - t0
    lat = step.results["fast"][0].latency_ns
    return [row("Llama-3-70B decode step (80 layers), fast", fast_s, "s", "model_step",
                f"step {duration(step.latency_ns())}, 256 PEs, model compiled and GEMMs timed"),
            row("the same step, --collective auto", auto_s, "s", None,
                f"{len(auto.choices['layer']['candidates_ns'])} candidates x 2 messages timed; chose "
                f"{auto.choices['layer']['chosen']} and {auto.choices['head']['chosen']}"),
            row("the same step, --overlap prefetch", ahead_s, "s", None,
                f"step {duration(ahead.latency_ns())}; each prefetch's collective timed alone"),
            row("the same step, --pp 2", piped_s, "s", None,
                f"two stages of one SIP: step {duration(piped.latency_ns())} ({piped.pipeline_method()})"),
            row("Llama-3-70B decode layer, exact", exact_s, "s", None,
                f"layer {duration(ex.latency_ns)} exact vs {duration(lat)} fast")]


def _bundled_sweep(name: str):
    """The bundled sweep ``name`` end to end on 2 processes, into a folder deleted after: (wall s, outcome)."""
    import tempfile
    from pathlib import Path

    from kbfast.sweep.runner import run_sweep
    from kbfast.sweep.spec import load_spec

    spec = load_spec(name)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = run_sweep(spec, Path(tmp) / "full", jobs=2)
        return time.perf_counter() - t0, out


def bench_model_sweep() -> list[BenchRow]:
    """The bundled 10^4-point model sweep (``model_1e4``: Llama-3-70B decode steps) end to end, 2 processes."""
    wall, out = _bundled_sweep("model_1e4")
    n = out.n_points
    return [row(f"model sweep end to end, 2 processes ({n:,} points)", wall, "s", "model_sweep",
                f"{n / wall * 60:,.0f} points/min, {out.n_errors} errors", scale=n / 1e4)]


def bench_model_point(n_batches: int = 4) -> list[BenchRow]:
    """One model point in a sweep, warm: ``model_1e4``'s batches evaluated one after another in one process
    (kbfast.sweep.batches), after a first batch that compiles and fills the caches a long sweep keeps."""
    from kbfast.sweep.batches import evaluate_batch, make_batches
    from kbfast.sweep.spec import load_spec

    batches = make_batches(load_spec("model_1e4").points(), "fast")
    evaluate_batch(batches[0])
    t0 = time.perf_counter()
    n = sum(len(evaluate_batch(b).rows) for b in batches[1:1 + n_batches])
    per = (time.perf_counter() - t0) / n
    return [row("model point in a sweep, warm (model_1e4, one process)", per * 1e3, "ms", "model_point",
                f"{n} points in {n_batches} batches")]


def bench_gemm_sweep() -> list[BenchRow]:
    """The bundled GEMM sweep (``kbfast sweep gemm``: every shape, staging and rate) end to end, 2 processes."""
    wall, out = _bundled_sweep("gemm")
    return [row(f"GEMM sweep end to end, 2 processes ({out.n_points:,} points)", wall, "s", "gemm_sweep",
                f"{out.n_points / wall:,.0f} points/s, {out.n_errors} errors")]


def bench_serve() -> list[BenchRow]:
    """The worked serving run of docs/serving.md (Llama-3.2-1B, 40 requests/s for 3 s, at most 16 running) in
    this process: its step shapes evaluated on the fast path and checked, then the loop."""
    from kbfast.config.models import load_model
    from kbfast.serving import serve
    from kbfast.serving.costs import StepOptions
    from kbfast.serving.requests import parse_lengths, poisson

    t = build_tables(load_system("ahbm_2sip"))
    req = poisson(40, 3, parse_lengths("uniform:128:1024", "prompt"), parse_lengths("uniform:32:256", "output"), 0)
    t0 = time.perf_counter()
    res = serve(t, Router(t), StepOptions(load_model("llama32_1b")), req, 16)
    wall = time.perf_counter() - t0
    n = len(res.costs.direct.memo)
    return [row(f"serving run, Llama-3.2-1B, {len(req)} requests, one process", wall, "s", None,
                f"{n} step shapes, {len(res.schedule.steps):,} steps")]


def bench_search() -> list[BenchRow]:
    """``kbfast search llama3_70b`` on ahbm_2sip, after one candidate that compiles what it needs: (1) over 4
    batches, both layouts, lrab and hier2d, no overlap and prefetch, sequence parallel or not, tensor parallel
    alone, in one process (a row kept for pairing with earlier revisions); (2) the default space (1,024
    candidates) on 2 processes, the design's target: candidates per minute."""
    import tempfile
    from pathlib import Path

    from kbfast.config.models import load_model
    from kbfast.search import search
    from kbfast.search.space import Space

    model = load_model("llama3_70b")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = Space(("tp_pes",), (1,), ("lrab",), ("none",), (False,), pp=(1,), dp=(1,))
        search(model, "llama3_70b", None, {}, [], warm, "tokens_per_s", [], 4096, 2048, Path(tmp) / "warm")
        space = Space(("tp_pes", "tp_cubes"), (1, 4, 16, 64), ("lrab", "hier2d"), ("prefetch", "none"), (False, True),
                      pp=(1,), dp=(1,))
        for jobs, space in ((1, space), (2, Space())):
            t0 = time.perf_counter()
            res = search(model, "llama3_70b", None, {}, [], space, "tokens_per_s", [], 4096, 2048,
                         Path(tmp) / f"run{jobs}", jobs=jobs)
            wall = time.perf_counter() - t0
            n, timed = len(res.pruned.kept), int(res.table["timed"].sum())
            detail = f"{wall:,.1f} s; {timed} timed, {res.n_beaten} beaten by their bounds"
            if jobs == 1:
                rows.append(row(f"search, Llama-3-70B decode, one process ({n} of {res.n_candidates} candidates "
                                "evaluated)", n / wall * 60, "candidates/min", None, detail))
            else:
                rows.append(row(f"search, Llama-3-70B decode, the default {res.n_candidates:,} candidates "
                                f"({n} compiled), 2 processes", res.n_candidates / wall * 60, "candidates/min",
                                "search", detail))
    return rows


def bench_coldstart() -> list[BenchRow]:
    """The README main job (``kbfast sweep seed36 --check 3``) in a fresh process with an empty Numba cache
    of its own, then once more on that cache: what a first run and every later run cost."""
    import os
    import subprocess
    import sys
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NUMBA_CACHE_DIR": os.path.join(tmp, "numba")}
        for label, target in (("first run, empty Numba cache", "first_run"), ("later run, warm cache", None)):
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "kbfast", *MAIN_JOB, "--out", os.path.join(tmp, "out")],
                                  env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            detail = " ".join(MAIN_JOB) if done.returncode == 0 else f"failed: {done.stderr.strip()[-200:]}"
            rows.append(row(f"cold start: README main job, {label}", wall if done.returncode == 0 else float("nan"),
                            "s", target, detail))
    return rows


BENCHMARKS: dict[str, Callable[[], list[BenchRow]]] = {
    "coldstart": bench_coldstart,
    "topology": bench_topology_1024,
    "routes": bench_routes_1024,
    "exact": bench_exact_rate,
    "gemm": bench_gemm,
    "simpy": bench_simpy_ratio,
    "flows": bench_fast_flows,
    "allreduce": bench_allreduce,
    "network": bench_network,
    "sweep": bench_sweep,
    "model": bench_model,
    "model_point": bench_model_point,
    "model_sweep": bench_model_sweep,
    "gemm_sweep": bench_gemm_sweep,
    "serve": bench_serve,
    "search": bench_search,
}
