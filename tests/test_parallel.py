"""Pipeline- and data-parallel steps: the tray split into SIP groups (kbfast.workloads.parallel), a pipelined step
composed by its recurrence or replayed whole (kbfast.measure.pipeline, kbfast.measure.model), and ``kbfast run
model --pp --dp --micro-batches``.

* parity: the tiny transformer's pipelined and replicated steps, fast against exact (latency and period within
  5 %, the fast bounds holding the exact latency);
* the recurrence ``schedule`` against hand-derived cases and, on random terms, against a plain event loop (each
  stage a server taking its micro-batches in order), with its invariants (the critical path's terms sum to the
  makespan, monotone in every term, the period between the last stage's work and a round plus the tokens' trip);
* ``split``'s refusals and its default micro-batches; placement (replicas shifted by whole SIPs); the symbolic
  check's per-rank groups; the CLI; and data parallelism on separate SIPs costing what one replica alone costs.

The hand cases of the recurrence (module docstring of kbfast.measure.pipeline; T = L x layer, a stage's layers):

* only ``layer`` non-zero, S stages, M micro-batches: the classic pipeline, C[j, s] = (j + s + 1) T, makespan
  (M + S - 1) T; every stage busy M T from s T to (M + s) T.  Round two's micro-batch j reaches stage 0 at
  (S + j) T + token, stage 0 is free from M T: the round is shifted by max(M T, S T + token), the period.
* S = 2, L = 2, layer 10, head 7, send 3, recv 5, token 6, token_out 4, M = 3: stage 0 holds a micro-batch
  a = 20 + 3 = 23 ns (C0[j] = 20 + 23 j), stage 1 b = 5 + 20 + 7 + 4 = 36 ns, and ends it 4 ns before it is
  free.  Stage 1: micro-batch 0 arrives at 23, ends at 55 (free 59); 1 arrives at 46, begins at 59, ends at
  91 (free 95); 2 arrives at 69, begins at 95, ends at 127 = a + M b - token_out, the makespan.  Its path:
  stage 0's first layer pair (20), the send (3), then stage 1 three times (recv 5 + layers 20 + head 7) with
  two token_outs (4) between: layer 80, head 21, recv 15, send 3, token_out 8 = 127.  Round two: stage 0
  begins at 69 (free) or as tokens return (55 + 6, 91 + 6, 127 + 6): 69, 97, 133, ends 89, 117, 153; stage 1
  is free from 131 and takes 36 a micro-batch: ends 163, 199, 235; the period is 235 - 127 = 108 = M b.
  With M = 1: makespan 20 + 3 + 32 = 55, round two starts as the tokens return (61), period 55 + 6 = 61.
"""

from __future__ import annotations

import heapq
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.cli.main import app
from kbfast.config.models import load_model
from kbfast.errors import KbfastError
from kbfast.ir import ProgramBuilder
from kbfast.measure.model import plan_step, run_step, step_row
from kbfast.measure.pipeline import RECURRENCE, TERMS, WHOLE, schedule, terms_of, whole_events, whole_runs
from kbfast.topology.names import node_names, pe_block
from kbfast.workloads.install import ring_peers, wire
from kbfast.workloads.kernels import ScheduleError, Tl
from kbfast.workloads.model import compile_model, shape_for
from kbfast.workloads.parallel import Parallel, nodes_at, split, sub_tables
from kbfast.workloads.symbolic import run_traced
import kbfast.cli.run as cli_run
from conftest import flat, le, refused, topo

FOUR = {"sips.count": 4}
ONE = {"sips.count": 1}


def decode(model, batch: int = 4):
    return shape_for(model, "decode", batch, kv_len=256)


def prefill(model, batch: int = 2):
    return shape_for(model, "prefill", batch, seq=64)


@pytest.fixture(scope="module")
def model(tiny):
    return load_model(tiny)


_STEPS: dict = {}


@pytest.fixture(scope="module")
def step(model):
    """``step(overrides, shape, modes, of, **options)`` -> the step of ``of`` (default: the tiny model) on tp_cubes
    (ahbm_2sip with ``overrides``), run once per module."""

    def at(overrides: dict, shape, modes=("fast", "exact"), of=None, **options):
        of = of or model
        key = (of.name, tuple(sorted(overrides.items())), shape, modes, tuple(sorted(options.items())))
        if key not in _STEPS:
            t, r = topo(overrides)
            _STEPS[key] = run_step(t, r, plan_step(t, of, shape, "tp_cubes", **options), modes)
        return _STEPS[key]

    return at


# -- parity: fast against exact ----------------------------------------------------------------------------------
CASES = {
    "pp2": ({}, "decode", {"pp": 2}),
    "dp2": ({}, "decode", {"dp": 2}),
    "pp2 dp2 on 4 SIPs": (FOUR, "decode", {"pp": 2, "dp": 2}),
    "pp2 mb1": ({}, "decode", {"pp": 2, "micro_batches": 1}),
    "pp2 prefill": ({}, "prefill", {"pp": 2}),
}
EIGHT = {"sips.count": 8}
SLOW_CASES = {                                   # the last field: the tiny model's layers (4: four stages)
    "pp2 mb4 on 4 SIPs": (FOUR, "decode", {"pp": 2, "micro_batches": 4}, 2),
    "pp2 dp2 prefill on 4 SIPs": (FOUR, "prefill", {"pp": 2, "dp": 2}, 2),
    "pp4, 4 layers, on 4 SIPs": (FOUR, "decode", {"pp": 4}, 4),
    "pp4 dp2, 4 layers, on 8 SIPs": (EIGHT, "decode", {"pp": 4, "dp": 2}, 4),
    "pp2 dp2, 2 SIPs a stage, 4 layers": (EIGHT, "decode", {"pp": 2, "dp": 2}, 4),
}


