"""``kbfast bench --vs REV``: this tree's benchmarks paired with another revision's (docs/bench.md: a regression
counts only when it is paired).

The other revision is checked out once into a git worktree kept under the repository's git directory
(``<git dir>/kbfast-bench/<commit>``), with a Numba cache of its own beside it. Both sides run ``kbfast
bench`` in a fresh process each, from their own tree (kbfast.bench.side: its topologies and models too),
on this environment's Python and packages, alternated round by round
(base, this, base, this, ...), so a drift of the machine touches both. A figure is compared by the mean of
its rounds, as a slowdown: this over base for a time, a size or a share, base over this for a rate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kbfast.errors import KbfastError

REGRESSION = 1.10        # a figure more than 10 % slower, paired, is a regression (the engineering rules)
SIDES = ("base", "this")


@dataclass(frozen=True)
class Side:
    """One revision to benchmark: its label, source root and commit, and the Numba cache it uses (None: the
    environment's)."""

    label: str
    root: Path
    commit: str
    numba_cache: Path | None


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode:
        raise KbfastError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def this_tree() -> Side:
    """The source tree kbfast runs from, which must be a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = _git(root, "rev-parse", "HEAD")
    except (KbfastError, FileNotFoundError) as err:
        raise KbfastError(f"--vs compares git revisions, but kbfast runs from {root}, which is not a git "
                          f"checkout ({err})\n  hint: install kbfast from a clone (pip install -e .)") from None
    dirty = " (with uncommitted changes)" if _git(root, "status", "--porcelain", "--untracked-files=no") else ""
    return Side(f"this tree, {commit[:9]}{dirty}", root, commit, None)


def base_tree(rev: str, this: Side) -> Side:
    """Revision ``rev`` checked out in a worktree of its own (created on first use, reused after), with its own
    Numba cache."""
    try:
        commit = _git(this.root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except KbfastError:
        raise KbfastError(f"--vs {rev}: not a revision of {this.root}\n  hint: give a commit, a branch or a tag "
                          "(git log --oneline shows them)") from None
    store = Path(_git(this.root, "rev-parse", "--git-common-dir"))
    store = (store if store.is_absolute() else this.root / store) / "kbfast-bench"
    where = store / commit
    if not (where / "kbfast").is_dir():
        store.mkdir(parents=True, exist_ok=True)
        _git(this.root, "worktree", "prune")
        _git(this.root, "worktree", "add", "--force", "--detach", str(where), commit)
    return Side(f"{rev}, {commit[:9]}", where, commit, store / f"{commit}.numba")


BOOT = Path(__file__).with_name("side.py")     # each side's sitecustomize (kbfast.bench.side)


_BOOT_DIR: tempfile.TemporaryDirectory | None = None      # removed when this process ends


def _boot() -> Path:
    """A folder holding ``side.py`` as ``sitecustomize.py``, made once per process."""
    global _BOOT_DIR
    if _BOOT_DIR is None:
        _BOOT_DIR = tempfile.TemporaryDirectory(prefix="kbfast-bench-")
        (Path(_BOOT_DIR.name) / "sitecustomize.py").write_text(BOOT.read_text())
    return Path(_BOOT_DIR.name)


def _env(side: Side) -> dict[str, str]:
    """The environment of one side's processes: its tree found first (``side.py`` as ``sitecustomize``, from a
    folder first on ``PYTHONPATH``; every child process inherits it), and its own Numba cache."""
    env = {**os.environ, "KBFAST_BENCH_TREE": str(side.root),
           "PYTHONPATH": os.pathsep.join(x for x in (str(_boot()), str(side.root), os.environ.get("PYTHONPATH")) if x)}
    if side.numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = str(side.numba_cache)
    if env.pop("KBFAST_DEFAULT_NUMBA_OPT", None):   # each revision at its own default, not this one's
        env.pop("NUMBA_OPT", None)
    return env


def _command(side: Side, *args: str) -> list[str]:
    """``kbfast ARGS`` of ``side``'s tree in a fresh Python process (``-c CODE``: that code)."""
    return [sys.executable, *(args if args[:1] == ("-c",) else ("-m", "kbfast", *args))]


def benchmarks_of(side: Side) -> list[str]:
    """The benchmark names ``side``'s revision has."""
    done = subprocess.run(_command(side, "-c", "from kbfast.bench import BENCHMARKS; print(*BENCHMARKS)"),
                          env=_env(side), cwd=side.root, capture_output=True, text=True)
    if done.returncode:
        raise KbfastError(f"cannot list the benchmarks of {side.label}: {done.stderr.strip()[-300:]}")
    return done.stdout.split()


def run_side(side: Side, names: list[str], out: Path) -> pd.DataFrame:
    """``kbfast bench --only ...`` of ``side`` in a fresh process; its figures."""
    cmd = _command(side, "bench", *(a for n in names for a in ("--only", n)), "--out", str(out))
    done = subprocess.run(cmd, env=_env(side), cwd=side.root, capture_output=True, text=True)
    if done.returncode:
        raise KbfastError(f"kbfast bench of {side.label} failed (exit {done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[-400:]}")
    return pd.read_csv(out)


def paired_runs(base: Side, this: Side, names: list[str], rounds: int,
                progress: Callable[[str], None] = lambda _: None) -> pd.DataFrame:
    """Every figure of every run, the sides alternated ``rounds`` times, each going first in every other round
    (base, this, this, base, ...): on a 2-core machine the second run of a round measured about 4 % slower
    whichever side it was.  Columns: side, round, and the bench CSV's (name, value, unit, ...)."""
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            order = list(zip(SIDES, (base, this)))
            for key, side in order if i % 2 == 0 else order[::-1]:
                progress(f"round {i + 1} of {rounds}: {side.label}")
                frames.append(run_side(side, names, Path(tmp) / f"{key}{i}.csv").assign(side=key, round=i + 1))
    return pd.concat(frames, ignore_index=True)


def compare(runs: pd.DataFrame) -> pd.DataFrame:
    """Per figure both sides have: the mean of each side's rounds and the slowdown (above 1: this tree is
    slower; a rate's is base over this), and whether it is a regression (over ``REGRESSION``)."""
    runs = runs.copy()
    if "higher_is_better" not in runs:        # a revision from before the column: its rates by their units
        runs["higher_is_better"] = runs["unit"].str.contains("/|x faster", regex=True)
    mean = runs.pivot_table(index="name", columns="side", values="value", aggfunc="mean", sort=False)
    mean = mean.dropna(subset=[s for s in SIDES if s in mean])
    first = runs.drop_duplicates("name").set_index("name")
    out = pd.DataFrame({"unit": first.loc[mean.index, "unit"], "base": mean["base"], "this": mean["this"]})
    higher = runs[runs["side"] == "this"].drop_duplicates("name").set_index("name")["higher_is_better"]
    higher = higher.reindex(out.index).fillna(False).astype(bool)
    out["slowdown"] = (out["this"] / out["base"]).where(~higher, out["base"] / out["this"])
    out["regression"] = out["slowdown"] > REGRESSION
    return out.reset_index()
