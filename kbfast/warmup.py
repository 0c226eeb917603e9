"""Compile the Numba kernels a command will need, ahead of need, in a second process (a first run only).

A first run compiles each kernel once and caches it (docs/README.md, "First run").  The machine kbfast
targets has 2 cores and Numba compiles on one, so a command that needs two kernels compiles the one it
needs later in a second process, on a tiny Program of the same types, while it compiles the first
itself; the second then loads from the cache.  ``python -m kbfast.warmup exact`` runs one such compile.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

# kernel -> (module, jitted function, about how many seconds its compile adds to a first run on the
# 2-core reference machine; "points" calls "fast" and adds its own share only)
KERNELS = {
    "fast": ("kbfast.fast.schedule", "schedule", 40),
    "points": ("kbfast.fast.points", "points_kernel", 15),
    "exact": ("kbfast.exact.engine", "replay", 25),
}


def cached(kernel: str) -> bool:
    """Whether the Numba cache holds an index for ``kernel`` (its code is then loaded, not compiled)."""
    module, name, _ = KERNELS[kernel]
    cache = getattr(getattr(importlib.import_module(module), name), "_cache", None)
    return cache is None or os.path.exists(getattr(cache, "_index_path", ""))


def missing(*kernels: str) -> list[str]:
    """The kernels among ``kernels`` (each once, in order) that a run would compile."""
    return [k for k in dict.fromkeys(kernels) if not cached(k)]


def warm(kernel: str) -> None:
    """Compile ``kernel`` by evaluating a 64-byte PE-to-PE transfer on the default system."""
    from kbfast import Router, build_tables, load_system, pe2pe

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
        from kbfast.fast.points import evaluate_points
        evaluate_points(c.program, router, c.launch_ns, [64], [0], [4])
    else:
        raise ValueError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")


def start(kernels: list[str]) -> subprocess.Popen | None:
    """Compile ``kernels`` in a background process (output discarded); None when there is nothing to do."""
    if not kernels:
        return None
    return subprocess.Popen([sys.executable, "-m", "kbfast.warmup", *kernels],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    for k in sys.argv[1:]:
        warm(k)