def _parity(model, step, overrides: dict, phase: str, options: dict, layers: int = 2) -> None:
    if layers != model.layers:
        model = model.model_copy(update={"layers": layers, "name": f"tiny{layers}"})
    shape = decode(model, 8 if layers > 2 else 4) if phase == "decode" else prefill(model)
    s = step(overrides, shape, of=model, **options)
    t, _ = topo(overrides)
    fast, exact = s.latency_ns("fast"), s.latency_ns("exact")
    assert fast == pytest.approx(exact, rel=0.05), (fast, exact)
    assert s.period_ns("fast") == pytest.approx(s.period_ns("exact"), rel=0.05)
    lo, hi = s.bounds_ns()
    assert le(lo, exact) and le(exact, hi), (lo, exact, hi)
    assert le(s.floors("exact").bound()[1], exact)              # a roofline floor is a floor of the whole step
    par = s.parallel
    assert par == split(t, options.get("pp"), options.get("dp"), options.get("micro_batches"), shape.batch)
    row = step_row(s, t)
    assert (row["latency_lo_ns"], row["latency_hi_ns"]) == (lo, hi)
    assert row["step_period_ns"] == s.period_ns()
    assert row["n_ranks"] == len(s.pieces[0].nodes) * par.pp == t.layout.n_sips * 16   # tp_cubes: 16 cubes a SIP
    if phase == "decode":
        assert row["tokens_per_s"] == pytest.approx(shape.batch / (s.period_ns() * 1e-9))
    assert sum(s.breakdown().values()) == pytest.approx(fast)   # the critical path's categories make the step
    if par.pp == 1:
        assert s.pipeline_method() == "" and s.period_ns("exact") == exact
        return
    # the fast path replays the whole pipeline's stand-in (it fits the hybrid budget), exact mode its tiles
    assert s.pipeline_method("fast") == s.pipeline_method("exact") == WHOLE
    counts = {p.name: s.repeat(p) for p in s.pieces}
    assert counts == {"layer": s.layers * par.micro_batches, "head": par.micro_batches,      # every stage's
                      "hand-off": (par.pp - 1) * par.micro_batches, "token": par.micro_batches}


@pytest.mark.parametrize("case", list(CASES))
def test_fast_matches_exact_and_the_bounds_hold(model, step, case: str) -> None:
    """The tiny model, tp_cubes: fast latency and period within 5 % of exact's, lo <= exact <= hi."""
    _parity(model, step, *CASES[case])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SLOW_CASES))
def test_fast_matches_exact_and_the_bounds_hold_more(model, step, case: str) -> None:
    _parity(model, step, *SLOW_CASES[case])


def test_the_composed_bounds_bracket_the_composed_point(model, step) -> None:
    """The recurrence on the pieces' lower and upper bounds brackets it on their points (it is monotone), and its
    upper bound holds the whole pipeline's exact replay."""
    s = step({}, decode(model), method="fluid", pp=2)
    assert s.pipeline_method("fast") == RECURRENCE and s.pipeline_method("exact") == WHOLE
    lo, hi = s.bounds_ns()
    assert le(lo, s.latency_ns("fast")) and le(s.latency_ns("fast"), hi)
    assert le(s.latency_ns("exact"), hi)


def test_the_composed_lower_bound_holds_the_exact_pipeline(model, step) -> None:
    """Composed by the recurrence, the lower bound is the last stage's roofline floor: the recurrence on the
    pieces' lower bounds sees each from a launch barrier, and the pipeline overlaps them (it ended above the
    exact replay)."""
    s = step({}, decode(model), method="fluid", pp=2)
    lo, _ = s.bounds_ns()
    assert le(lo, s.latency_ns("exact")), (lo, s.latency_ns("exact"))


# -- the recurrence ------------------------------------------------------------------------------------------------
def terms(**given: float) -> dict[str, float]:
    return {k: float(given.get(k, 0.0)) for k in TERMS}


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("micro", [1, 2, 3, 5])
@pytest.mark.parametrize("token", [0.0, 7.0])
def test_uniform_layer_only_pipeline(stages: int, micro: int, token: float) -> None:
    """Only the layers cost (T = 2 x 10 ns a stage): makespan (M + S - 1) T, period max(M T, S T + token), each
    stage busy M T from s T to (M + s) T (module docstring)."""
    L, T = 2, 20.0
    got = schedule(terms(layer=10.0, token=token), stages, micro, L)
    assert got.makespan_ns == (micro + stages - 1) * T
    assert got.period_ns == max(micro * T, stages * T + token)
    assert [(r["start_ns"], r["end_ns"], r["busy_ns"], r["idle_ns"]) for r in got.stages] == [
        (s * T, (micro + s) * T, micro * T, (stages - 1) * T) for s in range(stages)]
    assert got.on_path == terms(layer=got.makespan_ns)


