"""Run a sweep: batches on this process, a local process pool or a Dask cluster, saved as they finish (design §10).

Every finished batch is written at once to ``DIR/parts/`` (a temp file, then an
atomic rename), so Ctrl-C or a kill loses only batches still running.
``resume`` reads the parts, skips the points whose config hash is there and
evaluates the rest.  At the end the parts are joined, in point order, into
``DIR/results.<fmt>`` (and ``links``/``pcs`` tables when asked for).

One sweep at a time writes a folder (:func:`sweep_lock`), and ``DIR/sweep.json``
records the spec its results come from, so that ``resume`` continues only that
spec (:func:`check_out_dir`).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd

from kbfast import __version__
from kbfast.errors import KbfastError
from kbfast.report.formats import clean_columns
from kbfast.sweep.batches import CHECK_COLUMNS, METRICS, Batch, BatchResult, evaluate_batch, make_batches
from kbfast.sweep.spec import Point, SweepSpec, param_set_label
from kbfast.measure.registry import WORKLOADS

FORMATS = ("parquet", "csv")
PROVENANCE = ("kbfast_version", "config_hash", "mode", "param_set", "seed")
STANDARD = ("topology", "sip_topology", "n_sips", "workload", "algorithm", "tile_io", "hop", "case", "size",
            "buffer_kind", "n_slots")
WORKLOAD_COLUMNS = tuple(dict.fromkeys(c for k in WORKLOADS.values() for c in k.columns if c not in STANDARD))
# System key paths that a standard column restates (an axis ``workload.<field>`` restates ``<field>``).
RESTATED = {"sips.topology": "sip_topology", "sips.count": "n_sips", "ipcq.buffer_kind": "buffer_kind",
            "ipcq.n_slots": "n_slots"}


class SweepInterrupted(KbfastError):
    """Ctrl-C during a sweep: what finished is saved; ``--resume`` continues."""

    exit_code = 130


@dataclass
class SweepOutcome:
    """What a sweep produced: the results table and where it went, with timing for the overhead figure."""

    spec: SweepSpec
    out_dir: Path
    results: pd.DataFrame
    files: list[Path]
    n_points: int
    n_evaluated: int
    wall_s: float
    eval_s: float
    corrupt: list[Path] = field(default_factory=list)   # parts found unreadable on --resume, set aside

    @property
    def n_errors(self) -> int:
        """Points that failed (a non-empty ``error``)."""
        return int(self.results["error"].notna().sum()) if "error" in self.results else 0


def failed_points(df: pd.DataFrame) -> pd.Series:
    """The points of a results table that failed, in point order: point -> message.  A point fails when its
    evaluation does (``error``) or when the exact replay that checks it does (``check_error``, marked so)."""
    failed: dict[int, str] = {}
    for col, tag in (("error", ""), ("check_error", "exact replay: ")):
        if col in df:
            rows = df[df[col].notna()]
            for point, message in zip(rows["point"] if "point" in rows else rows.index, rows[col]):
                failed.setdefault(int(point), f"{tag}{message}")
    return pd.Series(dict(sorted(failed.items())), dtype=object)


def atomic_write(df: pd.DataFrame, path: Path) -> None:
    """Write ``df`` as Parquet or CSV (by suffix) to a temp file beside ``path``, then rename it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise KbfastError(f"cannot write {path} ({err.strerror or err}); what finished before is saved in "
                          f"{path.parent}, so free space or fix the folder and run again with --resume") from None


def read_table(path: Path) -> pd.DataFrame:
    """A results table written by ``atomic_write`` (Parquet or CSV by suffix); a missing, empty or unreadable
    file is a KbfastError naming it."""
    if not path.is_file():
        raise KbfastError(f"{path}: no such results file; give the results.parquet or results.csv of a sweep")
    if path.stat().st_size == 0:
        raise KbfastError(f"{path}: the file is empty; give the results.parquet or results.csv of a sweep")
    kind = "CSV" if path.suffix == ".csv" else "Parquet"
    try:
        return pd.read_csv(path) if kind == "CSV" else pd.read_parquet(path)
    except Exception as err:   # pyarrow, pandas and codec errors: the file is not a table kbfast wrote
        reason = str(err).split("\n")[0][:200]
        raise KbfastError(f"{path}: not a readable {kind} results table ({type(err).__name__}: {reason}); give "
                          "the results.parquet or results.csv of a sweep (CSV needs the .csv suffix)") from None


