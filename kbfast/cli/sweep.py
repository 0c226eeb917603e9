"""``kbfast sweep``, ``kbfast check`` and ``kbfast plot`` (design §9)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kbfast.cli.common import check_count, check_jobs, console, err_console, figure_path, first_run, user_errors, writable
from kbfast.cli.outputs import table_path, write_table
from kbfast.config.units import format_size
from kbfast.errors import KbfastError, clip, did_you_mean
from kbfast.report.formats import column_unit, count, in_unit, num, pct, percent, plural, wall_time
from kbfast.report.tables import fit, fit_table, narrow_table
from kbfast.report.sweep import (check_summary, check_text, default_plots, default_x, detail_table,
                                 inert_inputs, inert_notes, input_columns, plot_xy, summary_notes, summary_table,
                                 table_view, write_summary)
from kbfast.sweep.batches import CHECK_COLUMNS, make_batches
from kbfast.sweep.runner import (check_flags, check_out_dir, check_sample, failed_points, ignored_axes,
                                 order_columns, read_table, run_local, run_sweep, sweep_lock)
from kbfast.sweep.spec import CONFIRM_POINTS, SweepSpec, example_specs, load_spec
from kbfast.measure.methods import FAST_CHOICES
from kbfast.measure.warmup import FAST_KERNELS
from kbfast.measure.registry import WORKLOADS


class Fmt(str, Enum):
    """The file format of a sweep's results table."""

    parquet = "parquet"
    csv = "csv"


SpecArg = Annotated[str, typer.Argument(help="Sweep spec YAML, or a bundled spec: "
                                             + ", ".join(sorted(Path(p).stem for p in example_specs())) + ".")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", help="Local worker processes.")]
YesOpt = Annotated[bool, typer.Option("--yes", help=f"Run a spec of more than {CONFIRM_POINTS:,} points "
                                                    "(refused without it).")]


PROGRESS_EVERY_S = 5.0   # seconds between two plain progress lines (stderr is a log file or a pipe)


def _rate(per_s: float) -> str:
    """Points per second: whole from 10 up, else two decimals."""
    return f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.2f}"


class ProgressLines:
    """Progress as plain lines, for a stderr that is no terminal (a log file, a pipe), where a bar would print
    nothing readable: the first update, the last, and in between at most one line per ``every`` seconds.
    :meth:`tick` (called by a timer) prints the latest state when ``every`` seconds passed without a line,
    so a long batch still shows that the run goes on.  ``clock`` and ``write`` are injectable for tests."""

    def __init__(self, label: str, every: float, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None, width: int | None = None) -> None:
        self.label, self.every, self.clock = label, every, clock
        self.width = width or err_console.width           # a longer line wraps between its parts
        self.write = write or (lambda line: err_console.print(line, highlight=False, markup=False, soft_wrap=True))
        self.lock = threading.Lock()            # update (the run) and tick (the timer) come from two threads
        self.t0, self.last = clock(), None
        self.start = self.done = self.total = 0

    def update(self, done: int, total: int) -> None:
        """Record progress; print a line at the first update, at the end, and ``every`` seconds."""
        with self.lock:
            if self.last is None:
                self.start = done               # points saved before (--resume) do not count in the rate
            self.done, self.total = done, total
            if self.last is None or done >= total or self.clock() - self.last >= self.every:
                self._line()

    def tick(self) -> None:
        """The timer's call: print a line when no update printed one for ``every`` seconds."""
        with self.lock:   # (a timer's wait may end a hair before ``every`` has passed on ``clock``)
            if self.last is not None and self.done < self.total and self.clock() - self.last >= 0.95 * self.every:
                self._line()

    def _line(self) -> None:
        now = self.clock()
        elapsed = now - self.t0
        per_s = (self.done - self.start) / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.label}: {count(self.done)} / {count(self.total)} points "
                 f"({percent(self.done / self.total if self.total else 1.0)})",
                 *([f"{_rate(per_s)} points/s"] if self.done > self.start else []),   # none yet: no rate
                 f"{wall_time(elapsed)} elapsed"]
        if per_s > 0 and self.done < self.total:
            parts.append(f"about {wall_time((self.total - self.done) / per_s)} left")
        self.write(_wrapped(parts, self.width))
        self.last = now


