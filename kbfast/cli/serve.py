"""``kbfast serve``: a transformer under a request load with continuous batching (docs/serving.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from kbfast.cli.common import (FmtOpt, OutputFormat, SetOpt, TopologyOpt, check_jobs, check_modes, console,
                               err_console, figure_path, first_run, given, load, user_errors, writable)
from kbfast.cli.outputs import table_path, write_table
from kbfast.cli.sweep import progress_of
from kbfast.config.models import load_model
from kbfast.errors import KbfastError, not_one_of
from kbfast.measure.methods import check_fast_choice
from kbfast.report.formats import count, csv_text, duration, num, pct, percent, plural, to_json
from kbfast.report.tables import fit, narrow_table
from kbfast.serving import ServeResult, serve
from kbfast.serving.costs import StepOptions
from kbfast.serving.report import PERCENTILES, plot, summary
from kbfast.serving.requests import parse_lengths, poisson, read_trace
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.model import LAYOUTS


@user_errors
def serve_command(
    model: Annotated[str, typer.Argument(help="A bundled transformer (llama3_70b, llama32_1b, gpt3_175b) or a "
                                              "transformer YAML.")],
    rate: Annotated[float, typer.Option(help="Poisson arrivals, requests per second.")] = 4.0,
    prompt_len: Annotated[str, typer.Option(help="Prompt tokens: N, uniform:LO:HI, normal:MEAN:STD or "
                                                 "lognormal:MEDIAN:SIGMA.")] = "uniform:128:1024",
    output_len: Annotated[str, typer.Option(help="Output tokens, the first from the prefill: as --prompt-len.")]
    = "uniform:32:256",
    duration_s: Annotated[float, typer.Option("--duration", help="Seconds of arrivals; the run then drains.")] = 10.0,
    max_batch: Annotated[int, typer.Option(help="Requests running at most (continuous batching).")] = 32,
    trace: Annotated[Path | None, typer.Option(help="Requests from a CSV or Parquet file (arrival_s, prompt_len, "
                                                     "output_len) instead of --rate and the lengths.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the arrivals and lengths.")] = 0,
    jobs: Annotated[int, typer.Option(help="Processes that evaluate the step shapes of the grids (with --exact "
                                           "the loop finds its shapes one by one, in this process).")] = 1,
    layout: Annotated[str, typer.Option(help=f"One of {', '.join(LAYOUTS)}.")] = "tp_pes",
    collective: Annotated[str | None, typer.Option(help="The all-reduce algorithm (default: the model file's, "
                                                        "auto).")] = None,
    overlap: Annotated[str | None, typer.Option(help="prefetch (the default) or none.")] = None,
    method: Annotated[str | None, typer.Option(help="The fast path's point: hybrid (the default), network or fluid "
                                                    "(kbfast run model --help).")] = None,
    exact: Annotated[bool, typer.Option("--exact", help="Every distinct step exactly (small models), no "
                                                       "interpolation.")] = False,
    plot_to: Annotated[Path | None, typer.Option("--plot", help="Draw KV occupancy, batch and latencies over "
                                                                "time to FILE.png.")] = None,
    steps_to: Annotated[Path | None, typer.Option("--steps", help="Write every step to FILE.csv or "
                                                                  "FILE.parquet.")] = None,
    requests_to: Annotated[Path | None, typer.Option("--requests", help="Write every request's times to "
                                                                        "FILE.csv or FILE.parquet.")] = None,
    topology: TopologyOpt = None,
    fmt: FmtOpt = OutputFormat.table,
    sets: SetOpt = None,
) -> None:
    """Serve a model under a request load (docs/serving.md): Poisson arrivals or a trace, prefills and decode
    steps under continuous batching, the KV cache growing; TTFT, TPOT and end-to-end percentiles, throughput
    and KV occupancy.  Step costs come from the fast path on grids, interpolated, each interpolant checked
    against direct evaluations (printed)."""
    method = check_modes(exact, False, method, has_compare=False)
    check_fast_choice(method)
    plot_to = figure_path(plot_to, "--plot", "serving.png")
    steps_to, requests_to = (writable(table_path(p, flag), flag) if p is not None else None
                             for p, flag in ((steps_to, "--steps"), (requests_to, "--requests")))
    check_jobs(jobs)
    if max_batch < 1:
        raise KbfastError(f"--max-batch {max_batch}: at least 1 request must run at a time")
    if layout not in LAYOUTS:
        raise not_one_of("--layout", layout, LAYOUTS)
    ignored = given("--rate", "--prompt-len", "--output-len", "--duration", "--seed") if trace is not None else []
    if ignored:
        raise KbfastError(f"--trace {trace}: the file gives the requests, so {', '.join(ignored)} would be "
                          f"ignored\n  hint: drop {', '.join(ignored)}, or --trace for Poisson arrivals")
    requests = read_trace(trace) if trace is not None else poisson(
        rate, duration_s, parse_lengths(prompt_len, "--prompt-len"), parse_lengths(output_len, "--output-len"), seed)
    t = build_tables(load(topology, list(sets or [])))
    opts = StepOptions(load_model(model), layout, method, collective, None, overlap)
    first_run("collectives", "exact", *(() if exact else ("runs", "fast", "pipeline")))
    with progress_of("step shapes") as update:
        res = serve(t, Router(t), opts, requests, max_batch, "exact" if exact else "fast", update, jobs)
    out = summary(res.schedule)
    if plot_to is not None:
        plot(res.schedule, plot_to, f"{opts.model.name} on {t.layout.n_sips} SIPs, layout {layout}: "
                                    f"{len(requests)} requests")
    if steps_to is not None:
        write_table(res.schedule.steps, steps_to)
    if requests_to is not None:
        write_table(requests_table(res), requests_to)
    if fmt is OutputFormat.json:
        print(to_json({"summary": out, "checks": checks_table(res).to_dict("records")}))
    elif fmt is OutputFormat.csv:
        sys.stdout.write(csv_text(pd.DataFrame([out])))
    else:
        print_report(res, out, opts, t, trace)
    checks = getattr(res.costs, "checks", [])            # none in exact mode
    over = [c for c in checks if c.round == checks[-1].round and not c.ok]
    if over:                       # printed in full, then a failed check exits 1 (docs/serving.md)
        worst = max(over, key=lambda c: abs(c.error))
        err_console.print(f"check failed: {plural(len(over), 'interpolated step cost')} still over ±2 % after the "
                          f"grid's refinements (worst: {worst.kind} of {plural(worst.batch, 'user')} at "
                          f"{worst.tokens:,} tokens, "
                          f"{pct(worst.error)}); the run's figures lean on them\n  hint: --exact times every step "
                          "shape directly (small models), or narrow --prompt-len / --output-len", highlight=False)
        raise typer.Exit(1)


def requests_table(res: ServeResult) -> pd.DataFrame:
    """One row per request: arrival, lengths, admission, first token and finish (ns), refused."""
    s, r = res.schedule, res.schedule.requests
    return pd.DataFrame({"arrival_ns": r.arrival_ns, "prompt_len": r.prompt, "output_len": r.output,
                         "admitted_ns": s.admitted_ns, "first_token_ns": s.first_token_ns, "finish_ns": s.finish_ns,
                         "refused": s.refused})


def checks_table(res: ServeResult) -> pd.DataFrame:
    """The interpolants' checks (none in exact mode)."""
    checks = getattr(res.costs, "checks", [])
    return pd.DataFrame([{"round": c.round, "kind": c.kind, "batch": c.batch, "tokens": c.tokens,
                          "interpolated_ns": c.interpolated_ns, "direct_ns": c.direct_ns, "error": c.error,
                          "ok": c.ok} for c in checks])


