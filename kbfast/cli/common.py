"""Shared CLI plumbing: loading the topology with overrides, and turning user errors into exit code 2."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from kbfast.config import DEFAULT_TOPOLOGY, SystemSpec, load_system, parse_override
from kbfast.errors import KbfastError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

TopologyArg = Annotated[str, typer.Argument(help="Preset name (see `kbfast topo list`) or path to a topology YAML.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a key: --set sip.cube_mesh.w=8 (repeatable).")]


def user_errors(fn: F) -> F:
    """Print a KbfastError as one clear message on stderr and exit with its code (design §10)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KbfastError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False, markup=True)
            sys.exit(err.exit_code)

    return wrapper  # type: ignore[return-value]


_SUFFIX = {"": 1, "B": 1, "KB": 1000, "MB": 10**6, "GB": 10**9, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30,
           "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from ``4096``, ``16KiB``, ``1MiB``, ``96KB`` (KB = 1000 B, KiB = 1024 B)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).upper() if m else None
    if m is None or unit not in _SUFFIX:
        raise KbfastError(f"size {text!r} is not understood; use bytes or a suffix: 256B, 16KiB, 1MiB, 96KB")
    value = float(m.group(1)) * _SUFFIX[unit]
    if value != int(value) or value < 0:
        raise KbfastError(f"size {text!r} is not a whole, non-negative number of bytes")
    return int(value)


def load(topology: str | None, sets: list[str] | None) -> SystemSpec:
    overrides = dict(parse_override(s) for s in (sets or []))
    return load_system(topology or DEFAULT_TOPOLOGY, overrides)