def test_two_stage_pipeline_by_hand() -> None:
    """S = 2, M = 3 with every term distinct (module docstring): makespan 127, period 108, the path's terms."""
    given_terms = terms(layer=10, head=7, send=3, recv=5, token=6, token_out=4)
    got = schedule(given_terms, 2, 3, 2)
    assert (got.makespan_ns, got.period_ns) == (127.0, 108.0)
    assert got.stages == [{"start_ns": 0.0, "end_ns": 66.0, "busy_ns": 60.0, "idle_ns": 67.0},
                          {"start_ns": 23.0, "end_ns": 127.0, "busy_ns": 96.0, "idle_ns": 31.0}]
    assert got.on_path == terms(layer=80, head=21, recv=15, send=3, token_out=8)
    one = schedule(given_terms, 2, 1, 2)
    assert (one.makespan_ns, one.period_ns) == (55.0, 61.0)
    assert one.on_path == terms(layer=40, head=7, send=3, recv=5)


def test_whole_runs_and_events() -> None:
    """The whole pipeline of 2 rounds, 3 layers a stage, 2 stages, 4 micro-batches runs a stage's layer 3 x 4 x 2
    times, the head 8, the hand-off 8 and the tokens' trip 4 (after the first round only)."""
    assert [whole_runs(n, 3, 2, 4, 2) for n in ("layer", "head", "hand-off", "token")] == [24, 8, 8, 4]
    assert [whole_runs(n, 3, 4, 4, 1) for n in ("layer", "head", "hand-off", "token")] == [12, 4, 12, 0]
    assert whole_events({"layer": 10, "head": 5, "hand-off": 2, "token": 1}, 3, 2, 4) == 240 + 40 + 16 + 4


def test_terms_of_splits_the_hand_off_and_the_tokens_at_their_senders(model, step) -> None:
    """send: the hand-off's "pp send" phase, recv the rest of it; token_out: the tokens' "pp tokens out" (a
    posted send: 0 ns here)."""
    s = step({}, decode(model), pp=2)
    by = {p.name: r for p, r in zip(s.pieces, s.results["fast"])}
    got = terms_of(by)
    hand, tok = by["hand-off"], by["token"]
    assert 0 < got["send"] < hand.latency_ns and got["send"] + got["recv"] == hand.latency_ns
    assert got["send"] == hand.phase_ns["pp send"] and got["token_out"] == tok.phase_ns["pp tokens out"]
    assert 0 <= got["token_out"] < tok.latency_ns == got["token"]
    assert (got["layer"], got["head"]) == (by["layer"].latency_ns, by["head"].latency_ns)
    assert terms_of(by, "hi_ns")["recv"] == hand.hi_ns - got["send"]
    assert s.pipeline["fast"].makespan_ns == schedule(got, 2, 2, 1).makespan_ns


def naive_rounds(tm: dict[str, float], S: int, M: int, L: int, rounds: int) -> dict:
    """The pipeline as a plain event loop: each stage a server taking its micro-batches in order (round, then
    micro-batch); a micro-batch arrives at stage s > 0 ``send`` after stage s - 1 ends it, at stage 0 of the
    next round ``token`` after the last stage ends it; a stage works ``recv`` (s > 0) + L x ``layer`` (+ ``head``
    on the last) and is free again ``send`` (``token_out`` on the last) after.  Returns (r, j, s) -> (begin,
    end)."""
    work = [(tm["recv"] if s else 0.0) + L * tm["layer"] + (tm["head"] if s == S - 1 else 0.0) for s in range(S)]
    out = [tm["send"] if s < S - 1 else tm["token_out"] for s in range(S)]
    order = [(r, j) for r in range(rounds) for j in range(M)]
    arrived: dict = {}
    nxt, idle = [0] * S, [True] * S
    got: dict = {}
    events = [(0.0, 0, j, 0) for j in range(M)]          # (time, stage, micro-batch, round): an arrival
    frees: list = []                                     # (time, stage)
    ends: list = []                                      # (time, stage, micro-batch, round)
    heapq.heapify(events)
    while events or frees or ends:
        now = min(q[0][0] for q in (events, frees, ends) if q)
        while events and events[0][0] == now:
            _, s, j, r = heapq.heappop(events)
            arrived[(r, j, s)] = now
        while ends and ends[0][0] == now:
            _, s, j, r = heapq.heappop(ends)
            got[(r, j, s)] = (got[(r, j, s)][0], now)
            if s < S - 1:
                heapq.heappush(events, (now + tm["send"], s + 1, j, r))
            elif r + 1 < rounds:
                heapq.heappush(events, (now + tm["token"], 0, j, r + 1))
            heapq.heappush(frees, (now + out[s], s))
        while frees and frees[0][0] == now:
            idle[heapq.heappop(frees)[1]] = True
        for s in range(S):
            if idle[s] and nxt[s] < len(order) and (*order[nxt[s]], s) in arrived:
                r, j = order[nxt[s]]
                idle[s], nxt[s] = False, nxt[s] + 1
                got[(r, j, s)] = (now, None)
                heapq.heappush(ends, (now + work[s], s, j, r))
    return got


def rel_eq(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) + 1e-12


