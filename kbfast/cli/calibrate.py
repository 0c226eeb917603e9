"""``kbfast calibrate``: the reference figures in both modes, a least-squares fit, parameter sets (design §12)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated, Any

import numpy as np
import pandas as pd
import typer
from rich.table import Table

from kbfast.calibrate import (FILE_COLUMNS, TOL, FitResult, all_ok, derive, evaluate_rows, fit, param_set_file,
                              parse_fit, reference_csv, save_param_set, sensitivity_scale, topology_labels)
from kbfast.cli.common import OutputFormat, first_run, SetOpt, console, err_console, load, user_errors
from kbfast.config import DEFAULT_TOPOLOGY, parse_override
from kbfast.errors import KbfastError
from kbfast.report import tables
from kbfast.report.tables import narrow_table
from kbfast.report.formats import duration, pct, plural


class Mode(str, Enum):
    """Which evaluators a calibration runs: the fast path, exact mode, or both."""

    fast = "fast"
    exact = "exact"
    both = "both"


def _num(value: float, unit: str) -> str:
    """A figure in its row's unit: a time scaled to its value, a (signed) fraction as a percent."""
    if unit == "ns":
        return duration(value)
    if unit == "fraction":
        return pct(value, 1)
    return f"{value:g} {unit}".strip()


def _reference_cell(r: pd.Series) -> str:
    """The reference figure; a text one that the checks table prints as the row's check says so."""
    ref = r["reference"]
    if not isinstance(ref, float):
        return "see checks" if ref == r["criterion"] else str(ref)
    text = _num(ref, r["unit"]) if r["unit"] in ("ns", "fraction") else f"{ref:g}"
    return f"< {text}" if str(r["metric"]).endswith(("upper_bound", "_max")) else text


def _red(text: str, bad: bool) -> str:
    return f"[red]{text}[/]" if bad else text


def _cell(r: pd.Series, mode: str) -> str:
    """A number over its signed relative error or over whether the check holds; a text figure (chains,
    per-kind latencies) becomes holds/fails here and is listed under the table."""
    value, err = r[mode], r[f"{mode}_err"]
    if isinstance(value, str):
        return _red("holds" if err else "fails", not err)
    text = _num(value, r["unit"])
    if isinstance(err, bool):
        return f"{text}\n{_red('holds' if err else 'fails', not err)}"
    if isinstance(err, float) and err == err:
        return f"{text}\n{_red(pct(err), abs(err) > TOL)}"
    return text


def rows_table(df: pd.DataFrame, modes: list[str], title: str) -> Table:
    """The rows: case, reference (a text figure wraps between words), each mode's figure over its error, and
    status; print it through ``fit`` (``wrap=("reference",)``): a number or a status is never cut."""
    table = narrow_table(title, "case", "reference", *modes, "status")
    table.columns[1].justify = table.columns[-1].justify = "left"
    for _, r in df.iterrows():
        status = {"ok": "[green]ok[/]", "off": "[red]off[/]"}.get(r["status"], r["status"])
        table.add_row(r["case"], _reference_cell(r), *[_cell(r, m) for m in modes], status)
    return table


def checks_table(df: pd.DataFrame, modes: list[str]) -> Table:
    """What the rows without a +-3 % error check, and the text figures the main table leaves out."""
    table = narrow_table("checks", "case", "check, and what was measured")
    table.columns[1].justify = "left"
    for _, r in df.iterrows():
        if isinstance(r[f"{modes[0]}_err"], float) and not r["status"] == "retired":
            continue
        lines = [str(r["criterion"])]
        texts = {m: r[m] for m in modes if isinstance(r[m], str)}
        if texts and len(set(texts.values())) == 1:
            lines.append(f"{' = '.join(texts)}: {next(iter(texts.values()))}")
        else:
            lines += [f"{m}: {t}" for m, t in texts.items()]
        table.add_row(r["case"], "\n".join(lines))
    return table


FIT_WRAP = (("parameter",), ("row",), ("parameter", "row"))    # the columns of fit_tables that may wrap (names)


