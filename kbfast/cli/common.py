"""Shared CLI plumbing: loading the topology with overrides, and turning user errors into exit code 2."""

from __future__ import annotations

import functools
import importlib
import sys
import tempfile
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from kbfast.config import DEFAULT_TOPOLOGY, SystemSpec, load_system
from kbfast.config.loader import parse_overrides
from kbfast.config.units import parse_size
import kbfast.measure.warmup as warmup
from kbfast.errors import KbfastError, clip
from kbfast.report.wrap import QuantityConsole

console = QuantityConsole()                 # strings wrap between quantities: a number keeps its unit
err_console = QuantityConsole(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

TopologyArg = Annotated[str, typer.Argument(help="Preset name (see `kbfast topo list`) or path to a topology YAML.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a key: --set sip.cube_mesh.w=8 (repeatable).")]



class OutputFormat(str, Enum):
    """What a command prints: a rich table, CSV or JSON (one format choice for every command)."""

    table = "table"
    csv = "csv"
    json = "json"


TopologyOpt = Annotated[str | None, typer.Option(help="Preset name or topology YAML (default ahbm_2sip).")]
FmtOpt = Annotated[OutputFormat, typer.Option("--format", help="table, csv or json")]


def user_errors(fn: F) -> F:
    """Print a KbfastError as one clear message on stderr and exit with its code (design §10)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _MADE.clear()
        try:
            return fn(*args, **kwargs)
        except KbfastError as err:
            _remove_made()
            text = clip(str(err), 2000)   # a message never floods the terminal with a huge value
            # soft wrap: the terminal folds a long line, so a path in the message stays whole when copied
            err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, markup=True, emoji=False,
                              soft_wrap=True)
            sys.exit(err.exit_code)

    return wrapper  # type: ignore[return-value]


# Folders :func:`writable` created for the running command, the deepest last: a refused command removes those
# still empty (``search --pp 3``, every candidate pruned, left an empty --out folder behind).
_MADE: list[Path] = []


def _remove_made() -> None:
    """Remove the folders this command created that are still empty, deepest first."""
    for folder in reversed(_MADE):
        try:
            folder.rmdir()
        except OSError:       # not empty (the command wrote there), or gone
            pass
    _MADE.clear()


def first_run(*kernels: str) -> None:
    """Before a command's work: when kernels it needs are not cached yet (a first run), say so on stderr
    with about how long compiling takes (``warmup.estimate_s``), then compile them on both cores
    (``kbfast.measure.warmup``): the fast path's group and what balances it (``warmup.split``) in a second
    process, the rest in this one, and wait.  The work then loads every kernel from the cache.  Otherwise a
    first run looks hung.  Silent and free when all are cached."""
    todo = warmup.missing(*kernels)
    if todo:
        here, there = warmup.split(todo)
        err_console.print(warmup.notice(todo), highlight=False)
        background = warmup.start(there)
        try:
            for k in here:
                warmup.warm(k)
        finally:
            if background is not None:
                if sys.exc_info()[0] is not None:
                    background.terminate()
                background.wait()


def load(topology: str | None, sets: list[str] | None, flags: dict[str, str] | None = None) -> SystemSpec:
    """The system with ``--set`` overrides; ``flags`` names the option behind a key the command set for the
    user (``{"ipcq.n_slots": "--n-slots 0"}``), so that a refusal names that option instead of ``--set``; a refusal
    names a ``--set`` as typed; a key given twice is refused (:func:`kbfast.config.loader.parse_overrides`)."""
    overrides, names = parse_overrides(sets, flags)
    return load_system(topology or DEFAULT_TOPOLOGY, overrides, names)


def check_jobs(jobs: int) -> int:
    """``--jobs``, the worker processes of a sweep, check, search or serving run: 1 or more."""
    return check_count(jobs, "--jobs", 1, "how many worker processes")


def given(*options: str) -> list[str]:
    """Which of ``options`` (``--rate``, as typed) the user gave on this command line, not left at their
    defaults: for a refusal of options another one makes meaningless (``serve --trace`` with ``--rate``)."""
    from kbfast.cli.main import CLICK                    # the Click typer runs (recent typer carries its own)
    ctx = importlib.import_module(f"{CLICK.__name__}.globals").get_current_context(silent=True)
    if ctx is None:
        return []
    out = []
    for param in ctx.command.params:
        flag = max(param.opts, key=len) if param.opts else None
        source = ctx.get_parameter_source(param.name)
        if flag in options and source is not None and source.name == "COMMANDLINE":
            out.append(flag)
    return sorted(out, key=options.index)


def check_modes(exact: bool, compare: bool, method: str | None = None, has_compare: bool = True) -> str:
    """``--exact`` and ``--compare`` exclude each other: --compare already runs both modes.  ``--method``
    (``method``, None when not given) chooses how the fast path makes its point, and ``--exact`` runs no fast
    path: refused together (the hint names --compare where the command ``has_compare``).  Returns the fast
    path's choice, ``hybrid`` when none was given."""
    if exact and compare:
        raise KbfastError("--exact and --compare exclude each other: --compare runs both modes; drop one")
    if exact and method is not None:
        raise KbfastError(f"--method {method}: it chooses how the fast path makes its point, and --exact runs no "
                          f"fast path; drop --method{', or use --compare for both' if has_compare else ''}")
    return "hybrid" if method is None else str(method)


def positive_size(text: str, flag: str = "--size") -> int:
    """A size in bytes that moves something: ``parse_size`` and > 0."""
    negative = text.strip().startswith("-")     # refused below as a size <= 0, not as a misspelt one
    try:
        n = -1 if negative else parse_size(text)
    except KbfastError as err:
        raise KbfastError(f"{flag}: {err}") from None
    if n <= 0:
        raise KbfastError(f"{flag} {text!r} must be > 0 bytes: a transfer moves at least one byte; use e.g. 16KiB")
    return n


def writable(path: Path | None, flag: str, folder: bool = False) -> Path | None:
    """Refuse, before any work, an output that cannot be written: ``path`` is a file (or with ``folder``, a
    folder to write into) given by ``flag``.  Missing folders are created; then a test file is written and
    removed, and an existing file must open for writing; a folder it creates is removed again if the command is
    then refused before writing there (:func:`user_errors`).  Returns ``path`` (None stays None)."""
    if path is None:
        return None
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise KbfastError(f"{flag} {path}: this is a file; give a folder (it is created when missing)")
    if not folder and path.is_dir():
        raise KbfastError(f"{flag} {path}: this is a folder; give a file name inside it")
    target = path if folder else path.parent
    missing = [p for p in (target, *target.parents) if not p.exists()]
    try:
        target.mkdir(parents=True, exist_ok=True)
        _MADE.extend(reversed(missing))
        with tempfile.NamedTemporaryFile(dir=target, prefix=".kbfast-write-test-"):
            pass
        if not folder and path.exists():
            with open(path, "r+b"):
                pass
    except OSError as err:
        raise KbfastError(f"{flag} {path}: cannot write there ({err.strerror or err}); choose another path, "
                          "or make that folder writable") from None
    return path


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def figure_path(path: Path | None, flag: str, default_name: str) -> Path | None:
    """Where a figure goes: ``path``, or ``path/default_name`` when ``path`` is a folder; ``.png`` added
    when it has no suffix; PNG, SVG or PDF only; writable (checked before any work)."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        path = path / default_name
    elif path.suffix == "":
        path = path.with_name(path.name + ".png")
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise KbfastError(f"{flag} {path}: a figure is written as {', '.join(FIGURE_SUFFIXES)}; "
                          f"e.g. {flag} {path.with_suffix('.png')}")
    return writable(path, flag)


def check_count(value: int, flag: str, least: int, what: str) -> int:
    """A count flag (``--check``, ``--sample``) is a whole number >= ``least``."""
    if value < least:
        raise KbfastError(f"{flag} {value}: give {what}, {least} or more")
    return value