def _wrapped(parts: list[str], width: int, indent: str = "  ") -> str:
    """``parts`` joined by commas on one line, or, where that is wider than ``width``, on as many lines as
    they need, broken between parts and the later lines indented."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + len(", ") + len(part) + 1 <= width:    # the comma that ends a line counts too
            lines[-1] += f", {part}"
        else:
            lines[-1] += ","
            lines.append(indent + part)
    return "\n".join(lines)


@contextmanager
def progress_of(label: str) -> Iterator:
    """Progress on stderr; yields the update callback ``(done, total)``.  On a terminal a rich bar (points
    done / total, points per second, elapsed, ETA) that is gone before the results print; otherwise plain
    lines (:class:`ProgressLines`), about every ``PROGRESS_EVERY_S`` seconds from a timer thread."""
    if not err_console.is_terminal:
        every = PROGRESS_EVERY_S
        lines, stop = ProgressLines(label, every), threading.Event()

        def ticks() -> None:
            while not stop.wait(every):
                lines.tick()
        timer = threading.Thread(target=ticks, name="kbfast-progress", daemon=True)
        if every > 0:
            timer.start()
        try:
            yield lines.update
        finally:
            stop.set()
            if timer.is_alive():
                timer.join()
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   console=err_console, transient=True)           # gone before the results print
    state = {"task": None, "t0": time.perf_counter(), "start": 0}

    def update(done: int, total: int) -> None:
        if state["task"] is None:
            state["task"] = bar.add_task(label, total=total, completed=done, rate="")
            state["start"] = done
            return
        rate = (done - state["start"]) / max(time.perf_counter() - state["t0"], 1e-9)
        # the total too: a serving run's plan grows as its grid of step shapes refines
        bar.update(state["task"], completed=done, total=total, rate=f"{_rate(rate)} pts/s")

    with bar:
        yield update


def _kernels(s, exact: bool, check: bool) -> list[str]:
    """The Numba kernels a sweep of ``s`` uses (kbfast.measure.warmup): the fast path (batched or not) unless
    ``exact``, the workload generator's own, the exact replay for --exact or --check.  A batched kind's points
    that it does not batch (a hybrid or network all-reduce, ``batch_if``) run the unbatched fast path, and a
    hybrid point may replay: the exact replay too.  A method on an axis may be any of them."""
    kind = WORKLOADS[s.workload["kind"]]
    methods = set(FAST_CHOICES) if "workload.method" in s.axis_keys else {s.workload.get("method")}
    fast = [] if exact else list(kind.fast_kernels)
    if fast and kind.batch_if is not None and not all(kind.batch_if({**s.workload, "method": m}) for m in methods):
        fast += FAST_KERNELS
    if fast and "hybrid" in methods:
        fast.append("exact")
    return fast + list(kind.kernels) + (["exact"] if exact or check else [])


def _print_table(df: pd.DataFrame, title: str, digits: int = 3, caption: str | None = None) -> None:
    """A summary table at the console's width, in kbfast's number formats: a number is never split and a
    word never cut; headers wrap between their pieces (kbfast.report.tables.fit_table; a column per series
    puts each input's value on its own line), text cells at spaces; a table that does not fit even so is
    stacked, a block per row (kbfast.report.tables.fit)."""
    view = table_view(df, digits)
    widths, heads = fit_table(view, console.width)
    table = narrow_table(title, caption=caption)
    for right, w, head in zip(view.right, widths, heads):
        table.add_column(head, justify="right" if right else "left", width=w)
    for row in view.rows:
        table.add_row(*row)
    console.print(fit(console, table, wrap=[h for h, r in zip(heads, view.right) if not r]))
    console.print()


def _print_summary(df: pd.DataFrame, name: str, notes: list[str] | None = None) -> None:
    """The latency per series, the inputs that changed nothing and the workload's own table, as in summary.md."""
    table = summary_table(df)
    _print_table(table, f"{name}: latency per series", caption="; ".join(summary_notes(table)) or None)
    for note in notes or []:
        console.print(f"note: {note}", highlight=False)
    detail = detail_table(df)
    if detail is not None:
        _print_table(detail[1], f"{name}: {detail[0]}")


def _warn_ignored(s, points) -> None:
    """Warn about axes the workload ignores: their points give the same result, one of them is checked."""
    for key, why in ignored_axes(s, points).items():
        err_console.print(f"[yellow]warning:[/] axis {key}: {why}; its points give the same results, so the "
                          "cross-check draws one of them", highlight=False, soft_wrap=True)


FAILED_EXIT = 1     # a run whose points failed (a usage error exits 2)


def _exit_if_failed(df: pd.DataFrame, kept: str) -> None:
    """When any point failed (kbfast.sweep.runner.failed_points): say how many and the first error on stderr,
    then exit with ``FAILED_EXIT``.  Called once everything that succeeded is written (``kept`` says where)."""
    failed = failed_points(df)
    if failed.empty:
        return
    point, message = next(iter(failed.items()))
    err_console.print(f"[bold red]error:[/] {count(len(failed))} of {count(len(df))} points failed; the first, "
                      f"point {point}: {escape(clip(message))}\n  {kept}", highlight=False, soft_wrap=True)
    raise typer.Exit(FAILED_EXIT)


def _print_check(df: pd.DataFrame, drawn: int | None = None) -> None:
    """The one-line check summary (kbfast.report.sweep.check_text); ``drawn``: the points drawn for it."""
    chk = check_summary(df, drawn)
    if chk:
        console.print("fast vs exact: " + "; ".join(f"{k} {v}" for k, v in check_text(chk).items()))


@user_errors
def sweep(
    spec: SpecArg,
    out: Annotated[Path | None, typer.Option(help="Output folder (default results/<spec name>).")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="parquet or csv")] = Fmt.parquet,
    jobs: JobsOpt = 1,
    scheduler: Annotated[str | None, typer.Option(help="Dask scheduler address (tcp://host:8786), or 'local' to "
                                                       "start a LocalCluster of --jobs workers.")] = None,
    check: Annotated[int, typer.Option(help="Replay K random points exactly and record the fast-vs-exact error.")] = 0,
    resume: Annotated[bool, typer.Option("--resume", help="Keep the points already saved in --out; do the rest.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Discard results already in --out.")] = False,
    exact: Annotated[bool, typer.Option("--exact", help="Evaluate every point exactly (slow).")] = False,
    links: Annotated[bool, typer.Option("--links", help="Also write links.<fmt>: per point and edge.")] = False,
    pcs: Annotated[bool, typer.Option("--pcs", help="Also write pcs.<fmt>: per point, controller and PC.")] = False,
    plots: Annotated[bool, typer.Option(help="Write the default plots.")] = True,
    yes: YesOpt = False,
) -> None:
    """Evaluate every point of a sweep spec; write results, summary.md and plots; print a summary table."""
    check_count(check, "--check", 0, "how many points to replay exactly (0: none)")
    check_jobs(jobs)      # before --out is made
    check_flags(resume, overwrite)
    s = load_spec(spec).evaluated(exact)
    s.check_size(yes)
    out = out or Path("results") / s.name
    writable(out, "--out", folder=True)
    with sweep_lock(out):   # held until the summary and plots are written
        check_out_dir(out, resume, overwrite, s)
        _sweep(s, out, fmt, jobs, scheduler, check, resume, overwrite, links, pcs, plots)


