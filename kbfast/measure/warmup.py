"""Compile the Numba kernels a command will need before it starts, on both cores (a first run only).

A first run compiles each kernel once and caches it (docs/README.md, "First run").  Numba compiles on one
core; the machine kbfast targets has 2.  So a command whose kernels are not cached compiles the fast
path's group, and what balances it (:func:`split`), in a second process and the rest in its own, each on a
tiny Program of the same types, waits, and then loads every kernel from the cache.
``python -m kbfast.measure.warmup points`` runs one such compile.

The fast group compiles from stored inputs (``warm_inputs.pkl``: the arguments of the schedule's and the
points kernel's calls on that tiny Program), so that it starts at once instead of first compiling the
routing and planning kernels that build the Program, which the command's own process compiles anyway.
``python -m kbfast.measure.warmup --save-inputs`` records them again; a test checks that their Numba types are
those of today's calls.  Inputs that do not load fall back to building the Program.

What a first run compiles is kept to what it runs (docs/README.md, "First run"): the points kernel inlines the
schedule rather than calling its Python-facing kernel (which would optimise the event loop once more), the
replay's set-up runs in Python for the same reason, and a jitted call never passes a Python int constant
(Numba compiles a callee per literal value).
"""

from __future__ import annotations

import copy
import importlib
import pickle
import subprocess
import sys
from pathlib import Path

# kernel -> (module, jitted function, about how many seconds its compile adds to a first run on 2 cores).
# The seconds are wall time on an idle 2-core machine with an empty Numba cache, measured as a first run
# compiles: each kernel after the ones before it in its process, in the README main job's order ("runs"
# first in the command's own process: it also compiles the routing kernels every first run needs; "tight"
# after it).  "fast" (the schedule called from Python) and "points" (the batched kernel) each compile the
# schedule's event loop (``LOOP_S``).  A first run's message (cli.common.first_run) and the
# figure in README.md and docs/README.md are :func:`estimate_s` of these (tests/test_warmup.py checks the docs).
KERNELS = {
    "fast": ("kbfast.fast.schedule", "schedule", 30),
    "points": ("kbfast.fast.rescale", "points_kernel", 35),
    "exact": ("kbfast.exact.engine", "_run", 15),
    "collectives": ("kbfast.workloads.symbolic", "run_templates", 5),
    "pipeline": ("kbfast.fast.pipeline", "pipeline_batch", 4),
    "runs": ("kbfast.fast.runs", "run_coefficients", 24),   # with run_charges and interference
    # the tight upper bound of run_fast on a Program with IPCQ messages: window offsets and the causal order
    "tight": ("kbfast.fast.causal", "causal_interference", 15),
    # the hybrid's queueing network, compiled when a contended point first needs it (kbfast.measure.hybrid)
    "network": ("kbfast.fast.network", "run_program", 32),
}
# The unbatched fast path's kernels, run_fast with its tight bound: a workload kind's default, and what a batched
# kind's points that it measures one by one compile (kbfast.measure.kind, kbfast.cli.sweep._kernels).
FAST_KERNELS = ("runs", "tight", "fast")
FAST = ("fast", "points")   # the largest group: each compiles the schedule's event loop
LOOP_S = 27                 # ... which takes this long (kbfast.fast.schedule._run): a group of both compiles it once
# kernel -> (the module that calls it, the name it calls): where record_inputs() listens
CALL_SITES = {"fast": ("kbfast.fast.evaluate", "schedule"), "points": ("kbfast.fast.rescale", "points_kernel")}
INPUTS = Path(__file__).with_name("warm_inputs.pkl")


def notice(kernels: list[str]) -> str:
    """What a first run says before compiling ``kernels``: which, and about how long (:func:`estimate_s`)."""
    return (f"first run: compiling the {', '.join(kernels)} kernels once (about {estimate_s(kernels)} s on 2 cores; "
            "they are cached, later runs skip this)")


def cached(kernel: str) -> bool:
    """Whether the Numba cache holds compiled code of ``kernel`` for its current source (its index file
    exists and its source stamp matches; Numba's ``IndexDataCacheFile``)."""
    module, name, _ = KERNELS[kernel]
    cache = getattr(getattr(importlib.import_module(module), name), "_cache", None)
    index = getattr(cache, "_cache_file", None)
    if index is None:          # caching off for this function: nothing to warm
        return True
    try:
        return bool(index._load_index())
    except Exception:          # noqa: BLE001 - an unreadable index is a cache miss
        return False


