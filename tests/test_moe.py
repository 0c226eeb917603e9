"""The mixture-of-experts layer (kbfast.workloads.moe): routing by load, the compiled layer, its options and its
refusals, fast against exact, and ``kbfast run model --ep --hot-expert``.

* parity: the tiny mixture of experts (conftest's TINY_MOE: 2 layers, hidden 256, 8 SwiGLU experts of 256,
  top-2) on tp_cubes, fast within 5 % of exact with lo <= exact <= hi, decode (uniform, a hot expert, sequence
  parallel, ``--ep 4``, a pipeline) and prefill; the layer's stages in order;
* ``expert_loads`` against hand cases (below) and, on drawn cases, against a plain loop that hands the slots out
  one by one in the documented order, with the module docstring's promises;
* the compiled layer: useful MACs by hand (whatever ``--ep``, layout or split), the per-block GEMMs, the
  all-to-alls' message sizes, the weights a PE holds;
* the model files' checks and the bundled models' sizes; the options' refusals (plan_step and the CLI);
* the symbolic check with uneven blocks: every rank's own generator, run in a plain loop, ends with every
  contribution and sends what the traced Program sends;
* ``kbfast run model`` at 80 columns; Mixtral-8x7B's experts stage against its weights' streaming (slow).

Hand cases of ``expert_loads`` (the module docstring's rule: the hot expert, expert 0, takes ceil(hot x slots), at
most ``tokens``; the other slots go one by one to the others in the order local expert i of block b, i then b):

* 4 tokens, top-2, 8 experts, ep 8: 8 slots, one each: [1] x 8.
* the same with hot 0.5: expert 0 takes ceil(0.5 x 8) = 4; the others' order 1, 2, ..., 7 takes the 4 left:
  [4, 1, 1, 1, 1, 0, 0, 0].
* 4 tokens, top-2, 8 experts, ep 2 (4 a block), hot 0.3: ceil(2.4) = 3; the others' order 4, 1, 5, 2, 6, 3, 7
  takes 5: [3, 1, 1, 0, 1, 1, 1, 0], blocks [5, 3].
* 3 tokens, top-2, 8 experts, ep 4 (2 a block), hot 0.4: ceil(2.4) = 3; order 2, 4, 6, 1, 3, 5, 7 takes 3:
  [3, 0, 1, 0, 1, 0, 1, 0], blocks [3, 1, 1, 1].
* 5 tokens, top-2, 8 experts, ep 4, even: 10 slots; order 0, 2, 4, 6, 1, 3, 5, 7: one each, the 2 left to 0 and
  2: [2, 1, 2, 1, 1, 1, 1, 1], blocks [3, 3, 2, 2].
* 4 tokens, top-2, 4 experts, ep 2, hot 0.5 (= 1 / top_k: every token): 4 = tokens; order 2, 1, 3 takes 4:
  [4, 1, 2, 1].
* 1 token, top-2, 8 experts, ep 8, even: [1, 1, 0, 0, 0, 0, 0, 0].
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict, deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.cli.main import app
from kbfast.config.models import load_model
from kbfast.errors import ConfigError, KbfastError
from kbfast.ir import Op
from kbfast.measure.model import StepResult, plan_step, run_step
from kbfast.workloads import moe
from kbfast.workloads.commands import TileLowering
from kbfast.workloads.install import wire
from kbfast.workloads.kernels import Tl
from kbfast.workloads.model import LAYER_ALIGN, build_piece, compile_model, shape_for
import kbfast.cli.run as cli_run
from conftest import TINY_MOE, le, refused, topo

MiB = 1 << 20
FOUR = {"sips.count": 4}
QUAD = {"sips.count": 1, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2}   # tp_pes: 4 cubes of 8 PEs, 32 PEs


@pytest.fixture(scope="module")
def model(tiny_moe):
    return load_model(tiny_moe)


@pytest.fixture(scope="module")
def tray():
    """ahbm_2sip: 2 SIPs of 16 cubes, 8 PEs a cube (tp_cubes: 32 working PEs, tp_pes: 256)."""
    return topo({})


def decode(m, batch: int = 4):
    return shape_for(m, "decode", batch, kv_len=256)


def prefill(m, batch: int = 1):
    return shape_for(m, "prefill", batch, seq=64)


_STEPS: dict = {}


@pytest.fixture(scope="module")
def step(model):
    """``step(shape, overrides, layout, **options)`` -> the tiny mixture of experts' step, fast and exact, on
    ahbm_2sip with ``overrides`` (default: none; layout tp_cubes), run once per module."""

    def at(shape, overrides: dict | None = None, layout: str = "tp_cubes", **options):
        overrides = overrides or {}
        key = (shape, tuple(sorted(overrides.items())), layout, tuple(sorted(options.items())))
        if key not in _STEPS:
            t, r = topo(overrides)
            _STEPS[key] = run_step(t, r, plan_step(t, model, shape, layout, **options), ("fast", "exact"))
        return _STEPS[key]

    return at


# -- the hand formulas ----------------------------------------------------------------------------------------
def step_macs(m, shape) -> int:
    """A step's useful MACs by hand: per layer QKV (T x hidden x qkv_cols), O (T x heads d x hidden), the attention
    (per user and head a score and a PV GEMM over the KV length: decode kv_len x d each; prefill seq^2 d each,
    no causal skipping), each routed slot's expert FFN (3 x hidden x ffn under SwiGLU) and the router
    (T x hidden x experts); then the LM head (batch x hidden x vocab)."""
    T, hid, d = shape.tokens, m.hidden, m.head_dim
    attn = shape.batch * m.heads * 2 * shape.seq * shape.kv_len * d
    experts = T * m.top_k * 3 * hid * m.ffn + T * hid * m.experts
    return m.layers * (T * hid * m.qkv_cols + T * m.heads * d * hid + attn + experts) + shape.batch * hid * m.vocab


def planned_macs(plan) -> int:
    """The useful MACs of a compiled step (StepResult.macs: each piece's, times how often the step runs it)."""
    return StepResult(plan.model, plan.shape, plan.layout, plan.layers, plan.pieces, {}, "fast",
                      parallel=plan.parallel).macs()


def aligned(nbytes: int) -> int:
    """A layer's weights start on a MiB (kbfast.workloads.model.LAYER_ALIGN)."""
    return -(-nbytes // LAYER_ALIGN) * LAYER_ALIGN


# -- parity -----------------------------------------------------------------------------------------------------
CASES = {
    "decode": ("decode", {}),
    "decode, hot expert 0.5": ("decode", {"hot_expert": 0.5}),
    "decode, sequence parallel hier2d": ("decode", {"sequence_parallel": True, "collective": "hier2d"}),
    "decode, ep 4": ("decode", {"ep": 4}),
    "prefill, batch 1, seq 64": ("prefill", {}),
    "decode, pp 2": ("decode", {"pp": 2}),
    "decode, tp_pes on 4 cubes, ep 2, hot expert 0.5": ("decode", {"overrides": QUAD, "layout": "tp_pes", "ep": 2,
                                                                  "hot_expert": 0.5}),
}
SLOW_CASES = {
    "decode, ep 1 (one block of every PE)": ("decode", {"ep": 1}),
    "decode, ep 2, hot expert 0.3": ("decode", {"ep": 2, "hot_expert": 0.3}),
    "decode, sequence parallel, hot expert 0.5": ("decode", {"sequence_parallel": True, "hot_expert": 0.5}),
    "decode, sequence parallel ring_pipe": ("decode", {"sequence_parallel": True, "collective": "ring_pipe"}),
    "decode, overlap none, hot expert 0.25": ("decode", {"overlap": "none", "hot_expert": 0.25}),
    "decode, lrab": ("decode", {"collective": "lrab"}),
    "prefill, hot expert 0.5": ("prefill", {"hot_expert": 0.5}),
    "prefill, batch 2": ("prefill2", {}),
    "decode, dp 2, hot expert 0.5": ("decode", {"dp": 2, "hot_expert": 0.5}),
    "decode, pp 2, hot expert 0.5": ("decode", {"pp": 2, "hot_expert": 0.5}),
    "decode, batch 3, ep 4, hot expert 0.4": ("decode3", {"ep": 4, "hot_expert": 0.4}),
    "decode, batch 1": ("decode1", {}),
    "decode, tp_pes on 4 cubes": ("decode", {"overrides": QUAD, "layout": "tp_pes"}),
    "decode, tp_pes on 4 cubes, ep 1": ("decode", {"overrides": QUAD, "layout": "tp_pes", "ep": 1}),
}
SHAPES = {"decode": decode, "prefill": prefill, "prefill2": lambda m: prefill(m, 2),
          "decode3": lambda m: decode(m, 3), "decode1": lambda m: decode(m, 1)}


def _parity(model, step, shape_name: str, options: dict) -> None:
    shape = SHAPES[shape_name](model)
    s = step(shape, **options)
    fast, exact = s.latency_ns("fast"), s.latency_ns("exact")
    assert fast == pytest.approx(exact, rel=0.05), (fast, exact)
    lo, hi = s.bounds_ns()
    assert le(lo, exact) and le(exact, hi), (lo, exact, hi)
    assert s.macs() == step_macs(model, shape)


@pytest.mark.parametrize("case", list(CASES))
def test_fast_matches_exact_and_the_bounds_hold(model, step, case: str) -> None:
    """The tiny mixture of experts (tp_cubes, one case on tp_pes): fast within 5 % of exact, lo <= exact <= hi,
    the MACs by hand."""
    _parity(model, step, *CASES[case])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SLOW_CASES))
