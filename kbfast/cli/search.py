"""``kbfast search``: the best way to run a model's decode step, and the Pareto front (docs/search.md)."""

from __future__ import annotations

import shlex
import sys
import textwrap
import time
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from kbfast.cli.common import (FmtOpt, OutputFormat, SetOpt, TopologyOpt, check_jobs, console, figure_path,
                               first_run, user_errors, writable)
from kbfast.cli.sweep import progress_of
from kbfast.config import DEFAULT_TOPOLOGY
from kbfast.config.loader import parse_overrides
from kbfast.config.models import load_model
from kbfast.errors import KbfastError, not_one_of
from kbfast.measure.methods import check_fast_choice
from kbfast.report.formats import column_unit, count, csv_text, in_unit, to_json, with_unit
from kbfast.report.tables import fit, narrow_table
from kbfast.search import SearchResult, search
from kbfast.search.figure import plot_front
from kbfast.search.front import OBJECTIVES, check_objective, layout_label, parse_constraint
from kbfast.search.space import BATCHES, COLLECTIVES, DEGREES, Space, parse_knobs, parse_list
from kbfast.workloads.model import LAYOUTS, OVERLAPS

SP_CHOICES = {"both": (False, True), "off": (False,), "on": (True,)}
SHOWN = ("layout", "pp", "dp", "ep", "batch", "collective", "overlap", "sequence_parallel", "set", "tpot_ms",
         "tokens_per_s", "tokens_per_s_per_sip", "ttft_ms", "latency_ns", "method", "collective_used", "timed",
         "tpot_lo_ms", "feasible", "front", "best", "error", "command", "ttft_command")