def missing(*kernels: str) -> list[str]:
    """The kernels among ``kernels`` (each once, in order) that a run would compile."""
    return [k for k in dict.fromkeys(kernels) if not cached(k)]


def split(kernels: list[str]) -> tuple[list[str], list[str]]:
    """(compiled here, compiled in a second process): the fast path's group goes to the second process when
    there is anything else to compile (it starts at once from its stored inputs), and then each other kernel,
    smallest first, follows it while that shortens the longer of the two by ``KERNELS``' seconds; moved
    kernels compile after the fast group, when the routing kernels they share with this process are cached.
    A single group stays here."""
    there = [k for k in kernels if k in FAST]
    here = [k for k in kernels if k not in FAST]
    if not here or not there:
        return kernels, []
    for k in sorted(here, key=lambda k: KERNELS[k][2]):
        s = KERNELS[k][2]
        if max(_seconds(here) - s, _seconds(there) + s) < max(_seconds(here), _seconds(there)):
            here.remove(k)
            there.append(k)
    return here, there


def _seconds(kernels: list[str]) -> int:
    """The sum of ``kernels``' ``KERNELS`` seconds, the schedule's event loop counted once (``LOOP_S``)."""
    return sum(KERNELS[k][2] for k in kernels) - (LOOP_S if set(FAST) <= set(kernels) else 0)


def estimate_s(kernels: list[str]) -> int:
    """About how many seconds compiling ``kernels`` takes on 2 cores: the longer of the two groups that
    :func:`split` compiles side by side, each the sum of its kernels' ``KERNELS`` seconds."""
    return max(_seconds(group) for group in split(list(dict.fromkeys(kernels))))


def warm(kernel: str) -> None:
    """Compile ``kernel`` by evaluating a 64-byte PE-to-PE transfer on the default system (``fast`` and
    ``points``: by calling the kernel on the stored inputs of that transfer, see the module notes;
    ``collectives``: by building a 4 KiB all-reduce on ring6, which runs the symbolic check and the route
    composition; ``pipeline``: one one-tile GEMM recurrence; ``network``: the queueing network of a 4 KiB
    all-reduce)."""
    if kernel == "points":
        _warm_schedule_loop()
    if kernel in CALL_SITES and _warm_from_inputs(kernel):
        return
    _warm_by_program(kernel)


def _warm_schedule_loop() -> None:
    """Compile the schedule's event loop (``kbfast.fast.schedule._run``) on its own, from the stored inputs of
    the schedule: the points kernel compiles it first anyway, and meanwhile the command's own process caches
    the bound kernels (``runs``) that the points kernel calls next, which it then loads instead of compiling
    them a second time.  Nothing when the inputs do not load."""
    from kbfast.fast.schedule import _run
    from kbfast.sim.agents import new_state
    try:
        mode, extra, share, head, iso, fabric, hbm, P, routes, sharing, W = load_inputs()["fast"]
    except Exception:       # noqa: BLE001 - unreadable or stale inputs: the points kernel compiles it
        return
    _run(mode, extra, share, head, iso, fabric, hbm, P, new_state(P), W, routes, sharing)


def _warm_from_inputs(kernel: str) -> bool:
    """Call ``kernel`` on its stored inputs; False when they do not load (missing, or from other code)."""
    try:
        args = load_inputs()[kernel]
    except Exception:       # noqa: BLE001 - unreadable or stale inputs: build the Program instead
        return False
    module, name, _ = KERNELS[kernel]
    getattr(importlib.import_module(module), name)(*args)
    return True


def load_inputs() -> dict[str, tuple]:
    """The stored inputs of the fast group's kernels (``INPUTS``)."""
    with open(INPUTS, "rb") as f:
        return pickle.load(f)