def test_fast_matches_exact_and_the_bounds_hold_more(model, step, case: str) -> None:
    _parity(model, step, *SLOW_CASES[case])


MOE_STAGES = ("router", "dispatch (all-to-all)", "experts", "combine (all-to-all)", "weighted sum")


@pytest.mark.parametrize("case", ["decode", "decode, hot expert 0.5", "decode, sequence parallel hier2d"])
@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_the_layer_runs_its_stages_in_order(model, step, case: str, mode: str) -> None:
    """The layer's FFN is the module docstring's table: router, dispatch, experts, combine, weighted sum and (not
    sequence parallel) the ffn all-gather, each ending after the one before, then the residual; no dense FFN
    stage."""
    shape_name, options = CASES[case]
    s = step(SHAPES[shape_name](model), **options)
    layer = next(r for p, r in zip(s.pieces, s.results[mode]) if p.name == "layer")
    ends = layer.phase_ns
    gather = [k for k in ends if k.startswith("ffn all-gather")]
    sp = options.get("sequence_parallel", False)
    assert len(gather) == (0 if sp else 1), list(ends)
    order = ("ffn norm",) + MOE_STAGES + tuple(gather)
    got = [ends[k] for k in order]
    assert all(a < b for a, b in zip(got, got[1:])), dict(zip(order, got))
    assert ends["residual"] >= got[-1]      # exact mode: the all-gather's prefetch may end with the residual
    assert not {"ffn up", "activation", "ffn down", "ffn all-reduce"} & set(ends)
    if sp:
        assert gather == [] and "ffn reduce-scatter (hier2d)" not in ends