def fit_tables(res: FitResult) -> list[Table]:
    """Fitted values, residuals before and after, sensitivities (d err / d relative change of the key)."""
    values = narrow_table("fit (fast path, least squares)", "parameter", "start", "fitted", "bounds")
    for p in res.params:
        fitted = f"{res.values[p.key]:.6g}" if p.key in res.fitted else "not fitted: no sensitivity"
        values.add_row(p.key, f"{p.start:g}", fitted, f"{p.lo:g}..{p.hi:g}")
    resid = narrow_table("residuals (relative error)", "row", "reference", "error before", "error after")
    for c in res.cases:
        resid.add_row(c, duration(res.reference[c]), pct(res.before[c]), pct(res.after[c]))
    sens = narrow_table("sensitivity at the solution", "parameter", "row", "d err / d(dp/p)")
    sens.columns[1].justify = "left"
    for p in res.params:
        per_row = res.sensitivity[p.key]
        if per_row is None or not any(per_row.values()):
            sens.add_row(p.key, "(every row)", "no sensitivity")
            continue
        star = "" if sensitivity_scale(p, res.values[p.key]) != p.span else " *"
        for i, (c, s) in enumerate((c, s) for c, s in per_row.items() if s):
            sens.add_row(p.key if i == 0 else "", c, f"{s:+.4f}{star}")
    return [values, resid, sens]


def fit_notes(res: FitResult) -> list[str]:
    """The notes printed under a fit: the optimiser's evaluations and message, a parameter at 0 (its
    sensitivity is then per bound span), and a floor-plan parameter (its response is piecewise constant)."""
    notes = [f"least_squares: {res.nfev} evaluations; {res.message}"]
    for p in res.params:
        if sensitivity_scale(p, res.values[p.key]) == p.span:
            notes.append(f"* {p.key} is 0: its sensitivity is per change of the bound span ({p.lo:g}..{p.hi:g})")
    for p in res.params:
        if not p.smooth:
            found = ("the fitted value is a local result" if p.key in res.fitted
                     else f"no row moved within one step of {p.start:g}")
            notes.append(f"{p.key} moves the floor plan: latency changes where routes change (and with wire "
                         f"length when fabric.ns_per_mm > 0), so the response is piecewise constant; sampled "
                         f"with a {p.step:g} step: {found}")
    return notes