@user_errors
def search_command(
    model: Annotated[str, typer.Argument(help="A bundled transformer (llama3_70b, llama32_1b, gpt3_175b) or a "
                                              "transformer YAML.")],
    objective: Annotated[str, typer.Option(help=f"What to optimise: {', '.join(OBJECTIVES)}.")] = "tokens_per_s",
    constraint: Annotated[list[str] | None, typer.Option(
        help="METRIC OP VALUE, e.g. 'tpot_ms<=50' (repeatable); metrics tpot_ms, ttft_ms, tokens_per_s, "
             "tokens_per_s_per_sip, batch.")] = None,
    kv_len: Annotated[int, typer.Option(help="The context each user's decode step attends to.")] = 4096,
    seq: Annotated[int, typer.Option(help="The prompt a TTFT prefills (one user).")] = 2048,
    batch: Annotated[str, typer.Option(help="Users per decode step, comma-separated.")]
    = ",".join(map(str, BATCHES)),
    layout: Annotated[str, typer.Option(help="Layouts, comma-separated.")] = ",".join(LAYOUTS),
    pp: Annotated[str, typer.Option(help="Pipeline stages, comma-separated (each on its own group of SIPs; "
                                         "degrees whose product does not divide the SIPs are pruned).")]
        = ",".join(map(str, DEGREES)),
    dp: Annotated[str, typer.Option(help="Data-parallel replicas, comma-separated.")] = ",".join(map(str, DEGREES)),
    ep: Annotated[str | None, typer.Option(help="Mixtures of experts: expert-parallel blocks, comma-separated "
                                                "(default: each model's gcd(experts, PEs)).")] = None,
    collective: Annotated[str, typer.Option(help="All-reduce algorithms, comma-separated.")] = ",".join(COLLECTIVES),
    overlap: Annotated[str, typer.Option(help="Overlaps, comma-separated.")] = ",".join(OVERLAPS),
    sequence_parallel: Annotated[str, typer.Option("--sequence-parallel", help="both, off or on.")] = "both",
    knob: Annotated[list[str] | None, typer.Option(help="A hardware knob to search: KEY=V1,V2 (any --set key; "
                                                        "repeatable).")] = None,
    method: Annotated[str, typer.Option(help="The fast path's point: hybrid, network or fluid "
                                             "(kbfast run model --help).")] = "hybrid",
    exhaustive: Annotated[bool, typer.Option(help="Time every candidate: none is left untimed because its lower "
                                                  "bound is beaten (the same front and best, slower).")] = False,
    jobs: Annotated[int, typer.Option(help="Worker processes (as kbfast sweep).")] = 1,
    scheduler: Annotated[str | None, typer.Option(help="A Dask scheduler address, or local (as kbfast sweep).")]
    = None,
    out: Annotated[Path | None, typer.Option(help="Where the sweeps and search.csv go (default "
                                                  "results/search/MODEL).")] = None,
    plot_to: Annotated[Path | None, typer.Option("--plot", help="Draw tokens/s against TPOT with the front to "
                                                                "FILE.png.")] = None,
    topology: TopologyOpt = None,
    fmt: FmtOpt = OutputFormat.table,
    sets: SetOpt = None,
) -> None:
    """Search layouts, pipeline and data-parallel degrees, batches, all-reduce algorithms, overlap, sequence
    parallelism and hardware knobs for a
    model's decode step (docs/search.md): candidates that do not fit are pruned first (and counted), the rest
    run as a sweep; prints the Pareto front of tokens/s against TPOT, the objective's best, and each row's
    ``kbfast run model`` command."""
    check_fast_choice(method)
    check_objective(objective)
    constraints = [parse_constraint(c) for c in constraint or []]
    if sequence_parallel not in SP_CHOICES:
        raise not_one_of("--sequence-parallel", sequence_parallel, SP_CHOICES)
    for flag, v in (("--kv-len", kv_len), ("--seq", seq)):
        if v < 1:
            raise KbfastError(f"{flag} {v}: must be at least 1")
    check_jobs(jobs)
    overrides, _ = parse_overrides(list(sets or []), None)
    space = Space(parse_list(layout, "--layout", str, tuple(LAYOUTS)), parse_list(batch, "--batch", int),
                  parse_list(collective, "--collective", str, COLLECTIVES),
                  parse_list(overlap, "--overlap", str, tuple(OVERLAPS)), SP_CHOICES[sequence_parallel],
                  parse_knobs(knob or [], overrides), parse_list(pp, "--pp", int), parse_list(dp, "--dp", int),
                  (None,) if ep is None else parse_list(ep, "--ep", int))
    plot_to = figure_path(plot_to, "--plot", "search.png")
    m = load_model(model)
    out = writable(out or Path("results") / "search" / Path(model).stem, "--out", folder=True)
    first_run("collectives", "exact", "runs", "fast", "pipeline")
    t0 = time.perf_counter()
    with progress_of("candidates") as update:
        res = search(m, model, topology, overrides, list(sets or []), space, objective, constraints, kv_len, seq, out,
                     method, jobs, scheduler, update, exhaustive)
    wall = time.perf_counter() - t0
    table = res.table[[c for c in SHOWN if c in res.table]]
    flat = csv_table(table)
    (out / "search.csv").write_text(csv_text(flat))
    if plot_to is not None:
        plot_front(res.table, plot_to, f"{m.name} decode at {kv_len:,} tokens of context on "
                                       f"{topology or DEFAULT_TOPOLOGY}: {len(res.table)} candidates, "
                                       f"{int(res.table['timed'].sum())} timed")
    if fmt is OutputFormat.json:
        print(to_json({"objective": objective, "constraints": [c.text for c in constraints],
                       "candidates": res.n_candidates, "pruned": res.pruned.counts,
                       "timed": int(res.table["timed"].sum()), "beaten_by_bound": res.n_beaten, "wall_s": wall,
                       "front": table[table["front"]].to_dict("records"),
                       "best": table[table["best"]].to_dict("records")}))
    elif fmt is OutputFormat.csv:
        sys.stdout.write(csv_text(flat[flat["front"]]))
    else:
        print_report(res, objective, constraints, wall, out)


def csv_table(table: pd.DataFrame) -> pd.DataFrame:
    """The search's table as its CSV holds it: knobs as ``key=value;…`` cells, and ``feasible`` blank where a
    candidate was never timed (beaten by its lower bound: unknown, not "does not fit")."""
    return table.assign(set=table["set"].map(lambda d: ";".join(f"{k}={v}" for k, v in d.items())),
                        feasible=table["feasible"].astype(object).where(table["timed"]))


def wrapped(cmd: str, width: int = 78) -> str:
    """A long command over lines of at most ``width`` characters, each ending in `` \\`` so that it still pastes
    as one; an option stays on the line of its value (``--layout tp_pes``), a longer piece on a line of its own."""
    words = shlex.split(cmd)
    pieces: list[str] = []
    for i, word in enumerate(words):
        if i and words[i - 1].startswith("--") and pieces[-1] == words[i - 1] and not word.startswith("--"):
            pieces[-1] += " " + shlex.quote(word)
        else:
            pieces.append(shlex.quote(word))
    lines, line = [], ""
    for piece in pieces:
        indent = "    " if lines else ""
        if line and len(indent + line + " " + piece) > width - 2:
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    lines.append(line)
    return " \\\n".join(("    " if i else "") + text for i, text in enumerate(lines))


