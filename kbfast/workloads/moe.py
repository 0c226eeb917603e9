"""A mixture-of-experts FFN on the tensor-parallel layout: routing, dispatch, experts, combine.

docs/models.md "Mixture of experts" walks through it.  The ``P`` working PEs split into ``ep`` blocks of
``u = P / ep`` consecutive PEs (``--ep``, default ``gcd(experts, P)``: a block is a PE, a cube, a SIP or
whatever ``ep`` divides into); each block holds ``experts / ep`` experts, each expert's FFN split over the
block's ``u`` PEs as a dense FFN is over the tray (up and gate by columns, down by rows).  Each PE holds
``1 / P`` of every token's hidden vector as it leaves the attention (``hidden / P`` elements per token: the
all-reduce's result or, with sequence parallelism, the reduce-scatter's), and a layer's FFN runs:

=================  ====================================================================================
router             GEMM tokens x experts x hidden on every PE (sequence parallel: over its ``hidden / P``,
                   then an all-reduce of the f32 logits), softmax and top-k
dispatch           all-to-all (kbfast.workloads.collectives.all_to_all's direct sends, one channel per
                   pair): every PE sends its slice of the tokens routed to a block to each of the block's PEs
experts            per expert of the block with tokens routed to it: GEMM up (and gate), the activation, GEMM
                   down, on the PE's ``1 / u`` of the expert; each GEMM's A (the tokens, the activations)
                   loaded into TCM first when it is pinned there, as the dense FFN's
combine            all-to-all back: each PE sends the slice of its partial outputs to every PE
weighted sum       MATH: each token's partials scaled by their routing weights and added
ffn all-gather     (not sequence parallel) the slices gathered, every PE holding every token again
=================  ====================================================================================

The all-gather, and the router's all-reduce under sequence parallelism, run by the layer's all-reduce
algorithm when it splits (ring_pipe, hier2d), else by hier2d.

Routing is set by load, not drawn: of the ``tokens x top_k`` routed slots the hottest expert (expert 0)
takes ``ceil(hot x slots)`` (``--hot-expert``, at most one slot per token; default: an even share), and the
rest go one by one to the others, a block at a time: every expert but the hot one is within one slot of the
others.  A token routed to two experts of one block is sent to it twice (each slot is a message's share).
"""

from __future__ import annotations

import math

import numpy as np

from kbfast.errors import KbfastError
from kbfast.workloads.collectives import in_model
from kbfast.workloads.collectives.all_to_all import MAX_RANKS
from kbfast.workloads.kernels import Tl, activation, pinned_gemm

LOGIT_BYTES = 4                  # router logits in f32
COUNT_BYTES = 4                  # a pair's token count: exchanged even when no token is


def default_ep(experts: int, n_pe: int) -> int:
    """The expert-parallel degree when not given: ``gcd(experts, P)`` blocks."""
    return math.gcd(experts, n_pe)


def check_ep(ep: int, experts: int, n_pe: int, fix: str) -> int:
    """Refuse an expert-parallel degree that does not divide both the experts and the working PEs."""
    if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1:
        raise KbfastError(f"--ep must be a positive integer (got {ep!r})")
    if experts % ep or n_pe % ep:
        raise KbfastError(f"--ep {ep} does not divide both the {experts} experts and the {n_pe} working PEs "
                          f"into blocks; {fix}")
    return ep


def expert_loads(tokens: int, top_k: int, experts: int, ep: int, hot: float | None = None) -> np.ndarray:
    """Token-slots routed to each expert (expert ``e`` in block ``e // (experts / ep)``): the module
    docstring's rule.  ``hot``: the hottest expert's share of the ``tokens x top_k`` slots, from an even
    share ``1 / experts`` to ``1 / top_k`` (every token); None: the slots spread evenly."""
    slots = tokens * top_k
    per_block = experts // ep
    loads = np.zeros(experts, np.int64)
    if hot is not None:
        lo, hi = 1 / experts, 1 / top_k
        if not (lo - 1e-12 <= hot <= hi + 1e-12):
            raise KbfastError(f"--hot-expert {hot}: the hottest expert's share of the routed slots lies between "
                              f"an even share, 1/{experts} = {lo:.4g}, and one slot per token, 1/{top_k} = {hi:.4g}")
        loads[0] = min(tokens, math.ceil(hot * slots - 1e-9))
    # the others (every expert with no hot one), block by block: local expert i of block b, i then b
    order = [b * per_block + i for i in range(per_block) for b in range(ep)]
    order = [e for e in order if hot is None or e != 0]
    rest = slots - loads.sum()
    full, extra = divmod(int(rest), len(order)) if order else (0, 0)
    loads[order] += full
    loads[order[:extra]] += 1
    return loads


