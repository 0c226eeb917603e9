"""``kbfast search``: the best way to run a model's decode step on the tray, for an objective, under
constraints (docs/search.md).

1. The space (kbfast.search.space) is compiled candidate by candidate (and, when TTFT is asked for, its
   prefill of ``--seq`` tokens), and what does not fit or divide is pruned and counted by reason.
2. What is left is bounded, then timed, as sweeps (kbfast.sweep: ``--jobs`` processes or a Dask scheduler,
   results in ``--out``): first each candidate's lower bound on its step's period (kbfast.measure.model
   .step_lower_ns, no point timed); then the fast path's point (no bounds: its printed command gives them) of
   the candidate with the smallest bound per number of users, and of every candidate those points do not beat
   (kbfast.search.bound): the others cannot be on the front or the best.  ``exhaustive`` times them all, and so
   does a search that asks for TTFT (a prefill's time is no function of the decode step's bound).  The decode
   step is at ``--kv-len``; with TTFT, one prefill of ``--seq`` tokens per (layout, all-reduce, overlap,
   sequence parallelism, knobs).
3. The metrics, the constraints, the Pareto front and the winner (kbfast.search.front); each candidate carries
   the ``kbfast run model`` command that reproduces its figures.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kbfast.config import DEFAULT_TOPOLOGY, load_system
from kbfast.config.models import Transformer
from kbfast.errors import KbfastError
from kbfast.search.bound import beaten, leaders
from kbfast.search.front import Constraint, rank
from kbfast.search.space import Pruned, Space, prune
from kbfast.sweep.runner import kept_workers, run_sweep
from kbfast.sweep.spec import parse_spec
from kbfast.workloads.model import refuse_unread

KEYS = ("layout", "pp", "dp", "ep", "batch", "collective", "overlap", "sequence_parallel")
METRICS = ("latency_ns", "step_period_ns", "tokens_per_s", "tpot_ms", "tokens_per_s_per_sip", "ttft_ms")


@dataclass
class SearchResult:
    """Every candidate compiled (``table``: inputs, ``timed`` and the metrics where timed, ``tpot_lo_ms`` (the
    lower bound on its TPOT), ``feasible``, ``front``, ``best``, ``command``, and with TTFT its prefill's
    ``ttft_command``), the pruning, and how many candidates the space had."""

    table: pd.DataFrame
    pruned: Pruned
    n_candidates: int
    bounded: bool = True           # False: every candidate was timed (--exhaustive, or TTFT asked for)

    @property
    def n_beaten(self) -> int:
        """Candidates left untimed: their lower bounds are beaten (kbfast.search.bound)."""
        return int((~self.table["timed"] & self.table["error"].isna()).sum())


def _row(c: dict, seq: int | None = None) -> dict:
    """A candidate's zip row: its decode step, or with ``seq`` a prefill of ``seq`` tokens for one user (for one
    user per data-parallel replica: each replica prefills its own request)."""
    row = {f"workload.{k}": c[k] for k in KEYS if k not in ("sequence_parallel", "ep")}
    if c["ep"] is not None:
        row["workload.ep"] = c["ep"]
    row["workload.sequence_parallel"] = True if c["sequence_parallel"] else None     # as the command line
    row.update(c["set"])
    if seq is not None:
        row.update({"workload.batch": c["dp"], "workload.phase": "prefill", "workload.seq": seq,
                    "workload.kv_len": seq})
    return row


@dataclass(frozen=True)
class _Sweeps:
    """How the search's sweeps run: its model, system, context, method, output folder and workers."""

    model: str
    topology: str
    overrides: dict
    kv_len: int
    method: str
    out: Path
    jobs: int
    scheduler: str | None
    progress: Callable[[int, int], None] | None

    def run(self, name: str, rows: list[dict], bounds: bool | str = False) -> pd.DataFrame:
        """``rows`` as one sweep of model points in ``out / name`` (``bounds`` False: the points alone, as the
        front ranks points and a printed command gives the bounds; ``lower``: each point's lower bound alone), in
        batches small enough to keep every process busy."""
        data = {"name": f"search_{name}", "description": f"kbfast search over {len(rows)} configurations of "
                f"{self.model}", "topology": self.topology, "set": self.overrides, "seed": 0,
                "axes": [{"zip": rows}],
                "workload": {"kind": "model", "model": self.model, "phase": "decode", "kv_len": self.kv_len,
                             "method": self.method, "bounds": bounds}}
        spec = parse_spec(data, f"kbfast search ({name})")
        size = max(1, -(-len(rows) // (4 * self.jobs)))             # four batches a process: the slow ones even out
        return run_sweep(spec, self.out / name, jobs=self.jobs, scheduler=self.scheduler, overwrite=True,
                         progress=self.progress, max_batch=size).results


def _time(table: pd.DataFrame, rows: list[dict], which: list[int], name: str, sweeps: _Sweeps) -> None:
    """Time candidates ``which`` (one sweep, ``name``) into ``table``'s metrics."""
    if not which:
        return
    dec = sweeps.run(name, [rows[i] for i in which])
    idx = table.index[which]
    for col in ("latency_ns", "step_period_ns", "tokens_per_s", "method", "collective_used", "error"):
        if col in dec:
            table.loc[idx, col] = dec[col].to_numpy()
    table.loc[idx, "timed"] = True
    table["tpot_ms"] = table["step_period_ns"] * 1e-6      # a pipeline's period: its steps overlap
    table["tokens_per_s_per_sip"] = table["tokens_per_s"] / table["n_sips"]


def _branch_and_bound(table: pd.DataFrame, kept: list[dict], rows: list[dict], objective: str,
                      constraints: list[Constraint], sweeps: _Sweeps) -> None:
    """Bound every candidate (``tpot_lo_ms``), time the leaders, then every candidate they do not beat
    (kbfast.search.bound).  A bound that fails is none (NaN): its candidate is timed, and says why.  An ``auto``
    candidate is bounded as itself: it may choose one algorithm for its layers and another for its LM head, a
    step no other candidate runs."""
    res = sweeps.run("bounds", rows, bounds="lower")
    lo_ns = res["period_lo_ns"].to_numpy(float) if "period_lo_ns" in res else np.full(len(rows), np.nan)
    table["tpot_lo_ms"] = lo_ns * 1e-6
    _time(table, rows, leaders(kept, lo_ns), "decode", sweeps)
    ok = table["timed"] & table["error"].isna()
    for c in constraints:
        ok &= c.holds(table)
    out_of_it = beaten(lo_ns, table["batch"].to_numpy(), table["n_sips"].to_numpy(), table[ok], objective)
    _time(table, rows, [i for i in range(len(kept)) if not table.at[i, "timed"] and not out_of_it[i]],
          "decode_rest", sweeps)


def _ttft(table: pd.DataFrame, kept: list[dict], seq: int, sweeps: _Sweeps, command_of) -> None:
    """Each candidate's TTFT: a prefill of ``seq`` tokens for one user per replica, one per configuration without
    its batch (candidates that differ in batch alone share it), and its command; a candidate whose prefill
    fails has failed."""
    prefills = [_row(c, seq) for c in kept]
    keys = [repr(sorted(r.items())) for r in prefills]
    rows = dict(zip(keys, prefills))
    first = list(rows)
    pre = sweeps.run("prefill", [rows[k] for k in first])
    ns = pre["latency_ns"].to_numpy() if "latency_ns" in pre else np.full(len(pre), np.nan)
    failed = pre["error"].to_numpy() if "error" in pre else [None] * len(pre)
    ttft, why = dict(zip(first, ns * 1e-6)), dict(zip(first, failed))
    table["ttft_ms"] = [ttft[k] for k in keys]
    table["ttft_command"] = [command_of(r, "prefill") for r in table.to_dict("records")]
    table["error"] = [d if isinstance(d, str) else (f"prefill: {why[k]}" if isinstance(why[k], str) else None)
                      for d, k in zip(table["error"], keys)]


def command(model: str, topology: str | None, sets: list[str], row: dict, kv_len: int, phase: str = "decode",
            seq: int | None = None) -> str:
    """The ``kbfast run model`` command that reproduces ``row``'s step."""
    args = ["kbfast", "run", "model", model, "--phase", phase]
    args += ["--batch", str(int(row["batch"])), "--kv-len", str(kv_len)] if phase == "decode" else \
        ["--batch", str(int(row["dp"])), "--seq", str(seq)]
    args += ["--layout", row["layout"]]
    args += [arg for k in ("pp", "dp") if int(row[k]) > 1 for arg in (f"--{k}", str(int(row[k])))]
    if row.get("ep") is not None and not pd.isna(row["ep"]):
        args += ["--ep", str(int(row["ep"]))]
    args += ["--collective", row["collective"], "--overlap", row["overlap"]]
    if row["sequence_parallel"]:
        args.append("--sequence-parallel")
    if topology:
        args += ["--topology", topology]
    for s in sets:
        args += ["--set", s]
    for k, v in row["set"].items():
        args += ["--set", f"{k}={v}"]
    return shlex.join(args)


def search(model: Transformer, model_arg: str, topology: str | None, overrides: dict, sets: list[str], space: Space,
           objective: str, constraints: list[Constraint], kv_len: int, seq: int, out: Path, method: str = "hybrid",
           jobs: int = 1, scheduler: str | None = None,
           progress: Callable[[int, int], None] | None = None, exhaustive: bool = False) -> SearchResult:
    """Prune ``space``, time what is left and is not beaten by its bound (``exhaustive``: all of it; the module
    docstring) and rank it."""
    if not isinstance(model, Transformer):
        raise KbfastError(f"{model.name} is of kind {model.kind}: kbfast search takes transformer models\n"
                          "  hint: use llama3_70b, llama32_1b, gpt3_175b or a transformer YAML")
    given_ep = [e for e in space.ep if e is not None]
    if given_ep:          # --ep on a dense model: no candidate reads it ("every candidate pruned" misled)
        refuse_unread(model, {"ep": given_ep[0]})
    topo = topology or DEFAULT_TOPOLOGY
    candidates = space.candidates()
    need_ttft = objective == "ttft" or any(c.metric == "ttft_ms" for c in constraints)
    pruned = prune(topo, overrides, model, candidates, kv_len, method, seq if need_ttft else None)
    if not pruned.kept:
        why = "; ".join(f"{n} {r} (e.g. {pruned.examples[r]})" for r, n in pruned.counts.items())
        raise KbfastError(f"every one of the {len(candidates)} candidates was pruned: {why}\n  hint: widen the "
                          "space (more SIPs with --knob sips.count=…, smaller --batch values, a shorter --kv-len)")
    kept = pruned.kept
    rows = [_row(c) for c in kept]
    sips = int(load_system(topo, overrides).sips.count)
    table = pd.DataFrame(kept)
    table["n_sips"] = [int(c["set"].get("sips.count", sips)) for c in kept]
    for col in METRICS:
        table[col] = np.nan
    table["method"] = table["collective_used"] = table["error"] = None
    table["timed"] = False
    table["tpot_lo_ms"] = np.nan
    sweeps = _Sweeps(model_arg, topo, overrides, kv_len, method, out, jobs, scheduler, progress)
    bounded = not (exhaustive or need_ttft)      # a TTFT is no function of the decode step: nothing to bound
    with kept_workers(1 if scheduler else jobs):
        if bounded:
            _branch_and_bound(table, kept, rows, objective, constraints, sweeps)
        else:
            _time(table, rows, list(range(len(kept))), "decode", sweeps)
        table["command"] = [command(model_arg, topology, sets, r, kv_len) for r in table.to_dict("records")]
        if need_ttft:
            _ttft(table, kept, seq, sweeps, lambda r, phase: command(model_arg, topology, sets, r, kv_len, phase, seq))
    return SearchResult(rank(table, objective, constraints), pruned, len(candidates), bounded)