def knob_label(key: str) -> str:
    """A knob in the front's table: its key's last two parts (``ucie_mesh.bw_gbs``, ``ucie_mesh.distance_mm``,
    ``fabric.ns_per_mm``), enough to tell knobs apart and name what each sets."""
    return ".".join(key.split(".")[-2:])


def print_report(res: SearchResult, objective: str, constraints, wall: float, out: Path) -> None:
    """The counts, the front (the best marked) and the commands, within the terminal's width."""
    t = res.table
    ok = t["error"].isna()
    console.print(f"{count(res.n_candidates)} candidate{'' if res.n_candidates == 1 else 's'} in {wall:,.1f} s: {count(len(res.pruned.kept))} compiled, "
                  f"{count(res.n_candidates - len(res.pruned.kept))} pruned before any timing", highlight=False)
    for why, n in res.pruned.counts.items():
        console.print(textwrap.fill(f"pruned, {why}: {count(n)} (e.g. {res.pruned.examples[why]})", console.width - 2,
                                    break_on_hyphens=False,
                                    initial_indent="  ", subsequent_indent="    "), highlight=False, markup=False)
    timed = count(int(t["timed"].sum()))
    console.print(f"  timed: {timed}; beaten by their lower bounds, never timed: {count(res.n_beaten)}"
                  if res.bounded else f"  timed: {timed}, every one (--exhaustive, or TTFT asked for)", highlight=False)
    if (~ok).any():
        console.print(f"  failed when evaluated: {count(int((~ok).sum()))} (see {out / 'search.csv'})",
                      highlight=False)
    if constraints:
        console.print(f"  feasible under {', '.join(c.text for c in constraints)}: "
                      f"{count(int(t['feasible'].sum()))}", highlight=False)
    front = t[t["front"]].sort_values("tpot_ms")
    if front.empty:
        console.print("no candidate meets the constraints", highlight=False)
        return
    ttft = t["ttft_ms"].notna().any()
    unit = column_unit(front["tpot_ms"] * 1e6)
    t_unit = column_unit(front["ttft_ms"] * 1e6) if ttft else None
    table = narrow_table("Pareto front: tokens/s against time per output token", "#", "layout", "users",
                         "all-reduce", "overlap", "SP", *(["knobs"] if any(t["set"].map(bool)) else []),
                         with_unit("TPOT", unit), "tokens/s", *([with_unit("TTFT", t_unit)] if ttft else []),
                         caption=f"* best by {objective}; SP: sequence parallel")
    for i, r in enumerate(front.itertuples(), 1):
        knobs = [" ".join(f"{knob_label(k)}={v}" for k, v in r.set.items())] \
            if any(t["set"].map(bool)) else []
        table.add_row(f"{i}{'*' if r.best else ''}", layout_label(r), str(r.batch), r.collective, r.overlap,
                      "on" if r.sequence_parallel else "off", *knobs, in_unit(r.tpot_ms * 1e6, unit),
                      f"{r.tokens_per_s:,.0f}", *([in_unit(r.ttft_ms * 1e6, t_unit)] if ttft else []))
    console.print(fit(console, table, wrap=("knobs",), drop=("SP", "overlap", "all-reduce")))   # each in the commands
    best = t[t["best"]]
    if not best.empty and not best.iloc[0]["front"]:
        b = best.iloc[0]
        console.print(f"best by {objective} (off the front): {layout_label(b)}, {b['batch']} users, "
                      f"{b['collective']}",
                      highlight=False)
    console.print(f"commands that reproduce each row ({'decode, then TTFT; ' if ttft else ''}all in search.csv):",
                  highlight=False)
    for i, r in enumerate(front.itertuples(), 1):
        console.print(f"#{i}", highlight=False)
        console.print(wrapped(r.command, console.width), highlight=False, markup=False, soft_wrap=True)
        if ttft:                   # its TTFT: the prefill of --seq tokens for one user
            console.print(wrapped(r.ttft_command, console.width), highlight=False, markup=False, soft_wrap=True)