def file_table(df: pd.DataFrame) -> pd.DataFrame:
    """The rows (:func:`~kbfast.calibrate.evaluate_rows`) as the CSV and JSON hold them, a type per column
    (``FILE_COLUMNS``): ``reference``, ``fast`` and ``exact`` numbers, a figure that is text (an ordering, three
    buffer kinds) in ``<column>_text``; ``<mode>_err`` the relative error where the row has one, its pass or
    fail in ``<mode>_ok``.  Floats at full precision (a fit reads them)."""
    def number(v: Any) -> float:
        return float(v) if isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)) else np.nan

    out = df.copy()
    for c in ("reference", "fast", "exact"):
        out[f"{c}_text"] = [v if isinstance(v, str) else None for v in df[c]]
        out[c] = [number(v) for v in df[c]]
    for c in ("fast_err", "exact_err"):
        out[c] = [number(v) for v in df[c]]
    return out[FILE_COLUMNS]


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts at full float precision: numpy scalars become Python ones, NaN None."""
    def plain(v: Any) -> Any:
        v = v.item() if hasattr(v, "item") else v
        return None if isinstance(v, float) and v != v else v
    return [{k: plain(v) for k, v in r.items()} for r in df.to_dict("records")]


def fit_json(res: FitResult) -> dict[str, Any]:
    """A fit as JSON: values, the figures before and after, sensitivities, bounds and start values."""
    return {"values": res.values, "fitted": res.fitted, "reference": res.reference, "before": res.before,
            "after": res.after, "sensitivity": res.sensitivity, "nfev": res.nfev, "message": res.message,
            "bounds": {p.key: [p.lo, p.hi] for p in res.params}, "start": {p.key: p.start for p in res.params}}


def calibrate(
    keys: Annotated[list[str] | None, typer.Argument(
        metavar="PARAM[=LO:HI]", show_default=False,
        help="With --fit: the keys to fit, e.g. fabric.ns_per_mm link.io_conn.bw_gbs=64:512.")] = None,
    topology: Annotated[str | None, typer.Option(help="Preset name or topology YAML (default ahbm_2sip).")] = None,
    sets: SetOpt = None,
    mode: Annotated[Mode, typer.Option("--mode", help="fast, exact or both")] = Mode.both,
    do_fit: Annotated[bool, typer.Option("--fit",
                                         help="Fit the PARAM keys to the latency rows (least squares).")] = False,
    save: Annotated[str | None, typer.Option("--save", metavar="NAME", help=(
        "Write the fitted values as parameter set NAME, to NAME.yaml in $KBFAST_CALIBRATION_DIR (default "
        "~/.config/kbfast/calibration)."))] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help=(
        "With --save: replace a saved set of that name, or save under a label a topology's param_set "
        "uses."))] = False,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="table, csv or json")] = OutputFormat.table,
) -> None:
    """Evaluate every reference figure (calibration/reference_public.csv): reference, fast, exact, error, status.

    Exit 1 if a row that is not retired is off in an evaluated mode (beyond 3 %, or its check fails).

    --fit KEY[=LO:HI] ... fits the keys to the latency rows (least squares, fast path), then evaluates with them.

    --save NAME writes them to NAME.yaml in the user's parameter-set folder; a topology loads it by param_set: NAME
    or --set param_set=NAME.  An existing set's name, or a label a topology's param_set uses, needs --overwrite.
    """
    if keys and not do_fit:
        raise KbfastError(f"{' '.join(keys)}: parameter keys need --fit (kbfast calibrate --fit KEY ...)")
    if do_fit and not keys:
        raise KbfastError("--fit needs at least one key, e.g. kbfast calibrate --fit fabric.ns_per_mm")
    if save is not None and not do_fit:
        raise KbfastError("--save needs --fit: it writes the fitted values")
    if overwrite and save is None:
        raise KbfastError("--overwrite goes with --save NAME: it lets the save replace a set or reuse a label")
    if save is not None:   # a bad name, a taken one or a folder that cannot be written fails before the fit
        param_set_file(save, overwrite, topology or DEFAULT_TOPOLOGY)
    spec = load(topology, sets)
    overrides = dict(parse_override(s) for s in (sets or []))
    modes = ["fast", "exact"] if mode is Mode.both else [mode.value]
    bounds = parse_fit(keys or [], spec) if do_fit else None   # bad keys fail before any compiling
    res = None
    first_run(*(["runs", "tight"] if "fast" in modes else []), *modes)
    if bounds is not None:
        res = fit(spec, bounds)
        if fmt is not OutputFormat.json:   # the fit first: whatever follows, it is on the screen
            out = console if fmt is OutputFormat.table else err_console
            for table, wrap in zip(fit_tables(res), FIT_WRAP):
                out.print(tables.fit(out, table, wrap=wrap))
            for note in fit_notes(res):
                out.print(note, highlight=False)
        if save is not None:
            path = save_param_set(save, res, spec, topology or DEFAULT_TOPOLOGY, overrides, overwrite)
            users = topology_labels(topology or DEFAULT_TOPOLOGY).get(save)
            err_console.print(f"parameter set {save} written to {path}; " + (
                f"{', '.join(users)} name it as param_set: their runs load it from now on" if users else
                f"load it with --set param_set={save} or param_set: {save} in a topology"),
                highlight=False, soft_wrap=True)
        spec = derive(spec, {**res.fitted_values, **({"param_set": save} if save else {})}, label="--fit")
    df = evaluate_rows(spec, modes)
    if fmt is OutputFormat.csv:
        sys.stdout.write(file_table(df).to_csv(index=False))      # full precision: a fit reads them
    elif fmt is OutputFormat.json:
        print(json.dumps({"topology": topology or DEFAULT_TOPOLOGY, "param_set": spec.param_set, "modes": modes,
                          "ok": all_ok(df), "rows": records(file_table(df)),
                          "fit": fit_json(res) if res else None}, indent=2))
    if fmt is OutputFormat.table:
        title = f"calibrate {topology or DEFAULT_TOPOLOGY} (param set {spec.param_set}) vs {reference_csv().name}"
        console.print(tables.fit(console, rows_table(df, modes, title), wrap=("reference",)))
        console.print(tables.fit(console, checks_table(df, modes), wrap=("check, and what was measured",)))
    if not all_ok(df):
        off = df.loc[df["status"] == "off", "case"]
        err_console.print(f"[red]{plural(len(off), 'reference row')} off[/]: " + ", ".join(off))
        raise typer.Exit(1)


calibrate = user_errors(calibrate)