def _tidy(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns hold None for a missing value (as Parquet reads them back), and columns that mix
    types (an axis of ``[null, 2]`` next to strings) become text, so Parquet accepts them."""
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].where(df[col].notna(), None)
            types = {type(v) for v in df[col] if v is not None}
            if len(types) > 1:
                df[col] = df[col].map(lambda v: None if v is None else str(v))
    return df


def _part_name(batch: Batch) -> str:
    digest = hashlib.sha256("".join(p.config_hash for p in batch.points).encode()).hexdigest()[:16]
    return f"{digest}-{len(batch.points)}"


def _save(parts: Path, batch: Batch, res: BatchResult) -> None:
    name = _part_name(batch)
    for kind, df in (("links", res.links), ("pcs", res.pcs)):
        if df is not None:
            atomic_write(df, parts / f"{kind}-{name}.parquet")
    atomic_write(_tidy(res.rows), parts / f"results-{name}.parquet")   # last: its presence marks the batch done


def _read_parts(parts: Path, kind: str) -> pd.DataFrame | None:
    files = sorted(parts.glob(f"{kind}-*.parquet"))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True) if files else None


def set_aside_corrupt(parts: Path) -> list[Path]:
    """Parts that cannot be read back (or a results part without its ``config_hash`` column) are renamed to
    ``*.corrupt``, with the other parts of their batch removed, so that their points are evaluated again and
    nothing else is lost.  Returns the corrupt files' new paths."""
    bad: list[Path] = []
    for f in sorted(parts.glob("*.parquet")):
        try:
            cols = pd.read_parquet(f).columns
        except Exception:   # pyarrow's errors for a truncated or foreign file
            bad.append(f)
            continue
        if f.name.startswith("results-") and not {"point", "config_hash"} <= set(cols):
            bad.append(f)
    moved = []
    for f in bad:
        batch = f.name.split("-", 1)[1]
        for kind in ("results", "links", "pcs"):
            sibling = parts / f"{kind}-{batch}"
            if sibling != f and sibling.exists():
                sibling.unlink()
        moved.append(f.with_name(f.name + ".corrupt"))
        os.replace(f, moved[-1])
    return moved


def _distinct(points: list[Point]) -> list[int]:
    """The index of the first point of each class of points that differ only in keys their workload ignores
    (``WorkloadKind.ignored_keys``): those give the same result, so a cross-check needs one of them."""
    seen: dict[str, int] = {}
    for p in points:
        ignored = WORKLOADS[p.workload["kind"]].ignored_keys(p.workload)
        if not ignored:
            seen.setdefault(f"{p.index}", p.index)
            continue
        def kept(key: str) -> bool:
            return not any(key == i or (i.endswith(".") and key.startswith(i)) for i in ignored)
        over = sorted((k, repr(v)) for k, v in p.overrides.items() if kept(k))
        work = sorted((k, repr(v)) for k, v in p.workload.items() if kept(f"workload.{k}"))
        seen.setdefault(repr([p.topology, over, work]), p.index)
    return list(seen.values())


def ignored_axes(spec: SweepSpec, points: list[Point]) -> dict[str, str]:
    """The axes of ``spec`` that some points' workload ignores, each with why (for the --check warning)."""
    out: dict[str, str] = {}
    for p in points:
        kind = WORKLOADS[p.workload["kind"]]
        ignored = kind.ignored_keys(p.workload)
        for key in spec.axis_keys:
            if key not in out and any(key == i or (i.endswith(".") and key.startswith(i)) for i in ignored):
                out[key] = kind.ignored_reason(key, p.workload)
    return out


def check_sample(n_points: int, k: int, seed: int, points: list[Point] | None = None) -> set[int]:
    """The ``k`` point indices to cross-check exactly, drawn from the spec's seed (independent of jobs).
    Given the ``points``, one point per class of points that differ only in keys their workload ignores
    is eligible (the first), so no two checked points are the same computation."""
    if k <= 0 or n_points == 0:
        return set()
    pool = np.asarray(_distinct(points)) if points is not None else np.arange(n_points)
    rng = np.random.default_rng(seed)
    return {int(i) for i in rng.choice(pool, size=min(k, len(pool)), replace=False)}


_KEPT: dict[int, object] = {}     # jobs -> the pool :func:`kept_workers` keeps for the sweeps inside it


def _pool(jobs: int):
    return get_context("spawn").Pool(jobs, initializer=worker_init, initargs=(os.getpid(),))


@contextmanager
def kept_workers(jobs: int) -> Iterator[None]:
    """Sweeps of ``jobs`` processes inside share one pool of workers, spawned once, whose caches (traces,
    collective and GEMM timings) carry from one sweep to the next (``kbfast search``'s bounds, then its points);
    the workers end on leaving."""
    if jobs <= 1 or jobs in _KEPT:
        yield
        return
    _KEPT[jobs] = pool = _pool(jobs)
    try:
        yield
    finally:
        _KEPT.pop(jobs, None)
        pool.terminate()
        pool.join()


def run_local(batches: list[Batch], jobs: int) -> Iterator[tuple[Batch, BatchResult]]:
    """Evaluate batches in this process (``jobs`` = 1) or on spawned worker processes (a :func:`kept_workers`
    pool when there is one); yield them as they finish.

    Workers ignore Ctrl-C and die with this process (:func:`worker_init`); when the caller stops early (Ctrl-C,
    an error, or closing this generator) they are terminated at once, so what is running is dropped and what
    finished is already saved (a kept pool too: it serves no more sweeps)."""
    if jobs <= 1:
        for b in batches:
            yield b, evaluate_batch(b)
        return
    kept = _KEPT.get(jobs)
    pool = kept or _pool(min(jobs, max(len(batches), 1)))
    done = False
    try:
        for i, res in pool.imap_unordered(_evaluate_nth, list(enumerate(batches))):
            yield batches[i], res
        done = True
    finally:
        if not (kept and done):
            pool.terminate()        # SIGTERM: a worker inside a kernel stops at once
            pool.join()
            if kept:
                _KEPT.pop(jobs, None)


def _evaluate_nth(item: tuple[int, Batch]) -> tuple[int, BatchResult]:
    return item[0], evaluate_batch(item[1])


PARENT_POLL_S = 0.5


def worker_init(parent: int) -> None:
    """A pool worker: Ctrl-C is the parent's to handle (it terminates the pool), and the worker exits when the
    parent dies, even by SIGKILL: Linux's PR_SET_PDEATHSIG delivers SIGKILL then (even inside a Numba kernel),
    and a watchdog thread exits when the parent process id changes (other systems, or a worker started after
    its parent died)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)   # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="kbfast-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _run_dask(batches: list[Batch], scheduler: str, jobs: int) -> Iterator[tuple[Batch, BatchResult]]:
    """The same batches on a Dask cluster: a running scheduler's address, or ``local`` for a LocalCluster."""
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError:
        raise KbfastError("--scheduler needs Dask distributed: pip install 'kbfast[dist]'") from None
    if scheduler == "local":
        cluster = LocalCluster(n_workers=max(jobs, 1), threads_per_worker=1, processes=True, dashboard_address=None)
    elif scheduler.startswith(("tcp://", "tls://", "inproc://", "ws://")):
        cluster = None
    else:
        raise KbfastError(f"--scheduler {scheduler!r}: give a scheduler address like tcp://host:8786, or 'local'")
    try:
        client = Client(cluster if cluster is not None else scheduler, timeout="30s")
    except OSError as err:
        raise KbfastError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({err})") from None
    try:
        futures = {client.submit(evaluate_batch, b, pure=False, key=f"kbfast-batch-{_part_name(b)}"): b
                   for b in batches}
        for fut in dask_completed(list(futures)):
            yield futures[fut], fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def order_columns(df: pd.DataFrame, spec: SweepSpec) -> pd.DataFrame:
    """Inputs (axis keys, then the standard and workload columns), metrics, errors and checks, provenance;
    floats without float noise (kbfast.report.formats.clean_columns).  An axis that restates a standard or
    workload column (``workload.<field>`` is ``<field>``, ``ipcq.n_slots`` is ``n_slots``, ``sips.count``
    is ``n_sips``: RESTATED) is not repeated when the short column holds the same value on every row, so
    every sweep of a workload has the same input columns."""
    for key in spec.axis_keys:
        short = key.split(".", 1)[1] if key.startswith("workload.") else RESTATED.get(key)
        if key in df and short in df and key != short:
            a, b = df[key], df[short]
            if (a.isna() | (b.notna() & (a.astype(str) == b.astype(str)))).all():   # else (a point failed
                df = df.drop(columns=[key])                                          # before resolving) keep both
    first = ["point", *[k for k in spec.axis_keys if k not in STANDARD], *STANDARD, *WORKLOAD_COLUMNS]
    last = ["error", *CHECK_COLUMNS, "check_error", *PROVENANCE]
    middle = [*METRICS]
    cols = [c for c in first if c in df] + [c for c in middle if c in df]
    cols += [c for c in df.columns if c not in cols and c not in last] + [c for c in last if c in df]
    return clean_columns(df[cols].copy())


def assemble(spec: SweepSpec, points: list[Point], parts: Path) -> pd.DataFrame:
    """One row per point, in point order, from the saved parts: the row saved for the same point and config
    hash, else (the spec was reordered since) any row saved for the same config hash."""
    saved = _read_parts(parts, "results")
    order = pd.DataFrame({"point": [p.index for p in points], "config_hash": [p.config_hash for p in points]})
    if saved is None:
        return order.iloc[:0]
    same = order.merge(saved.drop_duplicates(["point", "config_hash"], keep="last"), on=["point", "config_hash"])
    rest = order[~order["point"].isin(same["point"])]
    moved = rest.merge(saved.drop(columns=["point"]).drop_duplicates("config_hash", keep="last"), on="config_hash")
    df = _tidy(pd.concat([same, moved], ignore_index=True))   # parts may disagree on a column's type
    sets = {p.index: param_set_label(p) or "" for p in points}   # the system's parameter set (design §8)
    df["param_set"] = df["point"].map(sets)
    df["seed"] = spec.seed
    return order_columns(df.sort_values("point", kind="stable").reset_index(drop=True), spec)


LOCK = "sweep.lock"        # held (flock) while a sweep writes its folder; the file holds the writer's pid
RECORD = "sweep.json"      # the spec whose results the folder holds: its file and digest (SweepSpec.digest)
SUMMARY = "summary.md"
_HELD: dict[Path, int] = {}   # folders whose lock this process holds, with how many holders (reentrant)


@contextmanager
def sweep_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``DIR/sweep.lock`` while writing ``out_dir``: a second sweep on the folder is refused with the
    holder's pid.  The lock is an exclusive ``flock``, which the system releases when its process ends, so a
    lock file left by a process that died (a kill, a crash) is taken over.  Reentrant in one process (the
    ``kbfast sweep`` command holds it around ``run_sweep``, which takes it too); the file is removed on release."""
    key = out_dir.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _lock_holder(path)
            raise KbfastError(f"--out {out_dir}: another sweep ({holder}) is writing this folder (it holds "
                              f"{path}); wait for it to finish, or choose another --out") from None
        try:   # the holder before us may have removed the file between our open and our flock: lock afresh
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        try:
            path.unlink()
        finally:
            os.close(fd)


def _lock_holder(path: Path) -> str:
    """``pid N`` of the process named in a lock file (or that it is not known yet)."""
    try:
        pid = path.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "pid not written yet"


def _record(out_dir: Path) -> dict | None:
    """The spec recorded in ``DIR/sweep.json`` (None when there is none, or it does not read)."""
    try:
        data = json.loads((out_dir / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_flags(resume: bool, overwrite: bool) -> None:
    """``--resume`` and ``--overwrite`` exclude each other."""
    if resume and overwrite:
        raise KbfastError("--resume and --overwrite exclude each other: --resume keeps the saved points, "
                          "--overwrite discards them; drop one")


def check_out_dir(out_dir: Path, resume: bool, overwrite: bool, spec: SweepSpec) -> None:
    """A folder that holds a sweep's output (its parts, record, summary.md, or a results, links or pcs table) is
    replaced only with ``--overwrite``.  ``--resume`` continues it only for the same ``spec`` (the digest
    recorded in ``sweep.json``; a folder of an older kbfast has no record and resumes from its parts), and
    does not take over a results table or summary.md that no sweep recorded (:func:`check_flags` first)."""
    check_flags(resume, overwrite)
    if overwrite:
        return
    parts = out_dir / "parts"
    saved = parts.is_dir() and any(parts.iterdir())
    held = [RECORD] if (out_dir / RECORD).exists() else []
    held += ["sweep results (parts/)"] if saved else []
    held += [f.name for kind in ("results", "links", "pcs") for f in sorted(out_dir.glob(f"{kind}.*"))
             if f.suffix in (".parquet", ".csv")]
    held += [SUMMARY] if (out_dir / SUMMARY).exists() else []
    record = _record(out_dir)
    if held and record is None and not saved:     # not a sweep's: nothing to resume
        raise KbfastError(f"--out {out_dir} already holds {held[0]}, which no sweep recorded (no {RECORD}, no "
                          "saved parts): pass --overwrite to replace it, or choose another --out")
    if held and not resume:
        raise KbfastError(f"--out {out_dir} already holds {held[0]}: pass --resume to finish that sweep, "
                          "--overwrite to start again, or choose another --out")
    if resume and record is not None and record.get("digest") != spec.digest:
        raise KbfastError(f"--resume: {out_dir} holds the sweep of spec {record.get('spec')} (digest "
                          f"{record.get('digest')}), not of {spec.label} (digest {spec.digest}); resume with that "
                          "spec, pass --overwrite to replace its results, or choose another --out")


def _start(spec: SweepSpec, out_dir: Path, resume: bool, overwrite: bool) -> None:
    """Check the folder (:func:`check_out_dir`); with ``overwrite``, remove the output it held (parts, tables,
    summary.md); record ``spec`` in ``sweep.json``."""
    check_out_dir(out_dir, resume, overwrite, spec)
    if overwrite:
        shutil.rmtree(out_dir / "parts", ignore_errors=True)
        for f in [out_dir / SUMMARY, *(out_dir / f"{kind}.{fmt}" for kind in ("results", "links", "pcs")
                                       for fmt in FORMATS)]:
            f.unlink(missing_ok=True)
    tmp = out_dir / f".{RECORD}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"spec": spec.label, "digest": spec.digest, "kbfast_version": __version__}) + "\n")
    os.replace(tmp, out_dir / RECORD)


def run_sweep(spec: SweepSpec, out_dir: Path, fmt: str = "parquet", jobs: int = 1, scheduler: str | None = None,
              check: int = 0, resume: bool = False, overwrite: bool = False, exact: bool = False,
              links: bool = False, pcs: bool = False, max_batch: int = 4096,
              progress: Callable[[int, int], None] | None = None) -> SweepOutcome:
    """Evaluate every point of ``spec`` and write the results; ``progress(done, total)`` after each batch.
    The folder is locked meanwhile (:func:`sweep_lock`) and records the spec (:func:`check_out_dir`)."""
    if fmt not in FORMATS:
        raise KbfastError(f"--format {fmt!r}: use parquet or csv")
    if jobs < 1:
        raise KbfastError(f"--jobs {jobs}: use 1 or more")
    t0 = time.perf_counter()
    spec = spec.evaluated(exact)
    points = spec.points()
    parts = out_dir / "parts"
    with sweep_lock(out_dir):
        _start(spec, out_dir, resume, overwrite)
        parts.mkdir(parents=True, exist_ok=True)
        corrupt = set_aside_corrupt(parts) if resume else []
        saved = _read_parts(parts, "results")
        done = set(saved["config_hash"]) if saved is not None else set()
        pending = [p for p in points if p.config_hash not in done]
        batches = make_batches(pending, spec.mode, check_sample(len(points), check, spec.seed, points), max_batch,
                               links, pcs)
        if progress:
            progress(len(points) - len(pending), len(points))
        finished, eval_s = len(points) - len(pending), 0.0
        runner = _run_dask(batches, scheduler, jobs) if scheduler else run_local(batches, jobs)
        try:
            for batch, res in runner:
                _save(parts, batch, res)
                finished += len(batch.points)
                eval_s += res.eval_s
                if progress:
                    progress(finished, len(points))
        except KeyboardInterrupt:
            raise SweepInterrupted(f"interrupted: {finished} of {len(points)} points are saved in {parts}; "
                                   "run the same command with --resume to finish") from None
        finally:
            runner.close()
        results = assemble(spec, points, parts)
        files = [out_dir / f"results.{fmt}"]
        atomic_write(results, files[0])
        for kind, wanted in (("links", links), ("pcs", pcs)):
            table = _read_parts(parts, kind) if wanted else None
            if table is not None:
                files.append(out_dir / f"{kind}.{fmt}")
                atomic_write(table[table["config_hash"].isin(set(results["config_hash"]))].reset_index(drop=True),
                             files[-1])
    return SweepOutcome(spec, out_dir, results, files, len(points), len(pending), time.perf_counter() - t0, eval_s,
                        corrupt)