def record_inputs() -> dict[str, tuple]:
    """The arguments of the first call of each kernel of ``CALL_SITES`` while the Program path warms it."""
    seen: dict[str, tuple] = {}
    for kernel, (module, name) in CALL_SITES.items():
        site = importlib.import_module(module)
        kernel_fn = getattr(site, name)

        def spy(*args, _kernel=kernel, _fn=kernel_fn):
            seen.setdefault(_kernel, copy.deepcopy(args))   # before the kernel updates its memo
            return _fn(*args)

        setattr(site, name, spy)
        try:
            _warm_by_program(kernel)
        finally:
            setattr(site, name, kernel_fn)
    return seen


def _warm_by_program(kernel: str) -> None:
    """Compile ``kernel`` by building and evaluating its warm-up Program (:func:`warm`)."""
    from kbfast.config import load_system
    from kbfast.topology.builder import build_tables
    from kbfast.topology.routing import Router
    from kbfast.workloads.collectives import allreduce, pe2pe

    if kernel == "network":
        from kbfast.fast.evaluate import network_schedule
        t = build_tables(load_system())
        network_schedule(allreduce(t, Router(t), 4096).program)
        return
    if kernel == "collectives":
        t6 = build_tables(load_system("ring6"))
        allreduce(t6, Router(t6), 4096)
        return
    if kernel in ("runs", "tight"):
        # the upper bound's kernels, which the fast path and the points kernel call: compiled here, beside
        # the fast group's second process, they are cached by the time that process needs them; "tight":
        # those only run_fast's tight bound calls (a Program with IPCQ messages, kbfast.fast.evaluate._upper)
        import numpy as np
        from kbfast.fast.bounds import interference, window_offsets
        from kbfast.fast.runs import run_charges
        from kbfast.fast.causal import causal_interference, fifo_order
        from kbfast.fast.plan import causal_order, plan_fast, run_bound
        from kbfast.ir import Op
        t = build_tables(load_system())
        p = pe2pe(t, Router(t), "h1", 64).program
        B = plan_fast(p).bounds
        R = run_bound(B)
        z = np.zeros(p.n_ops)
        posted = np.zeros(p.n_ops, np.bool_)
        if kernel == "tight":
            pre, post, _, _ = window_offsets(B, p.op_nbytes, 256, p.op_code == Op.SEND)
            causal_interference(B, p.op_nbytes, 256, z, z, z, posted, causal_order(p, B), pre, post, fifo_order(B),
                                R)
            return
        pre, seq_pre = np.zeros(len(B.res)), np.zeros(len(B.seq_res))
        for windows in (True, False):
            run_charges(B, R, p.op_nbytes, 256, z, z, windows, seq_pre, seq_pre)
            interference(B, p.op_nbytes, 256, z, z, windows, z, posted, R.done, pre, pre)
        return
    if kernel == "pipeline":
        import numpy as np
        from kbfast.fast.pipeline import pipeline_batch
        one, ns = np.ones(1, np.int64), np.ones(1)
        pipeline_batch(one, one, one, ns, ns, ns, ns, ns, ns, ns, ns, ns, ns, ns)
        return
    t = build_tables(load_system())
    router = Router(t)
    c = pe2pe(t, router, "h1", 64)
    if kernel == "exact":
        from kbfast.exact import run_exact
        run_exact(c.program)
    elif kernel == "fast":
        from kbfast.fast.evaluate import run_fast
        run_fast(c.program)
    elif kernel == "points":
        from kbfast.fast.rescale import evaluate_points
        from kbfast.sim.lowering import channel_hop_bws
        evaluate_points(c.program, channel_hop_bws(c.program, router), c.launch_ns, [64], [0], [4])
    else:
        raise ValueError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")


def start(kernels: list[str]) -> subprocess.Popen | None:
    """Compile ``kernels`` in a background process (output discarded); None when there is nothing to do."""
    if not kernels:
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", "kbfast.measure.warmup", *kernels],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:       # no second process: the command compiles them itself, as it goes
        return None


if __name__ == "__main__":
    if sys.argv[1:] == ["--save-inputs"]:
        with open(INPUTS, "wb") as out:
            pickle.dump(record_inputs(), out, protocol=pickle.HIGHEST_PROTOCOL)
        print(f"written to {INPUTS}")
    else:
        for k in sys.argv[1:]:
            warm(k)
