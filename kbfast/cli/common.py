"""Shared CLI plumbing: loading the topology with overrides, and turning user errors into exit code 2."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from kbfast.config import DEFAULT_TOPOLOGY, SystemSpec, load_system, parse_override
from kbfast.config.units import parse_size  # noqa: F401  (re-exported for the commands)
from kbfast.errors import KbfastError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

TopologyArg = Annotated[str, typer.Argument(help="Preset name (see `kbfast topo list`) or path to a topology YAML.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a key: --set sip.cube_mesh.w=8 (repeatable).")]



class OutputFormat(str, Enum):
    """What a command prints: a rich table, CSV or JSON (one format choice for every command)."""

    table = "table"
    csv = "csv"
    json = "json"


def user_errors(fn: F) -> F:
    """Print a KbfastError as one clear message on stderr and exit with its code (design §10)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KbfastError as err:
            err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, markup=True, emoji=False)
            sys.exit(err.exit_code)

    return wrapper  # type: ignore[return-value]


# The Numba kernels a command may compile on its first run, and roughly how long each adds to it on the
# 2-core reference machine ("points" calls "fast": it adds its own share only; docs/README.md, "First run").
KERNELS = {
    "fast": ("kbfast.fast.schedule", "schedule", 40),
    "points": ("kbfast.fast.points", "points_kernel", 50),
    "exact": ("kbfast.exact.engine", "replay", 30),
}


def _cached(module: str, name: str) -> bool:
    """Whether the Numba cache holds an index for this kernel (its compiled code is then loaded, not built)."""
    cache = getattr(getattr(importlib.import_module(module), name), "_cache", None)
    return cache is None or os.path.exists(getattr(cache, "_index_path", ""))


def compile_notice(*needs: str) -> None:
    """Say on stderr, before the work starts, which kernels a first run compiles and roughly how long it takes:
    otherwise a first run looks hung.  Silent when every kernel is cached."""
    missing = [n for n in dict.fromkeys(needs) if not _cached(*KERNELS[n][:2])]
    if missing:
        secs = sum(KERNELS[n][2] for n in missing)
        err_console.print(f"first run: compiling the {' and '.join(missing)} kernels once (about {secs} s on 2 cores; "
                          "they are cached, later runs skip this)", highlight=False)


def load(topology: str | None, sets: list[str] | None) -> SystemSpec:
    overrides = dict(parse_override(s) for s in (sets or []))
    return load_system(topology or DEFAULT_TOPOLOGY, overrides)