def print_report(res: ServeResult, out: dict, opts: StepOptions, t, trace: Path | None) -> None:
    """The run's figures, latency percentiles and the interpolants' checks, each table within 80 columns."""
    m = res.memory
    console.print(f"[bold]{opts.model.name}[/] on {t.spec.name} ({t.layout.n_sips} SIPs), layout {opts.layout}: "
                  f"{out['requests']} request{'' if out['requests'] == 1 else 's'}{' from ' + str(trace) if trace else ''}, at most {out['max_batch']} "
                  f"running; step costs {'exact, every shape' if res.mode == 'exact' else 'fast, interpolated'}",
                  highlight=False)
    lat = narrow_table("latency per request", "", *(f"p{q}" for q in PERCENTILES))
    for key, name in (("ttft", "time to first token"), ("tpot", "time per output token"), ("e2e", "end to end")):
        lat.add_row(name, *(duration(out[f"{key}_p{q}_ns"]) for q in PERCENTILES))
    console.print(fit(console, lat))
    run = narrow_table("the run", "", "value")
    for name, value in (("requests served / refused", f"{count(out['served'])} / {count(out['refused'])}"),
                        ("span (first arrival to last token)", duration(out["span_ns"])),
                        ("output tokens/s", num(out["output_tokens_per_s"])),
                        ("requests/s", num(out["requests_per_s"], 2)),
                        ("steps: prefill / decode", f"{count(out['prefill_steps'])} / {count(out['decode_steps'])}"),
                        ("busy share of the span", percent(out["busy_share"])),
                        ("decode batch: mean / most",
                         f"{num(out['decode_batch_mean'], 2)} / {out['decode_batch_max']}"),
                        ("KV held: mean / most",
                         f"{percent(out['kv_held_mean'], 2)} / {percent(out['kv_held_max'], 2)}"),
                        ("KV capacity, tokens", count(m.capacity_tokens)),
                        ("KV bytes per token, each working PE", count(m.bytes_per_token))):
        run.add_row(name, value)
    console.print(fit(console, run, wrap=("",)))
    checks = checks_table(res)
    if checks.empty:
        return
    last = checks[checks["round"] == checks["round"].max()]
    table = narrow_table("interpolated step costs at held-out shapes", "step", "users", "tokens",
                         "interpolated", "direct", "error")
    for r in last.itertuples():
        table.add_row(r.kind, str(r.batch), count(r.tokens), duration(r.interpolated_ns), duration(r.direct_ns),
                      pct(r.error) + ("" if r.ok else " over"))
    console.print(fit(console, table))
    rounds = int(checks["round"].max())
    console.print(f"within ±2 % of the direct evaluation: {int(last['ok'].sum())} of {len(last)}"
                  + (f", after {plural(rounds, 'refinement')} of the grid" if rounds else ""), highlight=False)