# -- expert_loads ------------------------------------------------------------------------------------------------
HAND = [  # (tokens, top_k, experts, ep, hot) -> loads, block loads (module docstring)
    ((4, 2, 8, 8, None), [1] * 8, [1] * 8),
    ((4, 2, 8, 8, 0.5), [4, 1, 1, 1, 1, 0, 0, 0], [4, 1, 1, 1, 1, 0, 0, 0]),
    ((4, 2, 8, 2, 0.3), [3, 1, 1, 0, 1, 1, 1, 0], [5, 3]),
    ((3, 2, 8, 4, 0.4), [3, 0, 1, 0, 1, 0, 1, 0], [3, 1, 1, 1]),
    ((5, 2, 8, 4, None), [2, 1, 2, 1, 1, 1, 1, 1], [3, 3, 2, 2]),
    ((4, 2, 4, 2, 0.5), [4, 1, 2, 1], [5, 3]),
    ((1, 2, 8, 8, None), [1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]),
]


@pytest.mark.parametrize("args, loads, blocks", HAND)
def test_expert_loads_by_hand(args, loads, blocks) -> None:
    got = moe.expert_loads(*args)
    assert got.tolist() == loads
    assert moe.block_loads(got, args[3]).tolist() == blocks
    assert got.tolist() == naive_loads(*args)


def naive_loads(tokens: int, top_k: int, experts: int, ep: int, hot: float | None) -> list[int]:
    """The routing rule as a plain loop: the hot expert (expert 0) takes slots one by one while its share of the
    ``tokens x top_k`` slots is below ``hot`` (to 1e-9 of a slot) and it has fewer than ``tokens``; then every
    other slot goes to the next of the others in the order local expert i of block b, i then b, round and
    round."""
    slots, per_block = tokens * top_k, experts // ep
    loads = [0] * experts
    given_out = 0
    if hot is not None:
        while loads[0] < tokens and loads[0] < hot * slots - 1e-9:
            loads[0] += 1
            given_out += 1
    others = [b * per_block + i for i in range(per_block) for b in range(ep)]
    others = [e for e in others if hot is None or e != 0]
    k = 0
    while given_out < slots:
        loads[others[k % len(others)]] += 1
        given_out += 1
        k += 1
    return loads


@st.composite
def routing(draw):
    ep = draw(st.sampled_from([1, 2, 4, 8]))
    experts = ep * draw(st.integers(1, 4))
    top_k = draw(st.integers(1, experts))
    tokens = draw(st.integers(1, 64))
    hot = draw(st.none() | st.floats(1 / experts, 1 / top_k))
    return tokens, top_k, experts, ep, hot


@settings(max_examples=300, deadline=None)
@given(routing())
def test_expert_loads_keep_the_docstrings_promises(case) -> None:
    """Every slot routed once (tokens x top_k in all), no expert with more than one slot per token; the hot
    expert's share the least whole number of slots at or above ``hot`` (capped at every token), and no expert
    above it; the others within one slot of each other (even routing: every expert), so two blocks holding as
    many of them (even routing: any two; with a hot expert, any two but its own) differ by at most one slot per
    expert of a block; the plain loop's loads."""
    tokens, top_k, experts, ep, hot = case
    loads = moe.expert_loads(*case)
    slots, per_block = tokens * top_k, experts // ep
    assert loads.dtype == np.int64 and loads.shape == (experts,)
    assert loads.sum() == slots and loads.min() >= 0 and loads.max() <= tokens
    others = loads if hot is None else loads[1:]
    assert others.size == 0 or others.max() - others.min() <= 1
    if hot is not None:
        share = hot * slots
        assert loads[0] == tokens or (loads[0] >= share - 1e-9 and loads[0] - 1 < share - 1e-9)
        assert loads[0] == loads.max()
    blocks = moe.block_loads(loads, ep)
    assert blocks.tolist() == [int(loads[b * per_block:(b + 1) * per_block].sum()) for b in range(ep)]
    alike = blocks if hot is None else blocks[1:]          # blocks of as many of the others
    assert alike.size == 0 or alike.max() - alike.min() <= per_block
    assert loads.tolist() == naive_loads(*case)