TERM = st.one_of(st.just(0.0), st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False))


@st.composite
def pipelines(draw):
    tm = {k: draw(TERM) for k in TERMS}
    tm["token_out"] = min(tm["token_out"], tm["token"])   # the tokens' sender side is part of their trip
    return tm, draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 3))


@settings(max_examples=300, deadline=None)
@given(pipelines())
def test_schedule_is_the_event_loop(case) -> None:
    """The recurrence's makespan, period and stage rows are the plain event loop's, on random terms."""
    tm, S, M, L = case
    got = schedule(tm, S, M, L)
    one, two = naive_rounds(tm, S, M, L, 1), naive_rounds(tm, S, M, L, 2)
    makespan = max(e for _, e in one.values())
    assert rel_eq(got.makespan_ns, makespan)
    assert rel_eq(got.period_ns, max(e for _, e in two.values()) - makespan)
    for s, row in enumerate(got.stages):
        mine = [one[(0, j, s)] for j in range(M)]
        assert rel_eq(row["start_ns"], mine[0][0]) and rel_eq(row["end_ns"], mine[-1][1])
        assert rel_eq(row["busy_ns"], sum(e - b for b, e in mine))
        assert rel_eq(row["idle_ns"], makespan - row["busy_ns"])


@settings(max_examples=300, deadline=None)
@given(pipelines(), st.sampled_from(TERMS), st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False))
def test_schedule_invariants(case, grown: str, delta: float) -> None:
    """The critical path's terms sum to the makespan; the makespan does not shrink as any term grows; the period
    is at least the last stage's work and sender side per micro-batch, M (recv + L layer + head + token_out),
    and at most a round plus the tokens' trip (round two, shifted by that, meets every constraint)."""
    tm, S, M, L = case
    got = schedule(tm, S, M, L)
    assert rel_eq(sum(got.on_path.values()), got.makespan_ns)
    assert set(got.on_path) == set(TERMS) and min(got.on_path.values()) >= 0
    more = dict(tm, **{grown: tm[grown] + delta})
    if grown == "token":
        more["token_out"] = tm["token_out"]
    assert got.makespan_ns <= schedule(more, S, M, L).makespan_ns * (1 + 1e-12) + 1e-12
    last = (tm["recv"] if S > 1 else 0.0) + L * tm["layer"] + tm["head"] + tm["token_out"]
    slack = 1e-9 * (got.makespan_ns + got.period_ns) + 1e-12
    assert M * last - slack <= got.period_ns <= got.makespan_ns + tm["token"] + slack


# -- split: the degrees against the tray and the users -------------------------------------------------------------
@pytest.mark.parametrize("pp,dp,mb,users,fragment", [
    (3, 1, None, 4, "--pp 3 x --dp 1 = 3 groups: 3 does not divide the tray's 2 SIPs, nor split each SIP's 4 rows"),
    (3, 2, None, 6, "--pp 3 x --dp 2 = 6 groups: 6 does not divide the tray's 2 SIPs, nor split each SIP's 4 rows"),
    (16, 1, None, 16, "--pp 16 x --dp 1 = 16 groups: 16 does not divide the tray's 2 SIPs, nor split"),
    (1, 2, None, 3, "--dp 2: the step's 3 users (--batch) do not divide over 2 replicas"),
    (2, 1, 3, 4, "--micro-batches 3: a replica's 4 users do not divide into 3 micro-batches"),
    (2, 1, 8, 4, "--micro-batches 8: a replica's 4 users do not divide into 8 micro-batches"),
    (1, 1, 2, 4, "--micro-batches 2 needs a pipeline (--pp 2 or more)"),
    (1, 2, 2, 4, "--micro-batches 2 needs a pipeline (--pp 2 or more)"),
    (0, 1, None, 4, "--pp must be a positive integer (got 0)"),
    (-2, 1, None, 4, "--pp must be a positive integer (got -2)"),
    (2.0, 1, None, 4, "--pp must be a positive integer (got 2.0)"),
    (True, 1, None, 4, "--pp must be a positive integer (got True)"),
    ("2", 1, None, 4, "--pp must be a positive integer (got '2')"),
    (1, 0, None, 4, "--dp must be a positive integer (got 0)"),
    (2, 1, 0, 4, "--micro-batches must be a positive integer (got 0)"),
    (2, 1, None, None, "--pp, --dp and --micro-batches split a transformer's step; this model has none")])
def test_split_refuses(pp, dp, mb, users, fragment: str) -> None:
    t, _ = topo({})
    with pytest.raises(KbfastError) as err:
        split(t, pp, dp, mb, users)
    assert fragment in str(err.value)


@pytest.mark.parametrize("pp,dp,users,want", [
    (None, None, 4, 1), (1, 4, 8, 1), (2, 1, 4, 2), (2, 1, 1, 1), (2, 1, 3, 1), (2, 2, 2, 1), (2, 2, 12, 2),
    (4, 1, 6, 3), (4, 1, 8, 4), (4, 1, 2, 2), (4, 1, 5, 1), (4, 1, 9, 3)])