def block_loads(loads: np.ndarray, ep: int) -> np.ndarray:
    """Token-slots routed to each block."""
    return loads.reshape(ep, -1).sum(axis=1)


def compile_ffn(table, model, tokens: int, n_pe: int, ep: int, hot: float | None, router_k: int, ffn_pe: int,
                up_cols: int, base: int, elem: int) -> dict:
    """The FFN's GEMM commands in ``table`` (kbfast.workloads.model._Table) and its kernel's fields: the router
    (``tokens x experts x router_k``: every hidden element, or the PE's ``hidden / P`` under sequence
    parallelism) at ``base``, then each local expert's up (and gate: ``up_cols``) and down projections
    (``ffn_pe`` columns),
    one command per (local expert, tokens routed to it); per block, the (up, down, tokens) of its experts with
    tokens, and the bytes one PE sends it; the useful MACs (each routed slot's expert FFN once, the router
    once)."""
    hid, E = model.hidden, model.experts
    loads = expert_loads(tokens, model.top_k, E, ep, hot)
    per_block, u = E // ep, n_pe // ep
    router = table.add(tokens, E, router_k, base, count=0)
    experts = base + router_k * E * elem
    size = (hid * up_cols + ffn_pe * hid) * elem
    made: dict[tuple[int, int], tuple[int, int, int]] = {}
    gemms = []
    for b in range(ep):
        row = []
        for i in range(per_block):
            n = int(loads[b * per_block + i])
            if n and (i, n) not in made:
                at = experts + i * size
                made[i, n] = (table.add(n, up_cols, hid, at, count=0),
                              table.add(n, hid, ffn_pe, at + hid * up_cols * elem, count=0), n)
            if n:
                row.append(made[i, n])
        gemms.append(tuple(row))
    per_slot = hid * (model.up_cols + model.ffn)          # an expert's MACs per token: up (and gate), down
    per_block_load = block_loads(loads, ep)
    slices = [int(n) * hid * elem // n_pe for n in per_block_load]
    return {"router": router, "moe": {
        "router_in_bytes": tokens * router_k * elem, "logit_bytes": tokens * E * LOGIT_BYTES,
        "logit_elems": tokens * E, "block_pes": u, "slice_bytes": slices, "gemms": gemms, "ffn_cols": ffn_pe,
        "partial_elems": u * sum(slices) // elem, "loads": loads.tolist(), "ep": ep,
        "loads_per_block": per_block_load.tolist(), "token_bytes": hid * elem,
        "macs": int(loads.sum()) * per_slot + tokens * hid * E}}


ROLE_COLUMNS = 2      # the roles :func:`wiring` appends (kbfast.workloads.model.trace_roles keeps them)


def wiring(labels: list[str], peer: np.ndarray, roles: np.ndarray, fields: dict, n_pe: int):
    """A layer's wiring with the all-to-alls' directions (:func:`peers`) and roles telling apart what a PE's
    kernel depends on: its block (its experts' GEMMs) and, when the blocks' loads differ, the rank itself
    (each rank sends its own sequence of message sizes)."""
    more_l, more = peers(n_pe)
    rank = np.arange(n_pe)
    uneven = len(set(fields["slice_bytes"])) > 1
    extra = np.stack([rank // fields["block_pes"], rank if uneven else np.zeros_like(rank)], axis=1)
    return list(labels) + more_l, np.concatenate([peer, more], axis=1), np.concatenate([roles, extra], axis=1)


def peers(n: int) -> tuple[list[str], np.ndarray]:
    """An all-to-all's directions over ``n`` working PEs beside the layer's others: ``a2a+k`` from rank ``r``
    to ``(r + k) % n``, ``a2a-k`` back to ``(r - k) % n``, each the other's opposite
    (kbfast.workloads.install), so that no pair's channel is mistaken for a ring's."""
    if n > MAX_RANKS:
        raise KbfastError(f"a mixture of experts' all-to-all opens a channel between every two of its {n:,} working "
                          f"PEs, {n * (n - 1):,} in all; it is limited to {MAX_RANKS} PEs\n  hint: use layout "
                          "tp_cubes, fewer SIPs (--set sips.count=N), or split the tray with --pp / --dp")
    r = np.arange(n)[:, None]
    k = np.arange(1, n)[None, :]
    return [f"a2a+{i}" for i in range(1, n)] + [f"a2a-{i}" for i in range(1, n)], \
        np.concatenate([(r + k) % n, (r - k) % n], axis=1)


def exchange(tl: Tl, name: str, send: list[int], recv: list[int]):
    """A direct all-to-all (stage ``name``) over the working PEs: ``send[q]`` bytes to rank ``q`` and
    ``recv[q]`` from it, each pair on its own channel (at least :data:`COUNT_BYTES`: a pair with no token
    still exchanges its count); returns every rank's contribution, each once."""
    n, r = tl.n_ranks, tl.rank
    yield tl.phase(name)
    got = tl.contribution()
    for k in range(1, n):
        to, frm = (r + k) % n, (r - k) % n
        yield tl.send(f"a2a+{k}", tl.contribution(), max(send[to], COUNT_BYTES))
        got = tl.add(got, (yield tl.recv(f"a2a-{k}", max(recv[frm], COUNT_BYTES))))
    return got


def moe_ffn(tl: Tl, L: dict, pe: int, cube_rank: int, prefetch):
    """The mixture-of-experts FFN on one working PE (the module docstring's table); ``prefetch``: the next
    GEMM command to prefetch behind the all-gather (kbfast.workloads.model._prefetch).  Returns the
    contributions the PE ends with: every PE's."""
    M, P = L["moe"], L["P"]
    sp = L["sequence_parallel"]
    alg = L["collective"] if L["collective"] in in_model.SCATTERING else "hier2d"
    yield tl.phase("router")
    yield from pinned_gemm(tl, L["pinned"], L["router"], M["router_in_bytes"])
    if sp:                                        # each PE's logits are partial: summed over the PEs
        tl.nbytes, tl.n_elem = M["logit_bytes"], max(M["logit_bytes"] // LOGIT_BYTES, 1)
        yield from in_model.body(tl, tl.contribution(), alg, pe, L["n_pe"], cube_rank)
    yield tl.math(M["logit_elems"], "softmax")
    yield tl.math(M["logit_elems"], "max")       # top-k
    block = tl.rank // M["block_pes"]
    slices = M["slice_bytes"]                     # per block: the bytes one PE sends of its tokens
    to = [slices[q // M["block_pes"]] for q in range(P)]
    got = yield from exchange(tl, "dispatch (all-to-all)", to, [slices[block]] * P)
    yield tl.phase("experts")
    elem = tl.info["elem"]
    for up, down, n in M["gemms"][block]:         # A loaded into TCM first when it is pinned there, as dense
        yield from pinned_gemm(tl, L["pinned"], up, n * M["token_bytes"])
        yield from activation(tl, n * M["ffn_cols"], L["ffn_kind"])
        yield from pinned_gemm(tl, L["pinned"], down, n * M["ffn_cols"] * elem)
    back = yield from exchange(tl, "combine (all-to-all)", [slices[block]] * P, to)
    tl.same(got, back)                            # both exchanges heard from the same ranks
    yield tl.phase("weighted sum")
    yield tl.math(M["partial_elems"], "mul")
    yield tl.math(M["partial_elems"], "add")
    if sp:
        return back
    yield tl.phase(f"ffn all-gather ({alg})")
    whole = L["x_bytes"]
    tl.nbytes, tl.n_elem = whole, max(whole // tl.info["elem"], 1)
    yield from prefetch
    acc = yield from in_model.all_gather(tl, tl.contribution(), alg, L["n_pe"])
    yield tl.store(whole)
    tl.same(acc, back)
    return acc
