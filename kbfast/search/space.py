"""The search space of ``kbfast search`` and its pruning (docs/search.md "Candidates").

A candidate is one way to run a model's decode step on the tray: a layout, pipeline and data-parallel degrees
(kbfast.workloads.parallel), a mixture of experts' expert-parallel blocks (kbfast.workloads.moe), a batch, an all-reduce algorithm, an overlap and sequence parallelism or not, and a
value of every hardware knob (``--knob KEY=V1,V2``, any key a
``--set`` takes).  The space is their cartesian product.  Before anything is timed, every candidate is
compiled (kbfast.measure.model.plan_step: pure Python, no kernel), and what the model compiler refuses is
pruned and counted by reason: the weights, KV cache and activations over the HBM slice, a GEMM's tile buffers
over the TCM, a model dimension that does not divide over the layout's PEs, an option that needs another (a
sequence-parallel step needs an all-reduce that splits).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from kbfast.config import load_system
from kbfast.config.models import Transformer
from kbfast.config.overrides import check_key_path
from kbfast.errors import KbfastError, not_one_of
from kbfast.measure.model import plan_step
from kbfast.topology.builder import build_tables
from kbfast.workloads.model import LAYOUTS, OVERLAPS, shape_for

COLLECTIVES = ("auto", "lrab", "hier2d", "ring_pipe")
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
# a refusal's reason, by what its message says (the first that matches)
REASONS = (("HBM slice", "memory: the HBM slice"), ("TCM", "memory: TCM"), ("does not divide", "does not divide"),
           ("do not divide", "does not divide"), ("needs an all-reduce", "option needs another"),
           ("needs a pipeline", "option needs another"))
DEGREES = (1, 2)             # pipeline stages and data-parallel replicas tried by default


@dataclass(frozen=True)
class Space:
    """What ``kbfast search`` tries: each field's values (docs/search.md)."""

    layouts: tuple[str, ...] = tuple(LAYOUTS)
    batches: tuple[int, ...] = BATCHES
    collectives: tuple[str, ...] = COLLECTIVES
    overlaps: tuple[str, ...] = tuple(OVERLAPS)
    sequence_parallel: tuple[bool, ...] = (False, True)
    knobs: tuple[tuple[str, tuple], ...] = ()         # (override key, values)
    pp: tuple[int, ...] = DEGREES
    dp: tuple[int, ...] = DEGREES
    ep: tuple[int | None, ...] = (None,)            # a mixture of experts' blocks (None: its default)

    def candidates(self) -> list[dict]:
        """Every combination, as the fields of a model workload and the knobs' overrides (``set``)."""
        knob_keys = [k for k, _ in self.knobs]
        out = []
        for values in itertools.product(*(v for _, v in self.knobs)):
            for lay, pp, dp, ep, b, coll, ov, sp in itertools.product(self.layouts, self.pp, self.dp, self.ep,
                                                                      self.batches, self.collectives, self.overlaps,
                                                                      self.sequence_parallel):
                out.append({"layout": lay, "pp": int(pp), "dp": int(dp), "ep": ep, "batch": int(b),
                            "collective": coll, "overlap": ov, "sequence_parallel": bool(sp),
                            "set": dict(zip(knob_keys, values))})
        return out


def parse_list(text: str, flag: str, kind=str, choices=None) -> tuple:
    """A comma-separated option value (``1,2,4``) as a tuple of ``kind``, each in ``choices`` when given."""
    items = [x.strip() for x in str(text).split(",")]
    if not any(items):
        raise KbfastError(f"{flag} {text!r}: give at least one value (comma-separated)")
    if not all(items):                   # '1,,2' or '1,': a value left out, not a list of two
        raise KbfastError(f"{flag} {text!r}: an empty item between commas\n  hint: write the values as V1,V2,…")
    try:
        values = tuple(kind(x) for x in items)
    except ValueError:
        raise KbfastError(f"{flag} {text!r}: every value must be a {kind.__name__}") from None
    if choices is not None:
        bad = [v for v in values if v not in choices]
        if bad:
            raise not_one_of(flag if str(text).strip() == str(bad[0]) else f"{flag} {text!r}: item", bad[0], choices)
    if kind is int and min(values) < 1:
        raise KbfastError(f"{flag} {text!r}: every value must be at least 1")
    return values