def _sweep(s: SweepSpec, out: Path, fmt: Fmt, jobs: int, scheduler: str | None, check: int, resume: bool,
           overwrite: bool, links: bool, pcs: bool, plots: bool) -> None:
    """The sweep command once its folder is locked and checked: run, write the summary and plots, print."""
    first_run(*_kernels(s, s.mode == "exact", check > 0))
    if check > 0:
        _warn_ignored(s, s.points())
    with progress_of(f"sweep {s.name}") as update:
        res = run_sweep(s, out, fmt.value, jobs, scheduler, check, resume, overwrite, links=links, pcs=pcs,
                        progress=update)
    for f in res.corrupt:   # --resume found a part it could not read: its points were evaluated again
        err_console.print(f"[yellow]warning: {f.with_suffix('')} was unreadable; set aside as {f.name}, its points "
                          "evaluated again[/]", highlight=False, soft_wrap=True)
    df = res.results
    pngs = default_plots(df, out / "plots") if plots else []
    rate = res.n_evaluated / res.wall_s if res.wall_s > 0 else 0.0
    facts = {"spec": s.label, "mode": s.mode, "points": count(res.n_points), "evaluated now": count(res.n_evaluated),
             "errors": count(res.n_errors), "wall time": f"{num(res.wall_s, 2)} s ({count(rate)} points/s)",
             "results": ", ".join(str(f) for f in res.files)}
    inert = inert_inputs(df)
    notes = inert_notes(inert, ignored_axes(s, s.points()) if inert else None)
    summary = write_summary(df, out / "summary.md", s.name, facts, pngs, notes)
    _print_summary(df, s.name, notes)
    _print_check(df)
    console.print(f"{count(res.n_points)} points ({count(res.n_evaluated)} evaluated) in {num(res.wall_s, 2)} s; "
                  f"written: {', '.join(str(f) for f in [*res.files, summary, *pngs])}")
    _exit_if_failed(df, f"every point's row is saved in {res.files[0]}, a failed point's message in its 'error' "
                        "column ('check_error' for its exact replay)")


