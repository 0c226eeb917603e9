"""``kbfast run``: one collective, PE-to-PE point, GEMM or model step, on the fast path, exactly, or both
(design §9)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import pandas as pd
import typer
from rich.markup import escape

from kbfast.measure.bottleneck import link_table, top_resources
from kbfast.cli.common import (FmtOpt, OutputFormat, SetOpt, TopologyOpt, check_modes, console, err_console,
                               first_run, load, positive_size, user_errors, writable)
from kbfast.cli.outputs import check_outputs, write_table
from kbfast.config.units import format_size
from kbfast.exact import run_exact
from kbfast.report.perfetto import write_trace
from kbfast.report.explain import print_bound, print_critical_path, print_resources, print_sensitivity
from kbfast.report.tables import fit, narrow_table
from kbfast.report.formats import csv_text, figures, to_json
from kbfast.report.heatmap import plot_link_heatmap
from kbfast.measure.methods import EXACT_REPLAY, NETWORK
from kbfast.measure.rows import rel_error, tightness
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import ALGORITHMS, HOPS, OP_TABLE, check_tile_fits
from kbfast.errors import KbfastError
from kbfast.report.model import model_csv, model_report, print_model_report
from kbfast.workloads.gemm import STAGINGS, parse_dim
from kbfast.workloads.model import LAYOUTS
from kbfast.measure.registry import WORKLOADS, Prepared, build, measure_modes, prepare
from kbfast.measure.sensitivity import sensitivity

if TYPE_CHECKING:                       # a type only: the command measures through the registry
    from kbfast.sim.result import Result

ALLREDUCE, PE2PE = WORKLOADS["allreduce"].fields, WORKLOADS["pe2pe"].fields   # the defaults, shared with sweeps
COLLECTIVE = WORKLOADS["collective"].fields
run_app = typer.Typer(help="Run one workload point: an all-reduce, a PE-to-PE transfer, a GEMM or a model step.",
                      no_args_is_help=True, add_completion=False)


SizeOpt = Annotated[str, typer.Option("--size", help="Bytes per rank, e.g. 96KiB, 1MiB.")]
ExactOpt = Annotated[bool, typer.Option("--exact", help="Exact flit-level replay instead of the fast path.")]
CompareOpt = Annotated[bool, typer.Option("--compare", help="Fast path and exact replay, with the error.")]
TraceOpt = Annotated[Path | None, typer.Option(help="Write a Perfetto trace JSON of the exact replay.")]
LinksOpt = Annotated[Path | None, typer.Option("--links", help="Write the per-link table (bytes, busy, "
                                                                "utilisation) to FILE.csv or FILE.parquet.")]
PcsOpt = Annotated[Path | None, typer.Option("--pcs", help="Write the per pseudo-channel table (commits, busy) to "
                                                            "FILE.csv or FILE.parquet.")]
SensitivityOpt = Annotated[bool, typer.Option("--sensitivity", help="Also the latency with each resource class 2x "
                                                                   "faster, alone, on the fast path "
                                                                   "(docs/bottlenecks.md).")]
MethodOpt = Annotated[str | None, typer.Option(
    help="The fast path's point: hybrid (replayed exactly where flows meet and the replay fits its event budget, "
         "else the queueing network when it fits the same wait; the default), network (the queueing network, never "
         "a replay) or fluid (the fluid schedule, as sweeps use; quicker, less exact). The method row says how the "
         "point was made: closed form, exact replay, network or fluid. Not with --exact.")]
HeatOpt = Annotated[Path | None, typer.Option("--heatmap", help="Draw link utilisation on the cube mesh of the "
                                                                 "busiest SIP to FILE.png.")]


def _overrides(sets: list[str] | None, buffer_kind: str | None, n_slots: int | None) -> list[str]:
    out = list(sets or [])
    if buffer_kind:
        out.append(f"ipcq.buffer_kind={buffer_kind}")
    if n_slots is not None:                # 0 reaches the schema, which refuses it by name
        out.append(f"ipcq.n_slots={n_slots}")
    return out


def _flags(buffer_kind: str | None, n_slots: int | None) -> dict[str, str]:
    """The options behind the overrides of :func:`_overrides`, for refusals to name."""
    return {k: v for k, v in (("ipcq.buffer_kind", buffer_kind and f"--buffer-kind {buffer_kind}"),
                              ("ipcq.n_slots", None if n_slots is None else f"--n-slots {n_slots}")) if v}


def _prepare(t, router: Router, workload: dict) -> Prepared:
    """The registry's ``prepare``, after the kind's named fields (``WorkloadKind.checks``): a misspelt name is
    refused naming the flag that gave it (``--algorithm: unknown all-reduce algorithm 'rign'``)."""
    bad = WORKLOADS[workload["kind"]].misnamed(workload)
    if bad is not None:
        raise KbfastError(f"--{bad[0].replace('_', '-')}: {bad[1]}")
    return prepare(t, router, workload)


def evaluate(t, workload: dict, exact: bool, compare: bool,
             trace: Path | None) -> tuple[dict, Result, KbfastError | None]:
    """The inputs and metrics of one collective point, measured through the registry (its metric row:
    kbfast.measure.collective), in the order the command shows them; the result they came from; and the
    refusal of the exact half of ``--compare``, if any (the fast half is kept)."""
    ipcq, router = t.spec.ipcq, Router(t)
    replays = exact or compare or trace or workload["method"] == "hybrid"
    first_run(*(("exact",) if replays else ()), *(() if exact else ("runs", "tight", "fast")))
    mode = "exact" if exact else "fast"
    prepared = _prepare(t, router, workload)
    got, refused = measure_modes(t, router, workload, (mode, "exact") if compare and not exact else (mode,), prepared)
    res, m, d = got[0].result, got[0].row, got[0].details
    row: dict = {"topology": t.spec.name, "workload": d["workload"], "nbytes": d["nbytes"], "n_ranks": m["n_ranks"]}
    if "ipcq." not in WORKLOADS[workload["kind"]].ignored_keys(workload):   # a raw DMA has no IPCQ
        row.update(buffer_kind=ipcq.buffer_kind, n_slots=ipcq.n_slots)
    if d["tile_io"] is not None:
        row["tile_io"] = d["tile_io"]
    row["mode"] = mode
    if not exact:                                 # how the fast path made the point (kbfast.measure.methods)
        row["method"] = m["method"]
    if d["not_replayed"]:                         # why no replay made the point
        row["replay"] = d["not_replayed"]
    row["n_ops"] = d["n_ops"]
    if trace is not None and refused is None:     # the exact replay measured (or the hybrid's), else one now
        replay = got[-1].result if exact or len(got) == 2 else prepared.replay
        if replay is None:
            replay = run_exact(res.program)
        write_trace(replay, trace)
    row["latency_ns"] = m["latency_ns"]
    if "algbw_gbps" in m:                         # the collective kind's: size / latency
        row["algbw_gbps"] = m["algbw_gbps"]
    if not math.isnan(m["busbw_gbps"]):           # a collective's, not a point-to-point transfer's
        row["busbw_gbps"] = m["busbw_gbps"]
    row["launch_ns"] = d["launch_ns"]
    if not exact:
        row.update({k: m[k] for k in ("latency_lo_ns", "latency_hi_ns", "contention_ns", "contention")})
        row = with_tightness(row)
    row[f"{mode}_wall_s"] = d["wall_s"]
    if len(got) == 2:
        ex = got[1]
        row.update(exact_latency_ns=ex.row["latency_ns"], rel_error=rel_error(m["latency_ns"], ex.row["latency_ns"]),
                   exact_wall_s=ex.details["wall_s"])
    for name, end in d["phase_ends"].items():
        row[f"phase_end_ns[{name}]"] = end
    row.update({k: v for k, v in m.items() if k.startswith(("bottleneck_", "critical_path_", "bound_"))})
    return row, res, refused


def with_tightness(row: dict) -> dict:
    """``row`` with ``bound_ratio`` and ``bounds_loose`` (kbfast.measure.rows.tightness) right after its
    ``latency_hi_ns``, when it has both bounds."""
    if "latency_hi_ns" not in row:
        return row
    extra = tightness(row["latency_lo_ns"], row["latency_ns"], row["latency_hi_ns"])
    out: dict = {}
    for key, value in row.items():
        out[key] = value
        if key == "latency_hi_ns":
            out.update(extra)
    return out


def _print(row: dict, fmt: OutputFormat, res: Result | None = None) -> None:
    """JSON, CSV or tables: inputs and metrics, then (with ``res``) the busiest resources and the critical
    path, and the sensitivities when the row has them (JSON: a list under ``sensitivity``; CSV: a
    ``gain[<resource>]`` column each)."""
    sens = row.pop("sensitivity", None)
    if fmt is OutputFormat.json:
        print(to_json({**row, "sensitivity": sens} if sens is not None else row))
    elif fmt is OutputFormat.csv:
        flat = {**row, **{f"gain[{r['resource']}]": r["gain"] for r in sens or ()}}
        sys.stdout.write(csv_text(pd.DataFrame([flat])))
    else:
        hidden = ("critical_path_", "bottleneck_", "bound_", "sensitivity_base_ns") if res is not None else ()
        compared = "exact_latency_ns" in row      # --compare: both modes, the title says so (no "mode fast" row)
        shown = {k: v for k, v in row.items()         # bound_ratio's text says "loose": no bounds_loose line
                 if (k == "bound_ratio" or not k.startswith(hidden)) and k != "bounds_loose"
                 and not (compared and k == "mode")}
        modes = f"{row['mode']} vs exact" if compared else row["mode"]
        table = narrow_table(f"{row['workload']} ({modes})", "metric", "value")
        for label, text in figures(shown):
            table.add_row(escape(label), text)   # "[tile load]" is no markup
        console.print(fit(console, table))
        if res is not None:
            top = top_resources(res.program, row["latency_ns"], res.pcs)
            print_resources(console, top, "latency")
            print_critical_path(console, {k[len("critical_path_"):-3]: v for k, v in row.items()
                                          if k.startswith("critical_path_")})
            print_bound(console, {**row, **_as_listed(row.get("bottleneck_resource"), top)})
        if sens:
            print_sensitivity(console, sens, row["sensitivity_base_ns"])


def _as_listed(name: str | None, top: pd.DataFrame) -> dict:
    """The busiest resource ``name`` as the resource table lists it, when that table's first row holds it with
    the same resource of other SIPs (``sip0-1.cube10 r0c0 -> ucie-N.conn0`` for ``sip0.cube10 ...``): one
    resource, one name."""
    if not name or top.empty or not name.startswith("sip"):
        return {}
    listed = str(top["resource"].iloc[0])
    local = name.partition(".")[2]
    return {"bottleneck_resource": listed} if listed.startswith("sip") and listed.partition(".")[2] == local else {}


def _outputs(res: Result, span_ns: float, links: Path | None, pcs: Path | None, heatmap: Path | None,
             label: str) -> None:
    """--links, --pcs and --heatmap of one result; link utilisation over ``span_ns``, the span of the result's
    own fields (its latency)."""
    edges = link_table(res.edges, span_ns) if links is not None or heatmap is not None else None
    if links is not None:
        err_console.print(f"links written to {write_table(edges, links)}", soft_wrap=True)
    if pcs is not None:
        err_console.print(f"pseudo-channels written to {write_table(res.pcs, pcs)}", soft_wrap=True)
    if heatmap is not None:
        err_console.print(f"heat map written to {plot_link_heatmap(res.program.tables, edges, heatmap, label)}",
                          soft_wrap=True)


BufferKindOpt = Annotated[str | None, typer.Option(help="IPCQ slot memory: tcm, sram or hbm.")]
NSlotsOpt = Annotated[int | None, typer.Option(help="IPCQ ring depth.")]
TileIoOpt = Annotated[bool, typer.Option("--tile-io/--no-tile-io", help=(
    "Every rank loads its input from its own HBM slice before the collective and stores its output after it "
    "(default); --no-tile-io times the IPCQ schedule alone."))]


def _sensitivity(spec, w: dict, row: dict) -> None:
    """Add the point's sensitivities to ``row`` (kbfast.measure.sensitivity), against its fast-path latency
    as ``sensitivity_base_ns``.  A collective's are timed on the fluid schedule whatever its ``--method``, so
    that no variant is replayed while another is not; its base is measured again where the point was replayed or
    made by the queueing network (or under --exact)."""
    if "method" in w:
        w = {**w, "method": "fluid"}
    same = row["mode"] == "fast" and row.get("method") not in (EXACT_REPLAY, NETWORK)
    base, rows = sensitivity(spec, w, row["latency_ns"] if same else None)
    row["sensitivity_base_ns"], row["sensitivity"] = base, rows


def _collective_point(w: dict, size: str, topology: str | None, sets: list[str] | None, buffer_kind: str | None,
                      n_slots: int | None, exact: bool, compare: bool, fmt: OutputFormat, trace: Path | None,
                      links: Path | None, pcs: Path | None, heatmap: Path | None, what: str,
                      sensitive: bool = False) -> None:
    """``kbfast run allreduce`` and ``run collective``: one point of workload ``w`` (its ``size`` from
    ``--size``) measured, printed and its tables written; ``what`` names it on the heat map; ``sensitive``:
    with its sensitivities (kbfast.measure.sensitivity)."""
    w = {**w, "method": check_modes(exact, compare, w["method"])}
    heatmap = check_outputs(trace, links, pcs, heatmap)
    spec = load(topology, _overrides(sets, buffer_kind, n_slots), _flags(buffer_kind, n_slots))
    nbytes = positive_size(size)
    check_tile_fits(spec, nbytes, f"--size {size}: ")
    w = {**w, "size": nbytes}
    row, res, refused = evaluate(build_tables(spec), w, exact, compare, trace)
    if sensitive:
        _sensitivity(spec, w, row)
    _print(row, fmt, res)
    _outputs(res, row["latency_ns"], links, pcs, heatmap, f"{row['workload']}{what}, {format_size(nbytes)} per rank")
    if refused is not None:                # the fast half is shown; the exact half's refusal exits 2
        raise refused


@run_app.command("allreduce", short_help="One all-reduce (lrab by default): latency, bus bandwidth.")
@user_errors
def run_allreduce(
    topology: TopologyOpt = None,
    algorithm: Annotated[str, typer.Option(help=f"One of {', '.join(ALGORITHMS)}.")] = ALLREDUCE["algorithm"],
    size: SizeOpt = ALLREDUCE["size"],
    buffer_kind: BufferKindOpt = None,
    n_slots: NSlotsOpt = None,
    ranks: Annotated[str | None, typer.Option(help="cube_pe0, all_pes, sip_pe0 or a list of PEs (default by "
                                                   "algorithm).")] = None,
    tile_io: TileIoOpt = ALLREDUCE["tile_io"],
    exact: ExactOpt = False,
    compare: CompareOpt = False,
    method: MethodOpt = None,
    fmt: FmtOpt = OutputFormat.table,
    trace: TraceOpt = None,
    links: LinksOpt = None,
    pcs: PcsOpt = None,
    heatmap: HeatOpt = None,
    sensitive: SensitivityOpt = False,
    sets: SetOpt = None,
) -> None:
    """One all-reduce (the short form of run collective --op all_reduce, lrab by default): latency (max
    pe_exec_ns), bus bandwidth, per-phase ends, contention, the busiest resources and the critical path;
    --compare adds the exact error."""
    w = {"kind": "allreduce", "algorithm": algorithm, "ranks": ranks, "tile_io": tile_io, "method": method}
    _collective_point(w, size, topology, sets, buffer_kind, n_slots, exact, compare, fmt, trace, links, pcs, heatmap,
                      " all-reduce", sensitive)


@run_app.command("collective", short_help="One collective of the library: latency, bus bandwidth.")
@user_errors
def run_collective(
    op: Annotated[str, typer.Option("--op", help=f"One of {', '.join(OP_TABLE)}.")] = COLLECTIVE["op"],
    algorithm: Annotated[str | None, typer.Option(help="The operation's algorithm (default: its first that runs on "
                                                       "the ranks): " + "; ".join(f"{o}: {', '.join(a)}" for o, a
                                                                                  in OP_TABLE.items()) + ".")] = None,
    ranks: Annotated[str | None, typer.Option(help="cube_pe0, all_pes, sip_pe0 or a list of PEs, their names "
                                                   "joined by commas without spaces (sip0.cube2.pe0); default by "
                                                   "algorithm.")] = None,
    size: Annotated[str, typer.Option("--size", help="Each rank's whole buffer, e.g. 1MiB (docs/collectives.md).")]
    = COLLECTIVE["size"],
    topology: TopologyOpt = None,
    buffer_kind: BufferKindOpt = None,
    n_slots: NSlotsOpt = None,
    tile_io: TileIoOpt = COLLECTIVE["tile_io"],
    exact: ExactOpt = False,
    compare: CompareOpt = False,
    method: MethodOpt = None,
    fmt: FmtOpt = OutputFormat.table,
    trace: TraceOpt = None,
    links: LinksOpt = None,
    pcs: PcsOpt = None,
    heatmap: HeatOpt = None,
    sensitive: SensitivityOpt = False,
    sets: SetOpt = None,
) -> None:
    """One collective operation: latency, algorithm and bus bandwidth (nccl-tests' definitions), per-phase
    ends, the busiest resources and the critical path; --compare adds the exact error."""
    w = {"kind": "collective", "op": op, "algorithm": algorithm, "ranks": ranks, "tile_io": tile_io,
         "method": method}
    _collective_point(w, size, topology, sets, buffer_kind, n_slots, exact, compare, fmt, trace, links, pcs, heatmap,
                      "", sensitive)


@run_app.command("pe2pe", short_help="One PE-to-PE transfer of a hop class, IPCQ or raw DMA.")
@user_errors
def run_pe2pe(
    hop: Annotated[str, typer.Option(help=f"Hop class: {', '.join(HOPS)}.")] = PE2PE["hop"],
    size: SizeOpt = PE2PE["size"],
    raw_dma: Annotated[bool, typer.Option("--raw-dma", help="DMA load + store instead of IPCQ send/recv.")] = False,
    no_consume: Annotated[bool, typer.Option("--no-consume", help="recv_no_consume (skip the slot read).")] = False,
    no_load: Annotated[bool, typer.Option("--no-load", help="With --raw-dma: the store into the peer's slice "
                                                            "alone, without the load from the own slice.")] = False,
    topology: TopologyOpt = None,
    buffer_kind: BufferKindOpt = None,
    exact: ExactOpt = False,
    compare: CompareOpt = False,
    method: MethodOpt = None,
    fmt: FmtOpt = OutputFormat.table,
    trace: TraceOpt = None,
    links: LinksOpt = None,
    pcs: PcsOpt = None,
    heatmap: HeatOpt = None,
    sets: SetOpt = None,
) -> None:
    """One PE-to-PE transfer of a hop class (h1..h5), over IPCQ or as raw DMA: latency, the busiest
    resources and the critical path (no bus bandwidth: it is not a collective)."""
    method = check_modes(exact, compare, method)
    if no_load and not raw_dma:
        raise KbfastError("--no-load leaves out the raw DMA's load; an IPCQ transfer has none: add --raw-dma")
    heatmap = check_outputs(trace, links, pcs, heatmap)
    t = build_tables(load(topology, _overrides(sets, buffer_kind, None), _flags(buffer_kind, None)))
    w = {"kind": "pe2pe", "hop": hop, "size": positive_size(size), "raw_dma": raw_dma, "consume": not no_consume,
         "load": not no_load, "method": method}
    row, res, refused = evaluate(t, w, exact, compare, trace)
    _print(row, fmt, res)
    _outputs(res, row["latency_ns"], links, pcs, heatmap, f"{row['workload']}, {format_size(row['nbytes'])}")
    if refused is not None:                # the fast half is shown; the exact half's refusal exits 2
        raise refused


@run_app.command("gemm", short_help="One GEMM on one PE: latency, MAC utilisation, bound stage.")
@user_errors
def run_gemm(
    m: Annotated[str, typer.Option("--m", help="Rows of A and C, e.g. 32, 4Ki.")] = "32",
    n: Annotated[str, typer.Option("--n", help="Columns of B and C.")] = "32",
    k: Annotated[str, typer.Option("--k", help="Columns of A, rows of B.")] = "3072",
    staging: Annotated[str, typer.Option(help=f"One of {', '.join(STAGINGS)}: ref streams an operand per "
                                              "tile, load puts it in TCM first.")] = "load_ref",
    pe: Annotated[str, typer.Option(help="The PE, as sipS.cubeC.peP.")] = "sip0.cube0.pe0",
    b_from: Annotated[str | None, typer.Option(help="The PE whose HBM slice holds B (default: the PE's "
                                                     "own).")] = None,
    epilogue: Annotated[list[str] | None, typer.Option(help="A fused epilogue OP[:SCOPE] (repeat; in order): "
                                                            "relu, bias, dequant:k_tile, ... (pe.math_ops)")] = None,
    topology: TopologyOpt = None,
    exact: ExactOpt = False,
    compare: CompareOpt = False,
    fmt: FmtOpt = OutputFormat.table,
    trace: TraceOpt = None,
    sensitive: SensitivityOpt = False,
    sets: SetOpt = None,
) -> None:
    """One GEMM on one PE: latency, composite window, MAC utilisation, the bound stage, busy fractions; the fast
    method (docs/gemm.md) says how it was timed."""
    check_modes(exact, compare)
    writable(trace, "--trace")
    t = build_tables(load(topology, list(sets or [])))
    router = Router(t)
    w = {"kind": "gemm", **dict(zip("mnk", (parse_dim(f"--{name}", v) for name, v in (("m", m), ("n", n), ("k", k))))),
         "staging": staging, "pe": pe, "b_from": b_from, "epilogues": epilogue}
    prepared = _prepare(t, router, w)              # the shape, PE names and epilogues, before any compiling
    first_run(*(("exact",) if exact or compare or trace else ()), *(() if exact else ("runs", "fast", "pipeline")))
    mode = "exact" if exact else "fast"
    got, refused = measure_modes(t, router, w, (mode, "exact") if compare and not exact else (mode,), prepared)
    row = with_tightness({"workload": "gemm", "mode": mode, **got[0].details})
    if len(got) == 2:
        ex = got[1].details
        row.update(exact_latency_ns=ex["latency_ns"], exact_window_ns=ex["window_ns"],
                   rel_error=rel_error(row["latency_ns"], ex["latency_ns"]))
    if trace is not None and refused is None:    # one Program for the modes and the trace
        write_trace(run_exact(build(t, router, w, prepared).program), trace)
    if sensitive:
        _sensitivity(t.spec, w, row)
    _print_gemm(row, fmt)
    if refused is not None:                # the fast half is shown; the exact half's refusal exits 2
        raise refused


def _print_gemm(row: dict, fmt: OutputFormat) -> None:
    """A GEMM's row (:func:`_print`); a table shows the row's ``warning`` as a note line below it."""
    warning = row.get("warning") if fmt is OutputFormat.table else None
    _print({k: v for k, v in row.items() if k != "warning"} if warning else row, fmt)
    if warning:
        console.print(f"note: {warning}", highlight=False)



@run_app.command("model", short_help="One model step: piece and step latency, tokens/s.")
@user_errors
def run_model(
    model: Annotated[str, typer.Argument(help="A bundled model (llama3_70b, gpt3_175b, llama32_1b, mixtral_8x7b, "
                                              "qwen3_235b_a22b, tp_mlp, "
                                              "gqa_llama70b_validation) or a model YAML.")],
    phase: Annotated[str | None, typer.Option(help="decode (one token per user, the default) or prefill; "
                                                   "transformers only.")] = None,
    batch: Annotated[int | None, typer.Option(help="Users (sequences) in the step (default 1); transformers "
                                                   "only.")] = None,
    seq: Annotated[int | None, typer.Option(help="Prefill: tokens per user (default 2048); decode: 1.")] = None,
    kv_len: Annotated[int | None, typer.Option(help="Decode: the context each user attends to (default 4096).")] = None,
    layers: Annotated[int | None, typer.Option(help="Layers in the step (default: all; identical layers are "
                                                    "evaluated once).")] = None,
    layout: Annotated[str, typer.Option(help=f"One of {', '.join(LAYOUTS)}.")] = "tp_pes",
    method: Annotated[str | None, typer.Option(help="The fast path's point: hybrid (the stand-in replayed exactly "
                                                    "when it fits, the default), network (the stand-in in the "
                                                    "queueing network) or fluid (scheduled; quicker, less "
                                                    "exact).")] = None,
    collective: Annotated[str | None, typer.Option(
        help="The all-reduce algorithm: auto (the fastest for each message, timed on the fast path), lrab (the "
             "reference's), ring_pipe or hier2d. Default: the model file's (auto; tp_mlp: lrab).")] = None,
    sequence_parallel: Annotated[bool, typer.Option(
        "--sequence-parallel", help="Transformers: reduce-scatter and all-gather around the norms in place of "
                                    "the all-reduces (needs ring_pipe, hier2d or auto).")] = False,
    overlap: Annotated[str | None, typer.Option(
        help="Transformers: prefetch (the default: the GEMM after each all-reduce streams its first weight "
             "tiles into free TCM during it) or none (stage by stage, the reference's).")] = None,
    pp: Annotated[int | None, typer.Option(help="Transformers: pipeline stages, each on its own group of SIPs "
                                                "(default 1).")] = None,
    dp: Annotated[int | None, typer.Option(help="Transformers: data-parallel replicas, each on its own group of "
                                                "SIPs, the users split among them (default 1).")] = None,
    micro_batches: Annotated[int | None, typer.Option(
        help="With --pp: micro-batches per step (default: the largest divisor of a replica's users up to "
             "--pp).")] = None,
    ep: Annotated[int | None, typer.Option(help="Mixtures of experts: expert-parallel blocks of PEs, each holding "
                                                "experts / ep experts (default gcd(experts, PEs)).")] = None,
    hot_expert: Annotated[float | None, typer.Option(
        help="Mixtures of experts: the hottest expert's share of the routed token-slots, from 1/experts (even, "
             "the default) to 1/top_k.")] = None,
    topology: TopologyOpt = None,
    exact: ExactOpt = False,
    compare: CompareOpt = False,
    fmt: FmtOpt = OutputFormat.table,
    sensitive: SensitivityOpt = False,
    sets: SetOpt = None,
) -> None:
    """One step of a model (docs/models.md): per-piece and step latency, tokens/s or time to first token, MAC
    utilisation, the critical path by category and the op counts per kind."""
    method = check_modes(exact, compare, method)
    t = build_tables(load(topology, list(sets or [])))
    router = Router(t)
    w = {"kind": "model", "model": model, "phase": phase, "batch": batch, "seq": seq, "kv_len": kv_len,
         "layers": layers, "layout": layout, "method": method, "collective": collective,
         "sequence_parallel": True if sequence_parallel else None, "overlap": overlap, "pp": pp, "dp": dp,
         "micro_batches": micro_batches, "ep": ep, "hot_expert": hot_expert}
    prepared = _prepare(t, router, w)              # bad input refused before any compiling
    first_run("collectives", "exact", *(() if exact else ("runs", "fast", "pipeline")))   # the hybrid replays exactly
    got, refused = measure_modes(t, router, w, ("exact",) if exact else ("fast", "exact") if compare else ("fast",),
                                 prepared)
    step = got[0].result if len(got) == 1 else got[0].result.with_mode(got[1].result)
    report = model_report(step, t)
    if sensitive:
        fast = step.latency_ns("fast") if "fast" in step.results else None
        base, report["sensitivity"] = sensitivity(t.spec, w, fast)
        report["sensitivity_base_ns"] = base
    if fmt is OutputFormat.json:
        print(to_json(report))
    elif fmt is OutputFormat.csv:
        sys.stdout.write(csv_text(model_csv(report, "exact" if exact else "fast")))
    else:
        print_model_report(report, console)
        if sensitive:
            print_sensitivity(console, report["sensitivity"], base)
    if refused is not None:                # the fast half is printed; the exact half's refusal exits 2
        raise refused