@pytest.mark.parametrize("hot", [0.1, 0.124, 0.51, 0.6, 0.0, -0.25, 1.0, float("nan"), float("inf")])
def test_a_hot_share_outside_its_range_is_refused(hot: float) -> None:
    """From an even share (1 / experts = 0.125) to one slot per token (1 / top_k = 0.5), no further."""
    with pytest.raises(KbfastError, match=r"--hot-expert .*1/8 = 0\.125.*1/2 = 0\.5"):
        moe.expert_loads(4, 2, 8, 8, hot)


@pytest.mark.parametrize("experts, top_k, hot", [(8, 2, 1 / 8), (8, 2, 1 / 2), (9, 3, 1 / 3), (9, 3, 1 / 9),
                                                 (4, 4, 1 / 4), (1, 1, 1.0)])
def test_the_hot_shares_at_the_ends_of_the_range(experts: int, top_k: int, hot: float) -> None:
    """1 / top_k routes every token to the hot expert (1/3 x 3 slots a token is 0.999...: still every token);
    1 / experts gives it the even share, rounded up."""
    tokens = 7
    loads = moe.expert_loads(tokens, top_k, experts, 1, hot)
    want = tokens if hot == 1 / top_k else math.ceil(tokens * top_k / experts)
    assert loads[0] == want and loads.sum() == tokens * top_k


# -- the compiled layer ----------------------------------------------------------------------------------------
SPLITS = {
    "tp_cubes": ({}, "tp_cubes", {}),
    "tp_cubes, ep 1": ({}, "tp_cubes", {"ep": 1}),
    "tp_cubes, ep 2": ({}, "tp_cubes", {"ep": 2}),
    "tp_cubes, ep 4": ({}, "tp_cubes", {"ep": 4}),
    "tp_cubes, hot 0.5": ({}, "tp_cubes", {"hot_expert": 0.5}),
    "tp_cubes, sequence parallel": ({}, "tp_cubes", {"sequence_parallel": True}),
    "tp_pes": ({}, "tp_pes", {}),
    "tp_pes, ep 2, hot 0.3": ({}, "tp_pes", {"ep": 2, "hot_expert": 0.3}),
    "tp_cubes, pp 2": ({}, "tp_cubes", {"pp": 2}),
    "tp_cubes, dp 2": ({}, "tp_cubes", {"dp": 2}),
    "tp_cubes, pp 2 dp 2 on 4 SIPs": (FOUR, "tp_cubes", {"pp": 2, "dp": 2}),
    "tp_pes, pp 2, micro-batches 4": ({}, "tp_pes", {"pp": 2, "micro_batches": 4}),
}


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_the_useful_macs_do_not_depend_on_the_split(model, split: str, phase: str) -> None:
    """Each routed slot's expert FFN once (3 x hidden x ffn under SwiGLU) and the router once (tokens x hidden x
    experts), whatever ``--ep``, hot expert, layout, sequence parallelism or pipeline and data-parallel split."""
    overrides, layout, options = SPLITS[split]
    t, _ = topo(overrides)
    shape = decode(model) if phase == "decode" else prefill(model, 4)
    plan = plan_step(t, model, shape, layout, **options)
    assert planned_macs(plan) == step_macs(model, shape)


def layer_of(t, m, shape, layout: str = "tp_cubes", **options):
    """The compiled layer piece (no split), and its FFN's fields."""
    piece = compile_model(t, m, shape, layout, **options)[0]
    assert piece.name == "layer"
    return piece, piece.info["layer"]["moe"]


@pytest.mark.parametrize("batch, layout, ep, hot, sp", [
    (4, "tp_cubes", None, None, False), (4, "tp_cubes", None, 0.5, False), (3, "tp_cubes", 4, 0.4, False),
    (16, "tp_cubes", 2, 0.3, False), (4, "tp_cubes", 1, None, False), (8, "tp_cubes", 4, 0.25, True),
    (4, "tp_pes", None, None, False), (16, "tp_pes", 8, 0.5, False), (4, "tp_pes", 4, 0.2, False)])