@user_errors
def check(
    spec: SpecArg,
    sample: Annotated[int, typer.Option(help="How many random points to cross-check.")] = 5,
    seed: Annotated[int | None, typer.Option(help="Sample seed (default: the spec's).")] = None,
    jobs: JobsOpt = 1,
    out: Annotated[Path | None, typer.Option(help="Also write the parity table: a .csv or .parquet file.")] = None,
    yes: YesOpt = False,
) -> None:
    """Cross-check K random points of a sweep fast vs exact and print a parity table."""
    check_count(sample, "--sample", 1, "how many points to cross-check")
    check_jobs(jobs)
    if seed is not None:
        check_count(seed, "--seed", 0, "a sample seed")
    if writable(out, "--out") is not None:   # a folder is refused as one first
        table_path(out, "--out")
    s = load_spec(spec)
    s.check_size(yes)
    points = s.points()
    chosen = check_sample(len(points), sample, s.seed if seed is None else seed, points)
    if len(chosen) < sample:         # said, not silently fewer: each one is an exact replay
        err_console.print(f"note: --sample {sample:,} is more than the {plural(len(chosen), 'distinct point')} of "
                          f"{s.name}: checking every one", highlight=False)
    _warn_ignored(s, points)
    picked = [p for p in points if p.index in chosen]
    rows = []
    first_run(*_kernels(s, False, True))
    with progress_of(f"check {s.name}") as update:
        update(0, len(picked))
        for batch, res in run_local(make_batches(picked, "fast", chosen, max_points=1), jobs):
            rows.append(res.rows)
            update(sum(len(r) for r in rows), len(picked))
    df = order_columns(pd.concat(rows, ignore_index=True).sort_values("point"), s).set_index("point")
    for c in ("latency_ns", *CHECK_COLUMNS):    # absent when every point failed
        if c not in df:
            df[c] = float("nan")
    # each point by the inputs the spec's axes set (a sample of two may vary in step: both shown)
    axes = {k.removeprefix("workload.") for k in s.axis_keys} - {"size"}
    view = df[[c for c in input_columns(df) if c in axes] + (["size"] if "size" in df else [])].copy()
    if "size" in view:
        view["size"] = [format_size(v) for v in view["size"]]
    unit = column_unit([*df["latency_ns"], *df["exact_latency_ns"]])
    head = f" ({unit})" if unit else ""             # no unit: each cell carries its own
    view[f"fast{head}"] = [in_unit(v, unit) for v in df["latency_ns"]]
    view[f"exact{head}"] = [in_unit(v, unit) for v in df["exact_latency_ns"]]
    view["error"] = [pct(v) for v in df["rel_error"]]
    view["in bounds"] = ["-" if v is None or v != v else "yes" if v else "no" for v in df["exact_in_bounds"]]
    for c in ("error", "check_error"):
        if c in df and df[c].notna().any():
            view[f"{c} message" if c == "error" else c] = df[c].fillna("")
    _print_table(view, f"{s.name}: fast vs exact",
                 caption="columns: error = (fast - exact) / exact; in bounds = exact inside the fast bounds")
    _print_check(df, len(df))
    if out is not None:
        write_table(df.reset_index(), out)
        console.print(f"parity table written to {out}", soft_wrap=True)
    _exit_if_failed(df.reset_index(), "the table above shows every point" + (f", saved in {out}" if out else ""))