def test_default_micro_batches(pp, dp, users: int, want: int) -> None:
    """The largest divisor of a replica's users up to pp (1 without a pipeline); the groups' SIPs."""
    t, _ = topo({"sips.count": 8})
    got = split(t, pp, dp, None, users)
    assert got == Parallel(pp or 1, dp or 1, want, 8 // ((pp or 1) * (dp or 1)))
    per = users // (dp or 1)
    assert per % want == 0 and not any(per % m == 0 for m in range(want + 1, min(pp or 1, per) + 1))


def test_plan_step_refuses(model) -> None:
    """pp on a model without a step shape (the TP MLP); --layers with a pipeline (all of them are accepted);
    a pipeline whose stages do not divide the layers."""
    t, _ = topo({})
    with pytest.raises(KbfastError, match=r"--pp 2: applies to transformer models only; tp_mlp is of kind mlp"):
        plan_step(t, load_model("tp_mlp"), pp=2)
    with pytest.raises(KbfastError, match=r"--dp 1: applies to transformer models only"):
        plan_step(t, load_model("tp_mlp"), dp=1)
    with pytest.raises(KbfastError, match=r"--layers 1 with --pp 2: a pipeline runs every layer, 1 per stage"):
        plan_step(t, model, decode(model), "tp_cubes", layers=1, pp=2)
    assert plan_step(t, model, decode(model), "tp_cubes", layers=2, pp=2).parallel.pp == 2
    t3, _ = topo({"sips.count": 3})
    with pytest.raises(KbfastError, match=r"--pp 3: tiny's 2 layers do not divide into 3 stages"):
        plan_step(t3, model, decode(model), "tp_cubes", pp=3)


# -- placement -------------------------------------------------------------------------------------------------------
def test_a_sips_nodes_are_a_block() -> None:
    """What placing by whole SIPs rests on: the 1-SIP tray's nodes are the tray's of the same ids (the switch and
    SIP 0), and each SIP 0 node's id plus nodes_per_sip is the same node of SIP 1."""
    t, _ = topo({})
    small = sub_tables(t, Parallel(sips=1))
    per = t.layout.nodes_per_sip
    assert small.layout.nodes_per_sip == per and small.layout.n_sips == 1
    names = node_names(small, np.arange(small.n_nodes))
    assert node_names(t, np.arange(small.n_nodes)) == names
    sip0 = np.array([i for i, n in enumerate(names) if n.startswith("sip0.")])
    assert len(sip0) == per
    assert node_names(t, sip0 + per) == [re.sub(r"^sip0\.", "sip1.", names[i]) for i in sip0]


def test_replicas_are_shifted_by_whole_sips(model) -> None:
    """dp=2 on 2 SIPs: each piece is the 1-SIP tray's piece of half the users on SIP 0, repeated on SIP 1 (nodes
    one SIP's block further, peers one replica's ranks further, the same roles), each rank ending with its own
    replica's contributions; MACs twice one replica's."""
    t, _ = topo({})
    t1, _ = topo(ONE)
    placed = compile_model(t, model, decode(model), "tp_cubes", dp=2)
    alone = compile_model(t1, model, decode(model, 2), "tp_cubes")
    assert [p.name for p in placed] == [p.name for p in alone] == ["layer", "head"]
    for p, a in zip(placed, alone):
        R = len(a.nodes)
        assert len(p.nodes) == 2 * R and p.labels == a.labels
        np.testing.assert_array_equal(p.nodes[:R], a.nodes)
        np.testing.assert_array_equal(p.nodes[R:], a.nodes + t.layout.nodes_per_sip)
        assert all(n.startswith("sip1.") for n in node_names(t, p.nodes[R:]))
        np.testing.assert_array_equal(p.peer[:R], a.peer)
        np.testing.assert_array_equal(p.peer[R:], np.where(a.peer >= 0, a.peer + R, -1))
        np.testing.assert_array_equal(p.roles, np.tile(a.roles, (2, 1)))
        np.testing.assert_array_equal(p.groups, [[0, R]] * R + [[R, 2 * R]] * R)
        assert p.macs == 2 * a.macs


def test_pipeline_pieces_sit_on_their_stages(model) -> None:
    """pp=2, dp=2 on 4 SIPs: replica k's stage s on SIP 2k + s; the layer on stages 0, the head on the last, the
    hand-off from stage 0 to 1 (each receiver ends with every sender's part, each sender with its own), the
    tokens from the last stage to stage 0 (each receiver with its sender's)."""
    t, _ = topo(FOUR)
    pieces = {p.name: p for p in compile_model(t, model, decode(model), "tp_cubes", pp=2, dp=2)}
    assert list(pieces) == ["layer", "head", "hand-off", "token"]

    def sips(p):
        return [n.split(".")[0] for n in node_names(t, p.nodes)]

    R = len(pieces["layer"].nodes) // 2
    assert sips(pieces["layer"]) == ["sip0"] * R + ["sip2"] * R
    assert sips(pieces["head"]) == ["sip1"] * R + ["sip3"] * R
    assert sips(pieces["hand-off"]) == ["sip0"] * R + ["sip1"] * R + ["sip2"] * R + ["sip3"] * R
    assert sips(pieces["token"]) == ["sip1"] * R + ["sip0"] * R + ["sip3"] * R + ["sip2"] * R
    i = np.arange(R)
    own = np.stack([i, i + 1], axis=1)
    for k in range(2):
        np.testing.assert_array_equal(pieces["hand-off"].groups[2 * k * R:(2 * k + 1) * R], own + 2 * k * R)
        np.testing.assert_array_equal(pieces["hand-off"].groups[(2 * k + 1) * R:(2 * k + 2) * R],
                                      [[2 * k * R, (2 * k + 1) * R]] * R)
        np.testing.assert_array_equal(pieces["token"].groups[2 * k * R:(2 * k + 2) * R],
                                      np.concatenate([own, own]) + 2 * k * R)


SPLITS = [{"pp": 2}, {"dp": 2}, {"pp": 2, "micro_batches": 1}]


@pytest.mark.parametrize("options", SPLITS)
def test_the_split_step_does_the_same_work(model, step, options: dict) -> None:
    """A step's useful MACs do not depend on how the tray splits (same model, same users)."""
    whole = step({}, decode(model)).macs()
    assert step({}, decode(model), **options).macs() == whole > 0


@pytest.mark.parametrize("options", SPLITS)
def test_the_split_prefill_does_the_same_work(model, step, options: dict) -> None:
    assert step({}, prefill(model), **options).macs() == step({}, prefill(model)).macs()


def test_groups_of_cube_rows_sit_on_their_rows(model) -> None:
    """pp=4 on 2 SIPs of 4 x 4 cubes: groups of 2 rows of cubes, stage s on SIP s // 2, rows 2 (s % 2) and up;
    every PE of a group's tray is the same PE of the same cube there (names), and the layer's pieces of the
    stages are those of a one-SIP tray of 2 rows."""
    t, _ = topo({})
    par = split(t, 4, 1, None, 4)
    assert (par.sips, par.rows, par.group_text()) == (1, 2, "2 cube rows")
    small = sub_tables(t, par)
    assert (small.layout.n_sips, small.layout.cube_w, small.layout.cube_h) == (1, 4, 2)
    pe = np.array([i for i, n in enumerate(node_names(small, np.arange(small.n_nodes))) if n.endswith(".pe_dma")])
    cube = lambda name: int(name.split(".")[1][4:])          # noqa: E731  sipS.cubeC.peP.pe_dma -> C
    for stage in range(4):
        sip, row0 = par.where(t, 0, stage)
        assert (sip, row0) == (stage // 2, 2 * (stage % 2))
        names = node_names(t, nodes_at(t, small, pe, par, 0, stage))
        want = node_names(small, pe)
        assert [n.split(".")[0] for n in names] == [f"sip{sip}"] * len(pe)
        assert [cube(n) for n in names] == [cube(w) + 4 * row0 for w in want]
        assert [n.split(".", 2)[2] for n in names] == [w.split(".", 2)[2] for w in want]
    m = model.model_copy(update={"layers": 4, "name": "tiny4"})
    pieces = {p.name: p for p in compile_model(t, m, decode(m), "tp_cubes", pp=4, dp=1)}
    assert len(pieces["layer"].nodes) == 8 and len(pieces["hand-off"].nodes) == 16


def test_cube_row_groups_refused_when_rows_do_not_split(model) -> None:
    t, _ = topo({})
    with pytest.raises(KbfastError, match=r"= 6 groups: 6 does not divide the tray's 2 SIPs, nor split each SIP's "
                                           r"4 rows of cubes evenly"):
        split(t, 6, 1, None, 6)


@pytest.mark.parametrize("options", [{"pp": 4}, {"pp": 2, "dp": 2}, {"dp": 4}])
def test_cube_row_groups_match_exact(model, step, options: dict) -> None:
    """Stages and replicas on rows of cubes (4 groups on 2 SIPs): fast within 5 % of exact, bounds holding."""
    m = model.model_copy(update={"layers": 4, "name": "tiny4"})
    s = step({}, decode(m), of=m, **options)
    f, e = s.latency_ns("fast"), s.latency_ns("exact")
    assert abs(f / e - 1) <= 0.05, (f, e)
    lo, hi = s.bounds_ns()
    assert le(lo, e) and le(e, hi)
    assert abs(s.period_ns("fast") / s.period_ns("exact") - 1) <= 0.05


def test_sub_tables_keep_whole_rows_of_a_grid() -> None:
    """A 2 x 2 torus of SIPs: a group of 2 is one row of it (torus_2d 2 x 1), of 1 a ring; the whole tray is
    itself.  torus16 (4 x 4): 8 and 4 SIPs keep the width 4, 2 fall back to a ring."""
    t, _ = topo({**FOUR, "sips.topology": "torus_2d", "sips.w": 2, "sips.h": 2})
    assert sub_tables(t, Parallel(sips=4)) is t
    got = {n: sub_tables(t, Parallel(sips=n)).spec.sips for n in (2, 1)}
    assert (got[2].count, got[2].topology, got[2].w, got[2].h) == (2, "torus_2d", 2, 1)
    assert (got[1].count, got[1].topology, got[1].w, got[1].h) == (1, "ring_1d", None, None)
    assert sub_tables(t, Parallel(sips=2)).layout.n_sips == 2
    t16, _ = topo({}, "torus16")
    got = {n: sub_tables(t16, Parallel(sips=n)).spec.sips for n in (8, 4, 2)}
    assert [(s.topology, s.w, s.h) for s in got.values()] == [("torus_2d", 4, 2), ("torus_2d", 4, 1),
                                                              ("ring_1d", None, None)]
    assert sub_tables(t16, Parallel(sips=4)) is sub_tables(t16, Parallel(sips=4))                 # built once


# -- the symbolic check's groups -----------------------------------------------------------------------------------
def _pair_round(tl: Tl):
    """Each rank sends its contribution east and adds what comes from the west."""
    yield tl.send("E", tl.contribution())
    return tl.add(tl.contribution(), (yield tl.recv("W")))


def _own(tl: Tl):
    """Each rank keeps its own contribution."""
    yield tl.phase("own")
    return tl.contribution()


PAIRS = (["E", "W"], np.array([[1, 1], [0, 0], [3, 3], [2, 2]]))    # two rings of two: ranks 0-1 and 2-3
PAIR_GROUPS = np.array([[0, 2], [0, 2], [2, 4], [2, 4]])


@pytest.mark.parametrize("kernel,wiring,groups,message", [
    (_pair_round, PAIRS, PAIR_GROUPS, None),
    (_own, PAIRS, np.array([[r, r + 1] for r in range(4)]), None),
    (_pair_round, PAIRS, None, "rank 0 ends without the contributions of ranks [2, 3]"),
    (_pair_round, PAIRS, np.array([[0, 4]] * 4),
     "rank 0 ends not with exactly its group's contributions (ranks 0 to 3): it differs in ranks [2, 3]"),
    (_pair_round, ring_peers(4), PAIR_GROUPS,
     "rank 0 ends not with exactly its group's contributions (ranks 0 to 1): it differs in ranks [1, 3]"),
    (_pair_round, PAIRS, np.array([[0, 2], [0, 2], [2, 4], [2, 3]]),
     "rank 3 ends not with exactly its group's contributions (ranks 2 to 2): it differs in ranks [3]"),
    (_own, PAIRS, np.array([[0, 1]] * 4),
     "rank 1 ends not with exactly its group's contributions (ranks 0 to 0): it differs in ranks [0, 1]")])
def test_ranks_end_with_their_groups_contributions(tables, router, kernel, wiring, groups, message) -> None:
    """run_traced's ``groups``: each rank must end with exactly its range's contributions, no more, no fewer;
    the refusal names the rank, its range and the ranks it differs in.  The checked run is cached with its
    groups: a passing run does not hide a failing one."""
    nodes = np.array([pe_block(tables, 0, 0, p) for p in range(4)])

    def go(g, cache=True):
        b = ProgramBuilder(tables, router, name="groups")
        run_traced(b, b.pe_agents(nodes), wire(*wiring), kernel, 64, np.zeros((4, 1), np.int64), groups=g,
                   cache=cache)
        return b.build()

    if message is None:
        assert go(groups).n_ops > 0
        return
    if wiring is PAIRS:
        go(PAIR_GROUPS if kernel is _pair_round else np.array([[r, r + 1] for r in range(4)]))   # cached: it passes
    for cache in (True, False):
        with pytest.raises(ScheduleError) as err:
            go(groups, cache)
        assert str(err.value) == message


# -- the CLI ---------------------------------------------------------------------------------------------------------
def run(runner, *args: str):
    return runner.invoke(app, ["run", *args], catch_exceptions=False)


def test_cli_prints_the_pipeline(terminal, tiny) -> None:
    """``--pp 2``: the stage table with both stages, the period among steps; every line within 80 columns."""
    res = run(terminal(80), "model", tiny, "--layout", "tp_cubes", "--batch", "4", "--kv-len", "256", "--pp", "2")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    text = flat(res.stdout)
    assert "layout tp_cubes pp2 dp1 mb2" in text
    assert "pipeline: 2 stages of 1 SIP, 2 micro-batches, 1 replica" in text
    assert f"the step's totals: {WHOLE}" in text
    assert re.search(r"^period among steps\s+[\d.]+ µs$", res.stdout, re.M)
    head = next(i for i, line in enumerate(lines) if line.startswith("stage  starts"))
    rows = [line.split()[0] for line in lines[head + 2:head + 4]]
    assert rows == ["0", "1"] and all(re.fullmatch(r"\d \s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+ %", line)
                                      for line in lines[head + 2:head + 4])


def test_cli_json_has_the_pipeline(terminal, tiny) -> None:
    res = run(terminal(200), "model", tiny, "--layout", "tp_cubes", "--batch", "4", "--kv-len", "256", "--pp", "2",
              "--dp", "1", "--format", "json")
    assert res.exit_code == 0, res.stderr
    rep = json.loads(res.stdout)
    pl = rep["pipeline"]
    assert (pl["stages"], pl["replicas"], pl["micro_batches"], pl["stage_is"], pl["method"]) == (2, 1, 2, "1 SIP",
                                                                                                WHOLE)
    assert len(pl["stage_rows"]) == 2 and set(pl["on_path_ns"]) == set(TERMS)
    assert math.isclose(sum(pl["on_path_ns"].values()), pl["composed_makespan_ns"], rel_tol=1e-9)
    assert rep["step"]["period_ns"] > 0 and rep["inputs"]["layout"] == "tp_cubes pp2 dp1 mb2"
    assert rep["inputs"]["working_pes"] == 32


def _no_compiling(*kernels: str) -> None:
    raise AssertionError(f"a first run would compile {kernels} before the refusal")


@pytest.mark.parametrize("args,fragment", [
    (["--pp", "0"], "--pp must be a positive integer (got 0)"),
    (["--dp", "-1"], "--dp must be a positive integer (got -1)"),
    (["--pp", "3"], "--pp 3 x --dp 1 = 3 groups: 3 does not divide the tray's 2 SIPs"),
    (["--pp", "3", "--set", "sips.count=3"], "--pp 3: tiny's 2 layers do not divide into 3 stages"),
    (["--dp", "2", "--batch", "3"], "--dp 2: the step's 3 users (--batch) do not divide over 2 replicas"),
    (["--micro-batches", "2"], "--micro-batches 2 needs a pipeline (--pp 2 or more)"),
    (["--pp", "2", "--micro-batches", "3", "--batch", "4"], "a replica's 4 users do not divide into 3"),
    (["--layers", "1", "--pp", "2"], "--layers 1 with --pp 2: a pipeline runs every layer")])
def test_cli_refuses_bad_degrees_before_compiling(terminal, monkeypatch, tiny, args: list[str],
                                                  fragment: str) -> None:
    monkeypatch.setattr(cli_run, "first_run", _no_compiling)
    refused(run(terminal(80), "model", tiny, "--layout", "tp_cubes", *args), fragment)


def test_cli_refuses_pp_on_the_tp_mlp(terminal, monkeypatch) -> None:
    monkeypatch.setattr(cli_run, "first_run", _no_compiling)
    refused(run(terminal(80), "model", "tp_mlp", "--pp", "2"), "--pp 2: applies to transformer models only",
            "hint: drop --pp")


# -- data parallelism on separate SIPs ------------------------------------------------------------------------------
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_replicas_on_separate_sips_cost_one_replica(model, step, phase: str) -> None:
    """dp=2 on 2 SIPs, a replica per SIP: the step takes what one replica's users take on a 1-SIP tray (within
    1 %), in both modes: the replicas share no link (the SIPs meet only at the switch, and a 1-SIP group sends
    nothing through it)."""
    shape, half = (decode(model), decode(model, 2)) if phase == "decode" else (prefill(model), prefill(model, 1))
    both, alone = step({}, shape, dp=2), step(ONE, half)
    for mode in ("fast", "exact"):
        assert both.latency_ns(mode) == pytest.approx(alone.latency_ns(mode), rel=0.01)


def test_replicas_all_reduce_is_remembered_apart_from_the_whole_trays(tiny):
    """Two replicas of 2 users on all 32 cubes and one tray of 2 users send the same message from the same PEs,
    but each replica all-reduces over its own 16: their all-reduces alone (and auto's choices) are remembered
    apart, so a step's figures do not depend on which ran first in the process."""
    from kbfast import Router, build_tables, load_system
    from kbfast.measure import model as mm
    t = build_tables(load_system("ahbm_2sip"))
    r = Router(t)
    m = load_model(tiny)

    def step(batch, dp):
        plan = mm.plan_step(t, m, shape_for(m, "decode", batch, None, 64), "tp_cubes", None, "hybrid", "auto", dp=dp)
        return mm.run_step(t, r, plan, bounds=False)

    mm._forget()
    alone = step(4, 2)
    mm._forget()
    step(2, 1)
    after = step(4, 2)
    assert after.latency_ns() == alone.latency_ns() and after.choices == alone.choices
    one, two = (step(b, dp).pieces[0] for b, dp in ((2, 1), (4, 2)))
    launch = mm._launch_ns(t, r, one.nodes)
    assert mm.allreduce_alone_ns(t, r, one, "lrab", "hybrid", launch) != \
        mm.allreduce_alone_ns(t, r, two, "lrab", "hybrid", launch)


def test_all_reduce_times_outlive_more_pieces_than_the_piece_cache(tiny, monkeypatch):
    """A search comes back to a system, its ranks and a message after many other candidates: an all-reduce timed
    alone is still remembered after more than ``PIECE_CACHE`` other messages were timed (a time is a few numbers,
    a piece's result is not), and is not built again."""
    from kbfast import Router, build_tables, load_system
    from kbfast.measure import model as mm
    from kbfast.workloads.model import with_fields
    t = build_tables(load_system("ahbm_2sip"))
    r = Router(t)
    m = load_model(tiny)
    plan = mm.plan_step(t, m, shape_for(m, "decode", 2, None, 64), "tp_cubes", None, "hybrid", "lrab")
    piece = plan.pieces[0]
    launch = mm._launch_ns(t, r, piece.nodes)
    builds, real = [], mm.build_piece
    monkeypatch.setattr(mm, "build_piece", lambda *a, **k: builds.append(1) or real(*a, **k))
    mm._forget()
    first = mm.allreduce_alone_ns(t, r, piece, "lrab", "hybrid", launch)
    nbytes = mm.allreduce_message(piece)[0]
    for n in range(mm.PIECE_CACHE + 1):             # other messages
        mm.allreduce_alone_ns(t, r, with_fields(piece, allreduce_bytes=nbytes + 16 * (n + 1)), "lrab", "hybrid",
                              launch)
    n_built = len(builds)
    assert mm.allreduce_alone_ns(t, r, piece, "lrab", "hybrid", launch) == first and len(builds) == n_built