def test_the_blocks_gemms_and_messages_follow_the_loads(model, tray, batch, layout, ep, hot, sp) -> None:
    """Per block, one (up, down, tokens) per local expert with tokens, in order, sized tokens x (2 ffn / u) x
    hidden and tokens x hidden x (ffn / u) on the expert's own weights; the router's GEMM T x experts x hidden
    (the PE's hidden / P under sequence parallelism); a PE sends each PE of block b its 1 / P of the block's
    slots, ``loads x hidden x elem / P`` bytes, and sums u x that over the blocks; the layer's MACs by hand."""
    t, _ = tray
    shape = decode(model, batch)
    piece, M = layer_of(t, model, shape, layout, ep=ep, hot_expert=hot, sequence_parallel=sp or None)
    P = len(piece.nodes)
    E, hid, elem = model.experts, model.hidden, t.spec.pe.elem_bytes
    ep = ep or math.gcd(E, P)
    u, per_block, T = P // ep, E // ep, shape.tokens
    loads = moe.expert_loads(T, model.top_k, E, ep, hot)
    assert (M["ep"], M["block_pes"], M["loads"]) == (ep, u, loads.tolist())
    assert M["ffn_cols"] == model.ffn // u

    def plan(c: int) -> tuple[int, int, int]:
        return piece.commands[c].plan.m, piece.commands[c].plan.n, piece.commands[c].plan.k

    router_k = hid // P if sp else hid
    assert plan(piece.info["layer"]["router"]) == (T, E, router_k)
    stride = piece.memory["weights"] // model.layers
    for b in range(ep):
        mine = loads[b * per_block:(b + 1) * per_block]
        assert [n for _, _, n in M["gemms"][b]] == [int(n) for n in mine if n]
        ups = []
        for (up, down, n), i in zip(M["gemms"][b], np.flatnonzero(mine)):
            assert plan(up) == (n, 2 * model.ffn // u, hid) and plan(down) == (n, hid, model.ffn // u)
            cu, cd = piece.commands[up], piece.commands[down]
            assert cd.b_addr == cu.b_addr + hid * 2 * model.ffn // u * elem     # down after the expert's up
            assert cd.b_addr + hid * model.ffn // u * elem <= stride             # within the layer's weights
            ups.append((int(i), cu.b_addr))
        addr = dict(ups)
        size = 3 * hid * model.ffn // u * elem
        assert all(addr[i] - addr[j] == (i - j) * size for i in addr for j in addr)   # each expert its own
    slices = [int(n) * hid * elem // P for n in moe.block_loads(loads, ep)]
    assert all(int(n) * hid * elem % P == 0 for n in loads)                 # the sizes divide: no rounding here
    assert M["slice_bytes"] == slices
    assert M["partial_elems"] * elem == u * sum(slices)
    assert (M["logit_elems"], M["logit_bytes"]) == (T * E, T * E * 4)
    assert M["router_in_bytes"] == T * router_k * elem
    attn = T * hid * model.qkv_cols + T * model.heads * model.head_dim * hid + \
        shape.batch * model.heads * 2 * shape.kv_len * model.head_dim
    assert piece.macs == attn + M["macs"] == attn + T * model.top_k * 3 * hid * model.ffn + T * hid * E


def test_a_block_without_tokens_runs_no_gemm_and_still_sends_its_counts(model, tray) -> None:
    """One token (2 slots on experts 0 and 1): six of the eight blocks get none; they run no expert GEMM, and
    every pair still exchanges a count (COUNT_BYTES) in each all-to-all."""
    t, _ = tray
    piece, M = layer_of(t, model, decode(model, 1))
    assert M["loads"] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert [len(g) for g in M["gemms"]] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert M["slice_bytes"][2:] == [0] * 6 and moe.COUNT_BYTES == 4


def mixtral_attention_per_pe(m, P: int) -> int:
    """Mixtral on tp_cubes (32 PEs, one a cube, 32 query heads): a PE holds one query head's Q and O columns and
    its KV head's K and V (each KV head on the 4 cubes of its query group)."""
    assert m.heads == P
    return m.hidden * 3 * m.head_dim + m.head_dim * m.hidden


@pytest.mark.parametrize("ep", [None, 1, 2, 4, 8])
def test_the_weights_a_pe_holds(ep: int | None, tray) -> None:
    """Per layer, on each working PE: its block's experts / ep experts, each 3 x hidden x ffn / u (u = P / ep),
    the router's hidden x experts and its attention share, aligned to a MiB (LAYER_ALIGN), over every layer:
    Mixtral-8x7B on tp_cubes (the MiB is 1 % of a layer there; the tiny model's layer is under one)."""
    t, _ = tray
    m = load_model("mixtral_8x7b")
    piece, M = layer_of(t, m, shape_for(m, "decode", 16), ep=ep)
    P, elem = len(piece.nodes), t.spec.pe.elem_bytes
    ep = ep or 8
    u = P // ep
    per_layer = ((m.experts // ep) * 3 * m.hidden * m.ffn // u + m.hidden * m.experts
                 + mixtral_attention_per_pe(m, P)) * elem
    assert piece.memory["weights"] == m.layers * aligned(per_layer)


@pytest.mark.parametrize("sp", [False, True])
def test_the_tiny_layers_weights(model, tray, sp: bool) -> None:
    """The tiny model on tp_cubes (heads = KV heads: attention weights split evenly over the 32 PEs): a layer's
    share is under a MiB, so each layer takes one; under sequence parallelism the router's weights split too."""
    t, _ = tray
    piece, M = layer_of(t, model, decode(model), sequence_parallel=sp or None)
    P, hid, elem = len(piece.nodes), model.hidden, t.spec.pe.elem_bytes
    u = P // 8
    attention = (hid * model.qkv_cols + model.heads * model.head_dim * hid) // P
    router = (hid // P if sp else hid) * model.experts
    per_layer = (3 * hid * model.ffn // u + router + attention) * elem
    assert per_layer < MiB and piece.memory["weights"] == model.layers * aligned(per_layer)


# -- the model files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lines, key, words", [
    ("experts: 8\ntop_k: 0\n", "top_k", "routes each token to 1 to 8 of them (got 0)"),
    ("experts: 8\n", "top_k", "routes each token to 1 to 8 of them (got 0)"),
    ("experts: 8\ntop_k: 9\n", "top_k", "routes each token to 1 to 8 of them (got 9)"),
    ("top_k: 2\n", "top_k", "applies to a mixture of experts (experts > 0) only"),
    ("experts: -1\ntop_k: 1\n", "experts", "must be 0 or more"),
    ("experts: true\ntop_k: 1\n", "experts", "whole number"),
    ("experts: 2.5\ntop_k: 1\n", "experts", "not a whole number"),
])
def test_a_bad_mixture_is_refused_naming_the_file_and_key(tmp_path, lines: str, key: str, words: str) -> None:
    dense = "".join(line + "\n" for line in TINY_MOE.splitlines() if not line.startswith(("experts", "top_k")))
    path = tmp_path / "bad_moe.yaml"
    path.write_text(dense + lines)
    with pytest.raises(ConfigError) as err:
        load_model(path)
    assert err.value.key == key and err.value.file == str(path)
    assert str(path) in str(err.value) and f"{key}:" in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("name, dims, total", [
    ("mixtral_8x7b", (32, 4096, 32, 8, 128, 14336, 32000, 8, 2), 46.7e9),
    ("qwen3_235b_a22b", (94, 4096, 64, 4, 128, 1536, 151936, 128, 8), 235e9),
])
def test_the_bundled_mixtures_load_with_their_published_sizes(name: str, dims: tuple, total: float) -> None:
    """Their published configurations, and layer_params() x layers plus the embeddings and the LM head (vocab x
    hidden each, untied) within 2 % of the published totals: Mixtral-8x7B 46.7 B, Qwen3-235B-A22B 235 B."""
    m = load_model(name)
    assert m.moe and (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab, m.experts,
                      m.top_k) == dims
    expert = 3 * m.hidden * m.ffn
    assert m.layer_params() == m.hidden * m.qkv_cols + m.heads * m.head_dim * m.hidden + m.experts * expert \
        + m.hidden * m.experts
    params = m.layer_params() * m.layers + 2 * m.vocab * m.hidden
    assert params == pytest.approx(total, rel=0.02)


# -- options ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("experts, ep, words", [
    (8, 3, "--ep 3 does not divide both the 8 experts and the 32 working PEs"),
    (8, 16, "--ep 16 does not divide both the 8 experts and the 32 working PEs"),
    (64, 64, "--ep 64 does not divide both the 64 experts and the 32 working PEs"),
    (8, -2, "--ep must be a positive integer (got -2)"),
])
def test_an_ep_that_does_not_divide_is_refused(model, tray, experts: int, ep: int, words: str) -> None:
    t, _ = tray
    m = model.model_copy(update={"experts": experts})
    with pytest.raises(KbfastError) as err:
        plan_step(t, m, decode(m), "tp_cubes", ep=ep)
    assert words in str(err.value)


def test_ep_zero_is_refused(model, tray) -> None:
    """``--ep 0`` is no block count: check_ep refuses it ("--ep must be a positive integer (got 0)")."""
    t, _ = tray
    with pytest.raises(KbfastError, match=r"--ep must be a positive integer \(got 0\)"):
        plan_step(t, model, decode(model), "tp_cubes", ep=0)


def test_an_ep_whose_blocks_do_not_split_the_ffn_is_refused(model, tray) -> None:
    """ep 1 on 32 PEs splits each expert's 48 columns over 32 PEs: refused, naming the division."""
    t, _ = tray
    m = model.model_copy(update={"ffn": 48})
    with pytest.raises(KbfastError, match=r"an expert's FFN columns per PE of its block \(48 over 32 PEs, --ep 1\)"):
        plan_step(t, m, decode(m), "tp_cubes", ep=1)


@pytest.mark.parametrize("name", ["llama32_1b", "tp_mlp"])
@pytest.mark.parametrize("option, value", [("ep", 2), ("hot_expert", 0.5)])
def test_the_moe_options_on_a_model_without_experts_are_refused(tray, name: str, option: str, value) -> None:
    t, _ = tray
    m = load_model(name)
    flag = "--" + option.replace("_", "-")
    why = "has a dense FFN" if name == "llama32_1b" else "is of kind mlp"
    with pytest.raises(KbfastError) as err:
        plan_step(t, m, None, "tp_cubes", **{option: value})
    assert f"{flag} {value}: applies to mixtures of experts" in str(err.value) and why in str(err.value)
    assert f"hint: drop {flag}" in str(err.value)


@pytest.mark.parametrize("hot", [0.6, 0.1])
def test_a_hot_share_outside_its_range_is_refused_by_plan_step(model, tray, hot: float) -> None:
    t, _ = tray
    with pytest.raises(KbfastError, match=rf"--hot-expert {hot}: .* between an even share"):
        plan_step(t, model, decode(model), "tp_cubes", hot_expert=hot)


def test_too_many_pes_for_the_all_to_all_are_refused_in_a_models_terms() -> None:
    """Mixtral-8x7B on tp_pes over 4 SIPs (512 working PEs) is over the direct all-to-all's 256 ranks: refused,
    with a hint a model step can follow (layout tp_cubes, fewer SIPs)."""
    t, _ = topo(FOUR)
    m = load_model("mixtral_8x7b")
    with pytest.raises(KbfastError) as err:
        plan_step(t, m, shape_for(m, "decode", 4), "tp_pes")
    assert "512" in str(err.value) and "256" in str(err.value)
    assert "ranks=" not in str(err.value) and "tp_cubes" in str(err.value), str(err.value)


def test_a_sweep_spec_giving_ep_to_a_dense_model_is_refused(tmp_path) -> None:
    from kbfast.sweep.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {kind: model, model: llama32_1b, ep: 2}\n"
                    "axes: [{grid: {workload.batch: [1, 2]}}]\n")
    with pytest.raises(ConfigError) as err:
        load_spec(path).points()
    assert err.value.key == "workload.ep" and "llama32_1b has a dense FFN" in str(err.value)
    assert "drop workload.ep from the spec" in str(err.value)