@user_errors
def plot(
    results: Annotated[Path, typer.Argument(help="A sweep's output folder, or its results.parquet or results.csv.")],
    x: Annotated[str | None, typer.Option(help="Column on the x axis (default: size, or where the size does not "
                                               "vary the numeric input with the most values).")] = None,
    y: Annotated[str, typer.Option(help="Column on the y axis.")] = "latency_ns",
    hue: Annotated[list[str] | None, typer.Option(help="Column(s) that split the lines (default: the varying "
                                                       "inputs, as many as make at most 12 lines).")] = None,
    out: Annotated[Path | None, typer.Option(help="PNG file (default: <y>_vs_<x>.png beside RESULTS).")] = None,
) -> None:
    """Re-plot saved sweep results without recomputing anything, in the style of the sweep's own plots."""
    path = _results_file(results)
    df = read_table(path)
    _plottable(df, path, x, y)
    x = x or _default_x(df, path)
    png = figure_path(out or path.parent, "--out", f"{y}_vs_{x}.png")
    png = plot_xy(df, x, y, hue or None, png)
    console.print(f"plot written to {png} ({y} against {x})", soft_wrap=True)


def _results_file(path: Path) -> Path:
    """The results table of ``path``: the file itself, or the results.parquet (else results.csv) of a sweep's
    output folder."""
    if not path.is_dir():
        return path
    for name in ("results.parquet", "results.csv"):
        if (path / name).is_file():
            return path / name
    raise KbfastError(f"{path}: the folder holds no results.parquet or results.csv; give a sweep's output folder "
                      "(--out of kbfast sweep, e.g. results/seed36) or its results file")


def _default_x(df: pd.DataFrame, path: Path) -> str:
    """--x when not given (kbfast.report.sweep.default_x), or a refusal listing the numeric columns."""
    x = default_x(df)
    if x is None:
        numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and df[c].dtype != bool]
        raise KbfastError(f"{path}: no size or other numeric input varies in these results; choose the x axis "
                          f"with --x, one of: {', '.join(map(str, numeric))}")
    return x


def _plottable(df: pd.DataFrame, path: Path, x: str | None, y: str) -> None:
    """Refuse a table with nothing to draw: no rows, an unknown column, a y that holds text, an x (when given)
    that mixes text and numbers, no point with a number for ``y``."""
    if df.empty:
        raise KbfastError(f"{path}: the results table has no rows; nothing to plot")
    given = [(f, c) for f, c in (("--x", x), ("--y", y)) if c is not None]
    for flag, col in given:
        if col not in df:
            hint = did_you_mean(col, map(str, df.columns), "columns")
            raise KbfastError(f"{flag}: column {col!r} is not in the results ({path}); {hint}")
    ok = df[df["error"].isna()] if "error" in df else df
    for flag, col in given:
        values = ok[col].dropna()
        text = values[pd.to_numeric(values, errors="coerce").isna()]
        if len(text) and (flag == "--y" or len(text) < len(values)):
            distinct = list(dict.fromkeys(str(v)[:40] for v in text))
            shown = ", ".join(map(repr, distinct[:4])) + (", ..." if len(distinct) > 4 else "")
            raise KbfastError(f"{flag} {col}: {count(len(text))} of {count(len(values))} values are text, not numbers "
                              f"({shown}) in {path}; plot a numeric column, or write the values as plain numbers "
                              f"({'in ns, ' if col.endswith('_ns') else ''}no units)")
    if not pd.to_numeric(ok[y], errors="coerce").notna().any():
        why = "every point failed (see the 'error' column)" if ok.empty else f"no point has a number in {y!r}"
        raise KbfastError(f"{path}: nothing to plot: {why}")