def parse_knob(text: str) -> tuple[str, tuple]:
    """``--knob KEY=V1,V2`` as (KEY, values): numbers as numbers."""
    if "=" not in text:
        raise KbfastError(f"--knob {text!r}: write KEY=V1,V2,… (e.g. --knob link.ucie_conn.bw_gbs=64,128)")
    key, values = text.split("=", 1)

    def number(x: str):
        for kind in (int, float):
            try:
                return kind(x)
            except ValueError:
                pass
        return x
    out = tuple(number(v.strip()) for v in values.split(",") if v.strip())
    if not key.strip() or not out:
        raise KbfastError(f"--knob {text!r}: name a key and at least one value: KEY=V1,V2,… (e.g. --knob "
                          "sips.count=2,4)")
    return key.strip(), out


def parse_knobs(texts: list[str], overrides: dict) -> tuple[tuple[str, tuple], ...]:
    """Every ``--knob`` (:func:`parse_knob`), each a key of the system (kbfast.config.overrides), given once
    and not also by a ``--set`` (in ``overrides``: a printed command would give it twice)."""
    knobs = tuple(parse_knob(k) for k in texts)
    keys = [k for k, _ in knobs]
    for text, key in zip(texts, keys):
        check_key_path(f"--knob {text}", key)
        if keys.count(key) > 1:
            raise KbfastError(f"--knob {key} is given twice\n  hint: list its values once: --knob {key}=V1,V2,…")
        if key in overrides:
            raise KbfastError(f"--knob {text}: {key} is also given by --set {key}={overrides[key]}\n  hint: "
                              "drop the --set, or put its value among the knob's")
    return knobs


def reason_of(err: KbfastError) -> str:
    """The reason a refusal prunes a candidate for (``REASONS``), or ``other``."""
    text = str(err)
    return next((why for key, why in REASONS if key in text), "other")


@dataclass
class Pruned:
    """The candidates that compile, and per reason how many were pruned (with one message as an example)."""

    kept: list[dict]
    counts: dict[str, int]
    examples: dict[str, str]


def prune(topology: str, overrides: dict, model: Transformer, candidates: list[dict], kv_len: int,
          method: str = "hybrid", seq: int | None = None) -> Pruned:
    """Compile every candidate's decode step (no kernel runs) on its system (``topology`` with ``overrides`` and
    the candidate's knobs) and keep what compiles; with ``seq`` (TTFT is asked for) its prefill of ``seq``
    tokens for one user too (a refusal's reason then says so)."""
    kept, counts, examples, tables, prefills = [], {}, {}, {}, {}

    def refusal(system: tuple, shape, options: tuple) -> KbfastError | None:
        *positional, pp, dp, ep = options
        try:
            plan_step(tables[system], model, shape, *positional, pp=pp, dp=dp, ep=ep)
        except KbfastError as err:
            return err
        return None

    for c in candidates:
        system = tuple(sorted(c["set"].items()))
        if system not in tables:
            tables[system] = build_tables(load_system(topology, {**overrides, **dict(system)},   # a refusal names
                                                      {k: f"--knob {k}={v}" for k, v in system}))  # the --knob
        options = (c["layout"], None, method, c["collective"], c["sequence_parallel"] or None, c["overlap"], c["pp"],
                   c["dp"], c["ep"])
        err, what = refusal(system, shape_for(model, "decode", c["batch"], None, kv_len), options), ""
        if err is None and seq is not None:             # the prefill does not depend on the batch
            if (system, options) not in prefills:
                prefills[system, options] = refusal(system, shape_for(model, "prefill", c["dp"], seq), options)
            err, what = prefills[system, options], " (the TTFT prefill)"
        if err is not None:
            why = reason_of(err) + what
            counts[why] = counts.get(why, 0) + 1
            examples.setdefault(why, str(err).splitlines()[0])
            continue
        kept.append(c)
    return Pruned(kept, counts, examples)