def test_a_model_sweep_takes_ep_and_hot_expert_as_axes(tmp_path, tiny_moe, model) -> None:
    """The sweep's points run what plan_step and run_step run for the same options, bit for bit."""
    from kbfast.sweep.batches import evaluate_batch, make_batches
    from kbfast.sweep.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ntopology: ahbm_2sip\nworkload: {{kind: model, model: {tiny_moe}, layout: tp_cubes, "
                    "batch: 4, kv_len: 256}\naxes: [{grid: {workload.ep: [2, 4], workload.hot_expert: [0.25, 0.5]}}]\n")
    rows = [evaluate_batch(b).rows for b in make_batches(load_spec(path).points(), "fast")]
    t, r = topo({})
    got = {(int(row["workload.ep"]), float(row["workload.hot_expert"])): float(row["latency_ns"])
           for batch in rows for _, row in batch.iterrows()}
    assert len(got) == 4
    for (ep, hot), latency in got.items():
        alone = run_step(t, r, plan_step(t, model, decode(model), "tp_cubes", ep=ep, hot_expert=hot))
        assert latency == alone.latency_ns()


def _no_compiling(*kernels: str) -> None:
    raise AssertionError(f"a first run would compile {kernels} before the refusal")


@pytest.mark.parametrize("args, words", [
    (["llama32_1b", "--ep", "2"], ["--ep 2: applies to mixtures of experts", "has a dense FFN", "drop --ep"]),
    (["llama32_1b", "--hot-expert", "0.5"], ["--hot-expert 0.5: applies to mixtures of experts", "drop --hot-expert"]),
    (["tp_mlp", "--ep", "2"], ["--ep 2: applies to mixtures of experts", "tp_mlp is of kind mlp"]),
    (["tp_mlp", "--hot-expert", "0.3"], ["--hot-expert 0.3: applies to mixtures of experts"]),
    (["TINY", "--layout", "tp_cubes", "--ep", "3"], ["--ep 3 does not divide both the 8 experts and the 32"]),
    (["TINY", "--layout", "tp_cubes", "--hot-expert", "0.6"], ["--hot-expert 0.6", "1/2 = 0.5"]),
    (["TINY", "--layout", "tp_cubes", "--hot-expert", "0.1"], ["--hot-expert 0.1", "1/8 = 0.125"]),
])
def test_cli_refuses_the_moe_options_before_compiling(terminal, monkeypatch, tiny_moe, args: list[str],
                                                      words: list[str]) -> None:
    """Exit 2, one error line naming the flag and value, no traceback, before a first run compiles anything."""
    monkeypatch.setattr(cli_run, "first_run", _no_compiling)
    args = [tiny_moe if a == "TINY" else a for a in args]
    refused(terminal(200).invoke(app, ["run", "model", *args], catch_exceptions=False), *words)


# -- the symbolic check with uneven blocks ---------------------------------------------------------------------
def per_rank_run(piece):
    """Every rank's own generator of ``piece``'s kernel (no tracing, no roles) in a plain round-robin loop over
    its wiring, its messages queued per (sender, direction); contributions are bitsets that ``Tl.add`` and
    ``Tl.same`` check (untagged: a model's collectives are written for opaque payloads,
    kbfast.workloads.collectives.in_model).  Returns each rank's final contributions and its IPCQ ops, in order:
    (send, receiver, bytes) and (recv, sender, bytes)."""
    inst = wire(piece.labels, piece.peer).to_install()
    n = len(piece.nodes)
    elem = piece.info.get("elem", 2)
    gens = [piece.kernel(Tl(rank=r, n_ranks=n, nbytes=elem, n_elem=1, info=piece.info, tagged=False))
            for r in range(n)]
    queues: dict = defaultdict(deque)
    value, pending, done = [None] * n, [None] * n, [None] * n
    log: list[list] = [[] for _ in range(n)]
    moved = True
    while moved:
        moved = False
        for r in range(n):
            while done[r] is None:
                req = pending[r]
                if req is None:
                    try:
                        req = gens[r].send(value[r])
                    except StopIteration as stop:
                        done[r] = stop.value
                        break
                if req.kind == "recv":
                    sender = inst.inbound(r, req.direction)
                    if not queues[sender]:
                        pending[r] = req
                        break
                    value[r] = queues[sender].popleft()
                    log[r].append(("recv", sender[0], req.nbytes))
                elif req.kind == "send":
                    queues[(r, req.direction)].append(req.payload)
                    log[r].append(("send", inst.peer(r, req.direction), req.nbytes))
                    value[r] = 0
                else:
                    value[r] = 0
                pending[r] = None
                moved = True
    assert all(d is not None for d in done), "the ranks deadlock"
    assert not any(queues.values()), "a message is never received"
    return done, log


def program_ipcq(p, n: int) -> list[list]:
    """The IPCQ ops of the first ``n`` agents (the working PEs, in rank order) of Program ``p``, as per_rank_run
    logs them."""
    ch = p.channels
    out = []
    for a in range(n):
        ops = p.ops_of(a)
        rows = []
        for o in ops[np.isin(p.op_code[ops], (Op.SEND, Op.RECV))].tolist():
            c = int(p.op_target[o])
            send = p.op_code[o] == Op.SEND
            rows.append(("send" if send else "recv", int(ch.dst[c] if send else ch.src[c]), int(p.op_nbytes[o])))
        out.append(rows)
    return out


@pytest.mark.parametrize("batch, options", [
    (4, {"hot_expert": 0.5}), (3, {"ep": 4, "hot_expert": 0.4}), (4, {"hot_expert": 0.5, "sequence_parallel": True}),
    (1, {}), (4, {}), (4, {"overrides": QUAD, "layout": "tp_pes", "ep": 2, "hot_expert": 0.5})])
def test_uneven_blocks_pass_the_symbolic_check_rank_by_rank(model, step, batch: int, options: dict) -> None:
    """With the blocks' loads uneven (a hot expert, one token), each rank sends its own sequence of message sizes:
    every rank's own generator, run without tracing, ends with every rank's contribution, and the exact
    replay's Program (traced by role) holds exactly the IPCQ ops those generators make."""
    s = step(decode(model, batch), **options)
    piece, res = s.pieces[0], s.results["exact"][0]
    M = piece.info["layer"]["moe"]
    if batch != 4 or "hot_expert" in options:
        assert len(set(M["slice_bytes"])) > 1              # uneven: the case the rank role is for
    n = len(piece.nodes)
    done, log = per_rank_run(piece)
    assert done == [(1 << n) - 1] * n
    p = res.program
    assert np.array_equal(p.agent_node[:n], piece.nodes)
    assert program_ipcq(p, n) == log


def test_without_the_rank_role_uneven_blocks_would_send_the_wrong_sizes(model, step) -> None:
    """The rank role moe.wiring adds when the blocks' loads differ is needed: tp_pes on 4 cubes, ep 2 (a block of
    two cubes), hot expert 0.5: PE 1 of cubes 0 and 1 share every other role (not the first PE of a cube, PE 1,
    block 0), and traced by those alone, rank 9 would replay rank 1's message sizes (rank r sends to r + k);
    the Program would differ from the ranks' own generators (the check above catches such a wiring).  On
    tp_cubes every rank has a role of its own already (its cube's lrab role)."""
    s = step(decode(model), QUAD, "tp_pes", ep=2, hot_expert=0.5)
    piece = s.pieces[0]
    n = len(piece.nodes)
    assert np.array_equal(piece.roles[:, -1], np.arange(n))             # the rank role, last
    rank_free = dataclasses.replace(piece, roles=piece.roles[:, :-1])
    assert np.array_equal(rank_free.roles[1], rank_free.roles[9])
    t, r = topo(QUAD)
    p = build_piece(t, r, rank_free, TileLowering(piece.commands))
    own = per_rank_run(piece)[1]
    got = program_ipcq(p, n)
    assert got[1] == own[1] and got[9] != own[9]


# -- the CLI -------------------------------------------------------------------------------------------------------
def test_cli_run_model_with_a_hot_expert_fits_80_columns(terminal, tiny_moe) -> None:
    res = terminal(80).invoke(app, ["run", "model", tiny_moe, "--layout", "tp_cubes", "--batch", "4", "--kv-len",
                                    "256", "--hot-expert", "0.5"], catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert "tinymoe" in res.stdout
    for stage in MOE_STAGES + ("ffn all-gather",):
        assert stage in res.stdout, stage
    assert "ffn up" not in res.stdout
    assert max(map(len, res.stdout.splitlines())) <= 80


# -- Mixtral-8x7B -------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_mixtral_decode_experts_stream_their_weights(tray) -> None:
    """Mixtral-8x7B decode, 16 users, tp_cubes (32 PEs, ep 8: an expert on each block of 4 PEs, 4 slots each):
    every PE streams its 1/4 of its expert's three matrices, 3 x 4096 x 14336 / 4 x 2 B = 88.1 MB, from its own
    HBM slice, over its pseudo-channels (hbm.pcs_per_pe x pc_bw_gbs = 256 GB/s: docs/models.md, the roofline's
    HBM floor), after its dispatch: the experts stage ends at least 344 us after the dispatch's, and that
    streaming is most of it."""
    t, r = tray
    m = load_model("mixtral_8x7b")
    s = run_step(t, r, plan_step(t, m, shape_for(m, "decode", 16), "tp_cubes"), ("fast",))
    layer = s.results["fast"][0]
    M = s.pieces[0].info["layer"]["moe"]
    assert M["loads"] == [4] * 8 and M["block_pes"] == 4
    weights = 3 * m.hidden * m.ffn // M["block_pes"] * t.spec.pe.elem_bytes
    floor = weights / (t.spec.hbm.pcs_per_pe * t.spec.pc_bw_gbs)
    ends = layer.phase_ns
    took = ends["experts"] - ends["dispatch (all-to-all)"]
    assert took >= floor and floor >= 2 / 3 * took, (took, floor)
