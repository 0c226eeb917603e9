"""kbfast: a fast performance model of the AHBM accelerator system.

The public API, loaded on first use (``import kbfast`` stays light):

* ``load_system``: a preset or YAML file, validated, as a ``SystemSpec``;
* ``build_tables``: the flat topology tables; ``Router``: the routes on them;
* ``allreduce``, ``pe2pe``, ``build_catalogue``: workload generators, each giving a Program;
* ``run_fast``, ``run_exact``: the two evaluators; ``compare``: both, with the error and the bounds check.

>>> import kbfast
>>> t = kbfast.build_tables(kbfast.load_system("ring6"))
>>> c = kbfast.allreduce(t, kbfast.Router(t), 16384)
>>> kbfast.run_fast(c.program).makespan_ns > 0
True
"""

from __future__ import annotations

import importlib
import os

__version__ = "0.1.0"

# LLVM optimises kbfast's kernels at -O1, not Numba's -O3: paired, every bench row runs as fast, and a first
# run compiles about a tenth less (docs/README.md, "First run").  It is process-wide, as Numba's option is.
# A NUMBA_OPT of the user's own, in the environment or in Numba's config file, wins.
# KBFAST_DEFAULT_NUMBA_OPT marks the choice as kbfast's, for child processes (``bench --vs`` drops both).
if "NUMBA_OPT" not in os.environ and not os.path.isfile(".numba_config.yaml"):
    os.environ["NUMBA_OPT"] = "1"
    os.environ["KBFAST_DEFAULT_NUMBA_OPT"] = "1"

_API = {
    "load_system": "kbfast.config",
    "build_tables": "kbfast.topology.builder",
    "Router": "kbfast.topology.routing",
    "allreduce": "kbfast.workloads.collectives",
    "pe2pe": "kbfast.workloads.collectives",
    "build_catalogue": "kbfast.workloads.probe_catalogue",
    "run_fast": "kbfast.fast.evaluate",
    "run_exact": "kbfast.exact",
    "compare": "kbfast.measure.compare",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kbfast' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
