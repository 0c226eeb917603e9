"""The model compiler: a model, a phase, a batch and a layout in; the kernels of one layer as Program IR out.

docs/models.md walks through it.  One transformer layer on layout ``tp_pes`` (rank = SIP, spec_ccl §6; each
rank's shard split over its cubes and PEs, the reference's ``DPPolicy(cube=column_wise, pe=column_wise)``),
per PE, with ``T = batch x tokens``, ``P`` working PEs, ``C`` cubes and ``n`` working PEs per cube:

====================  =====================================================================================
norm                  MATH over the T x hidden input (every PE holds it)
qkv                   load x; GEMM T x hidden x (cube's QKV columns / n): query heads are split over cubes
                      (heads / C each), a KV head goes to every cube of its query group
qkv gather            ring all-gather of the Q, K, V columns over the cube's PEs (n > 1)
attention             decode: ``mesh_mlo``: the KV cache split over the cube's PEs, per user and KV head a
                      score GEMM, a softmax and a PV GEMM, then the (max, sum, O) partials merged around
                      the ring; prefill: ``mesh_kv``: query and KV blocks of T / n tokens, the KV blocks
                      passed around the ring, two GEMMs and a softmax per block, the block's K and V
                      stored to the cache, O gathered over the ring (spec_ccl §7)
o proj                load O; GEMM T x (cube's head dims / n) x hidden: a partial sum
o all-reduce          the partial sums over all P PEs: a chain to pe0 in each cube, lrab over cubes and SIPs
                      (spec_ccl §5.7), a chain back; the tile loaded before and stored after
ffn norm              MATH: residual add and norm
ffn up                load x; GEMM T x hidden x (up columns / P) (gate and up fused under SwiGLU)
activation            MATH: SiLU and the gate product (SwiGLU), or GELU
ffn down              load h; GEMM T x (ffn / P) x hidden: a partial sum
ffn all-reduce        as o all-reduce
residual              MATH add
====================  =====================================================================================

With more cubes than query heads, a head goes to a group of ``C / heads`` consecutive cubes, and its rings
(the gathers and the attention) run over the group's PEs: the reference's ring over cubes.  Layout
``tp_cubes`` runs the same on pe0 of every cube only (``n = 1``: no rings inside a cube, lrab
directly), the reference's cube-level install.  GEMM operands live in the PE's own HBM slice: A is loaded
into TCM first (``tl.load``), B streams tile by tile, C is written back (spec_pe §5.6, ``load_ref``);
attention GEMMs take Q and the scores from TCM (no load); an A that does not fit in TCM beside the tile
buffers (``pe.tcm_kib``) streams tile by tile like B (``ref_ref``), with no load.  Not modelled: the
embedding lookup, the new token's K/V append in decode (512 B per cube), causal skipping in prefill and the
logits' gather and sampling after the LM head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbfast.config import budget
from kbfast.errors import ConfigError, KbfastError, did_you_mean, not_one_of
from kbfast.ir import Program, ProgramBuilder
from kbfast.config.models import AttentionPanels, Mlp, Model, Panel, Transformer
from kbfast.ir.tiling import plan_gemm
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads import moe, parallel
from kbfast.workloads.collectives import in_model, lrab
from kbfast.workloads.collectives.lrab import intercube_peers
from kbfast.workloads.collectives.placement import kernel_info, pe_nodes
from kbfast.workloads.commands import GemmCommand
from kbfast.workloads.install import ring_peers, wire
from kbfast.workloads.kernels import Tl, activation, pinned_gemm
from kbfast.workloads.launch import launch_timing
from kbfast.workloads.symbolic import run_traced

PHASES = ("decode", "prefill")
STEP_DEFAULTS = {"phase": "decode", "batch": 1}   # a transformer step's phase and batch when not given
LAYOUTS = {"tp_pes": "TP across SIPs, each rank's shard over every cube and PE of its SIP",
           "tp_cubes": "TP across SIPs, each rank's shard over the cubes of its SIP, on each cube's pe0"}
PARTIAL_BYTES = 4          # attention partials (max, sum, O) travel in f32
ARGMAX_BYTES = 8           # greedy sampling: an f32 logit and its i32 token index per user
LAYER_ALIGN = 1 << 20      # a layer's weights start on a MiB: a whole number of PC interleave periods


@dataclass(frozen=True)
class Shape:
    """What one step computes: ``phase``, users (``batch``), new tokens per user (``seq``: 1 in decode) and the
    KV length attended to (``kv_len``: the context in decode, ``seq`` in prefill)."""

    phase: str
    batch: int
    seq: int
    kv_len: int

    @property
    def tokens(self) -> int:
        """Tokens in the step: batch x sequence length."""
        return self.batch * self.seq


@dataclass(frozen=True)
class Piece:
    """One traced kernel over a set of PEs: what :func:`build_piece` needs, and what a report names."""

    name: str                        # "layer", "head", a panel's name
    nodes: np.ndarray                # pe_dma node of each rank
    labels: list[str]
    peer: np.ndarray                 # neighbour table (wired at build)
    roles: np.ndarray
    kernel: Callable
    info: dict
    commands: list[GemmCommand]
    macs: int                        # useful MACs of every rank's GEMMs
    repeat: int = 1                  # how many times a step runs it (identical layers)
    allreduce: str = ""              # the info key of its all-reduce's fields (n_pe, bytes, collective), if any
    memory: dict = dataclasses.field(default_factory=dict)   # per working PE, bytes (:func:`_memory`)
    groups: np.ndarray | None = None     # per rank, the ranks it ends with (lo, hi); None: every rank's

    @property
    def collective(self) -> str:
        """The algorithm of its all-reduce (``auto`` until chosen); "" without one."""
        return self.info[self.allreduce]["collective"] if self.allreduce else ""


def shape_for(model: Model, phase: str | None = None, batch: int | None = None, seq: int | None = None,
              kv_len: int | None = None, label: str | None = None) -> Shape | None:
    """The step's shape; decode's ``seq`` is 1 and its ``kv_len`` the context, prefill's ``kv_len`` is ``seq``;
    ``phase`` defaults to decode and ``batch`` to 1.  A model that is no transformer has none (None), and
    refuses every one of them given (:func:`refuse_unread`; ``label``: the sweep spec that gave them)."""
    if not isinstance(model, Transformer):
        refuse_unread(model, {"phase": phase, "batch": batch, "seq": seq, "kv_len": kv_len}, label)
        return None
    phase = STEP_DEFAULTS["phase"] if phase is None else phase
    batch = STEP_DEFAULTS["batch"] if batch is None else batch
    check_phase(phase)
    for name, v in (("batch", batch), ("seq", seq), ("kv-len", kv_len)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise KbfastError(f"--{name} must be a positive integer (got {v!r})")
    if phase == "decode":
        if seq not in (None, 1):
            raise KbfastError(f"decode makes one token per user: --seq must be 1 (got {seq}); "
                              "use --kv-len for the context length")
        return Shape("decode", batch, 1, kv_len or 4096)
    seq = seq or 2048
    if kv_len not in (None, seq):
        raise KbfastError(f"prefill attends to its own {seq} tokens: drop --kv-len or make it equal to --seq")
    return Shape("prefill", batch, seq, seq)


# what a transformer's step takes
STEP_OPTIONS = ("phase", "batch", "seq", "kv_len", "layers", "sequence_parallel", "overlap", "pp", "dp",
                "micro_batches", "ep", "hot_expert")
MOE_OPTIONS = ("ep", "hot_expert")                             # what only a mixture of experts reads
OVERLAPS = {"prefetch": "the GEMM after each all-reduce streams its first weight tiles into free TCM during it",
            "none": "stage by stage, each GEMM from an idle read channel (the reference)"}
DEFAULT_OVERLAP = "prefetch"     # the decisions table's overlap row
COLLECTIVE_OPTIONS = ("collective",)                             # what a model with an all-reduce takes


def refuse_unread(model: Model, options: dict, label: str | None = None) -> None:
    """Refuse the options a model does not read given a value (not None): ``STEP_OPTIONS`` when ``model`` is
    no transformer (an MLP's or a panel's file fixes what its step computes), ``COLLECTIVE_OPTIONS`` for the
    attention panels (no all-reduce), so that a value is never carried and unused.  The error names the flag
    (``--kv-len 64``), or with ``label`` (a sweep spec) the key ``workload.kv_len``."""
    reads = STEP_OPTIONS + COLLECTIVE_OPTIONS if isinstance(model, Transformer) else \
        COLLECTIVE_OPTIONS if isinstance(model, Mlp) else ()
    if isinstance(model, Transformer) and not model.moe:
        reads = tuple(k for k in reads if k not in MOE_OPTIONS)
    given = [k for k in STEP_OPTIONS + COLLECTIVE_OPTIONS if options.get(k) is not None and k not in reads]
    if not given:
        return
    names = [f"workload.{k}" if label else f"--{k.replace('_', '-')}" for k in given]
    which = "models with an all-reduce (transformers, MLPs)" if given[0] in COLLECTIVE_OPTIONS else \
        "mixtures of experts (a model file with experts)" if given[0] in MOE_OPTIONS else "transformer models"
    dense = given[0] in MOE_OPTIONS and isinstance(model, Transformer)
    why = f"{model.name} has a dense FFN" if dense else \
        f"{model.name} is of kind {model.kind}, whose file fixes what its step computes"
    problem = f"applies to {which} only; {why}"
    hint = f"drop {', '.join(names)}" + (" from the spec (its workload and axes)" if label else "")
    if label:
        raise ConfigError(label, names[0], options[given[0]], problem, hint)
    value = "" if options[given[0]] is True else f" {options[given[0]]}"        # a flag has no value
    raise KbfastError(f"{names[0]}{value}: {problem}\n  hint: {hint}")


# -- placement ---------------------------------------------------------------------------------------------
def check_layout(layout: str) -> None:
    """Refuse a layout that is not one of :data:`LAYOUTS`."""
    if layout not in LAYOUTS:
        raise KbfastError(f"unknown layout {layout!r}: {did_you_mean(layout, LAYOUTS)}")


def check_phase(phase: str) -> None:
    """Refuse a phase that is not one of :data:`PHASES`."""
    if phase not in PHASES:
        raise not_one_of("phase", phase, PHASES)


def check_overlap(overlap: str) -> None:
    """Refuse an overlap that is not one of :data:`OVERLAPS`."""
    if overlap not in OVERLAPS:
        raise not_one_of("overlap", overlap, OVERLAPS)


def _working(t: Tables, layout: str) -> tuple[np.ndarray, int]:
    """The working PEs' pe_dma nodes (SIP, cube, PE order) and the working PEs per cube."""
    check_layout(layout)
    n = len(t.plan.pe_router) if layout == "tp_pes" else 1
    return pe_nodes(t, n), n


def _wiring(t: Tables, n_pe: int, group: int = 1) -> tuple[list[str], np.ndarray, np.ndarray, dict]:
    """Labels, neighbour table, roles and lrab's info of every working PE: a ring (``intra_E`` / ``intra_W``)
    over the working PEs of each ``group`` consecutive cubes, in cube then PE order, lrab's cube mesh and
    inter-SIP directions on each cube's first PE, and the other all-reduces'
    (kbfast.workloads.collectives.in_model)."""
    lay = t.layout
    n_cubes = lay.n_sips * lay.n_cubes_per_sip
    rank = np.arange(n_cubes * n_pe)
    cube, pe = np.divmod(rank, n_pe)
    labels, cols = [], []
    m = group * n_pe
    if m > 1:
        ring_l, ring = ring_peers(m, "intra_")
        pos = rank % m
        labels += ring_l
        cols.append((rank - pos)[:, None] + ring[pos])
    inter_l, inter = intercube_peers(t)
    labels += inter_l
    cols.append(np.where((pe == 0)[:, None] & (inter[cube] >= 0), inter[cube] * n_pe, -1))
    info = kernel_info(t)
    more_l, more = in_model.peers(info, n_pe)
    labels += more_l
    cols.append(more)
    # a PE other than its cube's first never runs lrab: its ops do not depend on its cube
    roles = np.concatenate([np.where((pe == 0)[:, None], lrab.roles(n_cubes, info)[cube], -1), pe[:, None]],
                           axis=1)
    return labels, np.concatenate(cols, axis=1), roles, info


def _divide(what: str, total: int, parts: int, fix: str) -> int:
    if total % parts:
        raise KbfastError(f"{what}: {total} does not divide over {parts}; {fix}")
    return total // parts


# -- kernels -----------------------------------------------------------------------------------------------
def _sized(tl: Tl, nbytes: int) -> None:
    """Set the message size the collective helpers send (``tl.send``'s default) and MATH over it."""
    tl.nbytes, tl.n_elem = nbytes, max(nbytes // tl.info["elem"], 1)


def _gemm(tl: Tl, fields: dict, name: str, a_bytes: int):
    """GEMM command ``fields[name]``, its A operand (``a_bytes``) loaded into TCM first when the command pins
    it; a command whose A does not fit in TCM streams A tile by tile from the PE's slice (_Table.add)."""
    yield from pinned_gemm(tl, fields["pinned"], fields[name], a_bytes)


def _prefetch(tl: Tl, fields: dict, name: str | None):
    """Under ``--overlap prefetch``, start prefetching GEMM command ``fields[name]`` (docs/models.md
    "Overlap"): a collective calls it right after its tile load, so that the load does not queue behind the
    prefetch's reads on the PE's read channel; at most ``fields["prefetch_most"][name]`` tiles, when set
    (kbfast.measure.model.resolve_prefetches: what streams while the collective runs)."""
    if name is not None and fields.get("overlap") == "prefetch":
        yield tl.prefetch(fields[name], fields.get("prefetch_most", {}).get(name))


def _gather(tl: Tl, nbytes: int, n: int):
    """Ring all-gather over the cube's ``n`` working PEs: ``n - 1`` forwards of ``nbytes``, no MATH."""
    _sized(tl, nbytes)
    current = acc = tl.contribution()
    for _ in range(n - 1):
        yield tl.send("intra_E", current)
        current = yield tl.recv("intra_W")
        acc = tl.add(acc, current)
    return acc


def _allreduce(tl: Tl, name: str, nbytes: int, algorithm: str, pe: int, n_pe: int, cube_rank: int,
               tile_io: bool = True, prefetch: tuple[dict, str] | None = None):
    """Stage ``name`` (the algorithm named beside it): the sum over every working PE by ``algorithm``
    (kbfast.workloads.collectives.in_model; lrab: a chain to the cube's pe0, lrab over cubes and SIPs, a chain
    back, spec_ccl §5.7) between a tile load and store (the reference kernels', §5.0; ``tile_io=False``:
    without); ``prefetch``: (fields, name) of the GEMM command to prefetch after the load (:func:`_prefetch`)."""
    yield tl.phase(f"{name} ({algorithm})")
    _sized(tl, nbytes)
    if tile_io:
        yield tl.load(nbytes)
    if prefetch is not None:
        yield from _prefetch(tl, *prefetch)
    acc = yield from in_model.body(tl, tl.contribution(), algorithm, pe, n_pe, cube_rank)
    if tile_io:
        yield tl.store(nbytes)
    return acc


def _attention(tl: Tl, a: dict, n: int, ring: tuple[str, str]):
    """One rank's attention on a ring of ``n`` ranks (``ring`` = send, receive direction): mesh_mlo (decode)
    or mesh_kv (prefill); see the module docstring.  Returns the contributions merged into its result."""
    send, recv = ring
    pairs = a["users"] * a["kv_heads"]
    acc = tl.contribution()
    if a["kernel"] == "mesh_mlo":
        for _ in range(pairs):
            yield tl.gemm(a["score"])
            yield tl.math(a["score_elems"], "softmax")
            yield tl.gemm(a["pv"])
        _sized(tl, a["partial_bytes"])
        current = acc
        for _ in range(n - 1):
            yield tl.send(send, current)
            current = yield tl.recv(recv)
            acc = tl.add(acc, current)
            yield tl.math(a["partial_elems"], "softmax")       # rescale by the max and merge
        return acc
    _sized(tl, a["block_bytes"])
    current = acc
    for step in range(n):
        if step < n - 1:
            yield tl.send(send, current)
        for _ in range(pairs):
            yield tl.gemm(a["score"])
            yield tl.math(a["score_elems"], "softmax")
            yield tl.gemm(a["pv"])
        if step < n - 1:
            current = yield tl.recv(recv)
            acc = tl.add(acc, current)
    yield tl.store(a["block_bytes"])                          # this block's K and V into the cache
    return acc


def _norm(tl: Tl, n_elem: int, kind: str):
    """RMSNorm: square, sum, scale; LayerNorm adds the mean pass and the bias."""
    for op in ("mul", "sum", "scale") if kind == "rmsnorm" else ("sum", "mul", "sum", "scale", "bias"):
        yield tl.math(n_elem, op)


def _scattered(tl: Tl, name: str, L: dict, gather: bool, prefetch: str | None = None):
    """Stage ``name`` under sequence parallelism (the algorithm named beside it): the reduce-scatter of the
    layer's partial sums (``x_bytes``; each PE keeps its ``1 / P``), or the all-gather of every PE's slice,
    between the tile load and store of what the PE holds before and after (kbfast.workloads.collectives
    .in_model); GEMM command ``L[prefetch]`` prefetched after the load (:func:`_prefetch`).  Returns the
    contributors the PE ends with."""
    alg, whole = L["collective"], L["x_bytes"]
    part = max(whole // L["P"], 1)
    yield tl.phase(f"{name} ({alg})")
    _sized(tl, whole)
    yield tl.load(part if gather else whole)
    yield from _prefetch(tl, L, prefetch)
    op = in_model.all_gather if gather else in_model.reduce_scatter
    acc = yield from op(tl, tl.contribution(), alg, L["n_pe"])
    yield tl.store(whole if gather else part)
    return acc


def layer_kernel(tl: Tl):
    """One transformer layer on one working PE (the module docstring's table); with sequence parallelism the
    norms and the residual work on the PE's ``1 / P`` of the tokens, an all-gather before each column-parallel
    GEMM and a reduce-scatter after each row-parallel one in place of the all-reduces."""
    L = tl.info["layer"]
    cube_rank, pe = divmod(tl.rank, L["n_pe"])
    n = L["ring"]
    sp = L["sequence_parallel"]
    own = max(L["x_elems"] // L["P"], 1) if sp else L["x_elems"]
    yield tl.phase("norm")
    yield from _norm(tl, own, L["norm"])
    if sp:
        qkv_in = yield from _scattered(tl, "qkv all-gather", L, gather=True)
    yield tl.phase("qkv")
    yield from _gemm(tl, L, "qkv", L["x_bytes"])
    if n > 1:
        yield tl.phase("qkv gather")
        yield from _gather(tl, L["qkv_shard_bytes"], n)
    yield tl.phase("attention")
    yield from _attention(tl, L["attn"], n, ("intra_E", "intra_W"))
    if n > 1 and L["attn"]["kernel"] == "mesh_kv":
        yield tl.phase("o gather")
        yield from _gather(tl, L["o_shard_bytes"], n)
    yield tl.phase("o proj")
    yield from _gemm(tl, L, "o", L["o_in_bytes"])
    first = "router" if "moe" in L else "up"       # the FFN's first GEMM
    if sp:
        yield from _scattered(tl, "o reduce-scatter", L, gather=False, prefetch=first)
    else:
        yield from _allreduce(tl, "o all-reduce", L["x_bytes"], L["collective"], pe, L["n_pe"], cube_rank,
                              prefetch=(L, first))
    yield tl.phase("ffn norm")
    yield tl.math(own, "add")
    yield from _norm(tl, own, L["norm"])
    if "moe" in L:
        acc = yield from moe.moe_ffn(tl, L, pe, cube_rank, _prefetch(tl, L, "qkv"))
        yield tl.phase("residual")
        yield tl.math(own, "add")
        if sp:
            tl.same(qkv_in, acc)
        return acc
    if sp:
        up_in = yield from _scattered(tl, "ffn all-gather", L, gather=True)
    yield tl.phase("ffn up")
    yield from _gemm(tl, L, "up", L["x_bytes"])
    yield tl.phase("activation")
    yield from activation(tl, L["act_elems"], L["ffn_kind"])
    yield tl.phase("ffn down")
    yield from _gemm(tl, L, "down", L["h_bytes"])
    if sp:
        acc = yield from _scattered(tl, "ffn reduce-scatter", L, gather=False, prefetch="qkv")
    else:       # the next layer's QKV: the prefetch wraps to this layer's (kbfast.workloads.commands)
        acc = yield from _allreduce(tl, "ffn all-reduce", L["x_bytes"], L["collective"], pe, L["n_pe"], cube_rank,
                                    prefetch=(L, "qkv"))
    yield tl.phase("residual")
    yield tl.math(own, "add")
    if sp:                                   # each gather brought every PE's slice, once
        tl.same(qkv_in, acc)
        tl.same(up_in, acc)
    return acc


def head_kernel(tl: Tl):
    """The final norm, the LM head's column-parallel GEMM and greedy sampling on one working PE: the
    maximum of its vocabulary shard (MATH), then an all-reduce of every user's (value, index) pair that
    keeps the maximum (kept in registers: no tile load or store)."""
    H = tl.info["head"]
    cube_rank, pe = divmod(tl.rank, H["n_pe"])
    yield tl.phase("final norm")
    yield from _norm(tl, H["x_elems"], H["norm"])
    yield tl.phase("lm head")
    yield from _gemm(tl, H, "gemm", H["x_bytes"])
    yield tl.phase("sampling")
    yield tl.math(H["logit_elems"], "max")
    return (yield from _allreduce(tl, "sampling all-reduce", H["argmax_bytes"], H["collective"], pe, H["n_pe"],
                                  cube_rank, tile_io=False))


def mlp_kernel(tl: Tl):
    """The TP MLP on one working PE: column-parallel GEMM, row-parallel GEMM, all-reduce of the output."""
    M = tl.info["mlp"]
    cube_rank, pe = divmod(tl.rank, M["n_pe"])
    yield tl.phase("column")
    yield from _gemm(tl, M, "column", M["x_bytes"])
    yield tl.phase("row")
    yield from _gemm(tl, M, "row", M["h_bytes"])
    return (yield from _allreduce(tl, "all-reduce", M["out_bytes"], M["collective"], pe, M["n_pe"], cube_rank))


def allreduce_kernel(tl: Tl):
    """A piece's all-reduce alone (:func:`allreduce_piece`), as ``auto`` times its candidates."""
    A = tl.info["allreduce"]
    cube_rank, pe = divmod(tl.rank, A["n_pe"])
    return (yield from _allreduce(tl, "all-reduce", A["bytes"], A["collective"], pe, A["n_pe"], cube_rank,
                                  A["tile_io"]))


# the kernels whose ops depend on the rank through their all-reduce alone (trace_roles), by their info key
_UNIFORM_KERNELS = {layer_kernel: "layer", head_kernel: "head", mlp_kernel: "mlp", allreduce_kernel: "allreduce"}


def allreduce_message(piece: Piece) -> tuple[int, bool]:
    """The size and the tile I/O of ``piece``'s all-reduce (its layer's, LM head's or MLP's)."""
    a = piece.info[piece.allreduce]
    return a["allreduce_bytes"], a["allreduce_tile_io"]


def with_fields(piece: Piece, **fields) -> Piece:
    """``piece`` with ``fields`` set in its kernel's info (the info key of its all-reduce's fields)."""
    key = piece.allreduce
    return dataclasses.replace(piece, info=dict(piece.info, **{key: dict(piece.info[key], **fields)}))


def with_collective(piece: Piece, algorithm: str) -> Piece:
    """``piece`` with its all-reduce run by ``algorithm``."""
    return with_fields(piece, collective=algorithm)


def prefetched(piece: Piece) -> tuple[str, ...]:
    """The GEMM commands ``piece`` prefetches, by their info key (a transformer layer under ``--overlap
    prefetch``: the FFN up projection behind the o all-reduce, and the next layer's QKV behind the FFN's)."""
    fields = piece.info.get(piece.allreduce, {}) if piece.allreduce else {}
    first = "router" if "moe" in fields else "up"
    return (first, "qkv") if fields.get("overlap") == "prefetch" else ()


def allreduce_piece(piece: Piece, algorithm: str) -> Piece:
    """``piece``'s all-reduce alone, on its PEs and wiring, by ``algorithm``: no GEMM, no other stage."""
    nbytes, tile_io = allreduce_message(piece)
    fields = {"n_pe": piece.info[piece.allreduce]["n_pe"], "bytes": nbytes, "tile_io": tile_io,
              "collective": algorithm}
    info = dict({k: v for k, v in piece.info.items() if k != piece.allreduce}, allreduce=fields)
    return Piece("all-reduce", piece.nodes, piece.labels, piece.peer, piece.roles, allreduce_kernel, info, [], 0,
                 groups=piece.groups)


def panel_kernel(tl: Tl):
    """An attention panel: the attention kernel alone on its ring (spec_pe §11.4)."""
    return (yield from _attention(tl, tl.info["attn"], tl.n_ranks, ("E", "W")))


# -- compilation -------------------------------------------------------------------------------------------
class _Table:
    """The GEMM command table being filled, with the PE's HBM map: weights from 0, a region per use after."""

    def __init__(self, t: Tables):
        self.t, self.commands, self.macs = t, [], 0
        self.tcm_budget = t.spec.pe.tcm_kib * 1024

    def add(self, m: int, n: int, k: int, b_addr: int, count: int = 1) -> int:
        """A command with B at ``b_addr`` and A pinned in TCM (loaded by the kernel, or already there) when A
        fits there beside the tile buffers (``pe.tcm_kib``, GemmPlan.tcm_bytes), else streamed tile by tile
        from address 0 of the PE's slice, as B is (a prefill's activations: 32 MiB for 2048 tokens of
        Llama-3-70B).  Refused when even the streamed tiles do not fit."""
        pe = self.t.spec.pe
        plan = plan_gemm(pe, m, n, k, a_pinned=True)
        if sum(plan.tcm_bytes()) > self.tcm_budget:
            plan = plan_gemm(pe, m, n, k, a_pinned=False)
            if sum(plan.tcm_bytes()) > self.tcm_budget:
                need = budget.fmt_bytes(sum(plan.tcm_bytes()))
                raise KbfastError(f"a {m} x {n} x {k} GEMM's tile buffers take {need} of TCM ({pe.tile_buffers} A "
                                  f"and B tiles in flight and a C tile), over its "
                                  f"{budget.fmt_bytes(self.tcm_budget)} (pe.tcm_kib {pe.tcm_kib})\n  hint: raise "
                                  "pe.tcm_kib, or lower pe.tile_buffers or the tile (pe.tile)")
        a, b, c = plan.operand_bytes()
        self.commands.append(GemmCommand(plan, a_addr=0, b_addr=b_addr, c_addr=b_addr + b))
        self.macs += plan.macs * count
        return len(self.commands) - 1

    def pinned(self) -> tuple[bool, ...]:
        """Per command: is its A pinned in TCM (and loaded by the kernel when it loads one)?"""
        return tuple(c.plan.a_pinned for c in self.commands)

    def tcm_use(self) -> dict[str, int]:
        """The TCM the commands need at most (one command at a time: tiles of different commands never
        interleave): its pinned operands and its tile buffers, and how many commands stream A."""
        need = [c.plan.tcm_bytes() for c in self.commands]
        top = max(range(len(need)), key=lambda i: sum(need[i])) if need else None
        return {"tcm_pinned": need[top][0] if need else 0, "tcm_tiles": need[top][1] if need else 0,
                "a_streamed": sum(not c.plan.a_pinned for c in self.commands), "commands": len(self.commands)}


def _attention_dims(t: Tables, table: _Table, kernel: str, users: int, q_per_kv: int, kv_heads: int, d: int,
                    q_rows: int, kv_rows: int, base: int, steps: int = 1) -> dict:
    """The attention's commands and sizes for one rank: ``q_rows`` query tokens per user and ``kv_rows``
    keys per block; ``q_per_kv`` query heads share each of the rank's ``kv_heads`` KV heads; ``steps``: how
    many times the rank runs them (mesh_kv: once per KV block around its ring)."""
    elem = t.spec.pe.elem_bytes
    m = q_per_kv * q_rows
    pairs = users * kv_heads
    score = table.add(m, kv_rows, d, base, count=pairs * steps)
    pv = table.add(m, d, kv_rows, base + users * kv_heads * kv_rows * d * elem, count=pairs * steps)
    q_heads = q_per_kv * kv_heads
    return {"kernel": kernel, "users": users, "kv_heads": kv_heads, "score": score, "pv": pv,
            "score_elems": m * kv_rows,
            "partial_bytes": users * q_heads * q_rows * (d + 2) * PARTIAL_BYTES,
            "partial_elems": users * q_heads * q_rows * (d + 2),
            "block_bytes": 2 * users * kv_heads * kv_rows * d * elem}


def _fix(layout: str, P: int, C: int) -> str:
    return f"choose a SIP count, layout or model whose sizes divide (layout {layout}: {P} PEs in {C} cubes)"


def _cube_group(t: Tables, model: Transformer, C: int, fix: str) -> int:
    """Cubes per attention group over ``C`` working cubes: heads over cubes (1), or (more cubes than heads)
    a head over a group of cubes."""
    if C <= model.heads:
        return 1
    group = _divide(f"{model.name}: cubes per query head ({C} cubes, {model.heads} heads)", C, model.heads, fix)
    _divide(f"{model.name}: head groups of {group} cubes in a SIP", t.layout.n_cubes_per_sip, group, fix)
    return group


def attention_ring(t: Tables, model: Transformer, layout: str) -> int:
    """The PEs of a transformer's attention ring on ``layout`` (:func:`compile_model`'s ``ring``: the working
    PEs of an attention group's cubes), without compiling a step."""
    nodes, n_pe = _working(t, layout)
    P, C = len(nodes), len(nodes) // n_pe
    return _cube_group(t, model, C, _fix(layout, P, C)) * n_pe


def compile_model(t: Tables, model: Model, shape: Shape | None = None, layout: str = "tp_pes",
                  layer: int = 0, collective: str | None = None, sequence_parallel: bool | None = None,
                  overlap: str | None = None, fit_hbm: bool = True, pp: int | None = None, dp: int | None = None,
                  micro_batches: int | None = None, ep: int | None = None,
                  hot_expert: float | None = None) -> list[Piece]:
    """The pieces of one step of ``model`` (a transformer: its layer, repeated ``layers`` times, and the LM
    head; an MLP: one piece; attention panels: one piece per panel).  ``layer`` places the layer's weights
    (layer ``l`` at ``l`` x its aligned size, so every layer times alike; tests prove it).  ``collective``
    (default: the model's own, ``auto`` unless its file says otherwise) runs its all-reduces
    (kbfast.workloads.collectives.in_model); ``auto`` is left for kbfast.measure.model to choose.
    ``sequence_parallel`` (transformers): reduce-scatter and all-gather around the norms in place of the
    all-reduces (:func:`layer_kernel`).  ``overlap`` (transformers; default ``prefetch``): OVERLAPS.
    ``fit_hbm`` False: a transformer step whose weights, KV cache and activations exceed a working PE's HBM
    slice is compiled all the same (its timing does not depend on the slice's size: an address picks its
    pseudo-channel by its low bits); a serving run, which holds its KV cache to what fits itself, times its
    steps so (kbfast.serving.costs).  ``pp``, ``dp``, ``micro_batches`` (transformers): pipeline stages,
    data-parallel replicas and micro-batches (kbfast.workloads.parallel; :func:`_compile_split`).  ``ep``,
    ``hot_expert`` (mixtures of experts): the expert-parallel degree and the hottest expert's share of the
    routed slots (kbfast.workloads.moe)."""
    refuse_unread(model, {"collective": collective, "sequence_parallel": sequence_parallel, "overlap": overlap,
                          "pp": pp, "dp": dp, "micro_batches": micro_batches, "ep": ep, "hot_expert": hot_expert})
    if isinstance(model, Transformer) and (pp, dp, micro_batches) != (None, None, None):
        s = shape or shape_for(model)
        par = parallel.split(t, pp, dp, micro_batches, s.batch)
        if par.groups > 1:
            return _compile_split(t, model, s, layout, layer, collective, sequence_parallel, overlap, fit_hbm, par,
                                  ep, hot_expert)
    if isinstance(model, AttentionPanels):
        return [_panel(t, model, name, p) for name, p in model.panels.items()]
    collective = in_model.check_choice(collective or model.collective)
    nodes, n_pe = _working(t, layout)
    P, C = len(nodes), len(nodes) // n_pe
    if isinstance(model, Mlp):
        labels, peer, roles, info = _wiring(t, n_pe)
        info["elem"] = t.spec.pe.elem_bytes
        return [_mlp(t, model, nodes, n_pe, labels, peer, roles, info, layout, collective)]
    s = shape or shape_for(model)
    sp = bool(sequence_parallel)
    overlap = overlap or DEFAULT_OVERLAP
    check_overlap(overlap)
    if sp and collective not in (in_model.AUTO,) + in_model.SCATTERING:
        raise KbfastError(f"--sequence-parallel needs an all-reduce that splits into a reduce-scatter and an "
                          f"all-gather; {collective} does not\n  hint: use --collective "
                          f"{', '.join(in_model.SCATTERING)} or auto")
    fix = _fix(layout, P, C)
    group = _cube_group(t, model, C, fix)
    G = C // group
    labels, peer, roles, info = _wiring(t, n_pe, group)
    elem = t.spec.pe.elem_bytes
    info["elem"] = elem
    table = _Table(t)
    T, d, hid = s.tokens, model.head_dim, model.hidden
    m = group * n_pe                                    # the PEs of an attention group: its ring
    q_grp = _divide(f"{model.name}: query heads per attention group ({model.heads} heads over {G} groups of "
                    f"{group} cube{'s' if group != 1 else ''})", model.heads, G, fix)
    if model.kv_heads >= G:
        kv_grp = _divide(f"{model.name}: KV heads per attention group", model.kv_heads, G, fix)
    else:
        _divide(f"{model.name}: attention groups per KV head ({G} groups, {model.kv_heads} KV heads)", G,
                model.kv_heads, fix)
        kv_grp = 1
    q_per_kv = q_grp // kv_grp
    qkv_pe = _divide(f"{model.name}: QKV columns per PE of an attention group", (q_grp + 2 * kv_grp) * d, m, fix)
    o_pe = _divide(f"{model.name}: O rows per PE of an attention group", q_grp * d, m, fix)
    up_mult = model.up_cols // model.ffn                 # gate and up fused under SwiGLU
    if model.moe:
        ep = moe.check_ep(moe.default_ep(model.experts, P) if ep is None else ep, model.experts, P, fix)
        ffn_pe = _divide(f"{model.name}: an expert's FFN columns per PE of its block ({model.ffn} over {P // ep} "
                         f"PEs, --ep {ep})", model.ffn, P // ep, fix)
        router_k = _divide(f"{model.name}: hidden elements per PE ({hid} over {P} PEs, sequence parallel)", hid,
                           P, fix) if sp else hid
        ffn_w = (model.experts // ep) * (hid * ffn_pe * up_mult + ffn_pe * hid) + router_k * model.experts
    else:
        ffn_pe = _divide(f"{model.name}: FFN columns per PE ({model.ffn} over {P} PEs)", model.ffn, P, fix)
        ffn_w = hid * ffn_pe * up_mult + ffn_pe * hid
    up_pe = ffn_pe * up_mult
    w_bytes = (hid * qkv_pe + o_pe * hid + ffn_w) * elem
    stride = -(-w_bytes // LAYER_ALIGN) * LAYER_ALIGN
    base = layer * stride
    qkv = table.add(T, qkv_pe, hid, base)
    o = table.add(T, hid, o_pe, base + hid * qkv_pe * elem)
    ffn_base = base + (hid * qkv_pe + o_pe * hid) * elem
    if model.moe:
        ffn = moe.compile_ffn(table, model, T, P, ep, hot_expert, router_k, ffn_pe, up_pe, ffn_base, elem)
    else:
        ffn = {"up": table.add(T, up_pe, hid, ffn_base), "down": table.add(T, hid, ffn_pe, ffn_base + hid * up_pe *
                                                                              elem)}
    kv_base = model.layers * stride
    if s.phase == "decode":
        kv_rows = _divide(f"{model.name}: KV cache rows per PE of an attention group (--kv-len {s.kv_len})",
                          s.kv_len, m, f"use a --kv-len divisible by {m}")
        attn = _attention_dims(t, table, "mesh_mlo", s.batch, q_per_kv, kv_grp, d, 1, kv_rows,
                               kv_base + layer * s.batch * kv_grp * kv_rows * d * elem * 2)
        cache_rows = kv_rows
    else:
        rows = _divide(f"{model.name}: query tokens per PE of an attention group (--seq {s.seq})", s.seq, m,
                       f"use a --seq divisible by {m}")
        attn = _attention_dims(t, table, "mesh_kv", s.batch, q_per_kv, kv_grp, d, rows, rows, kv_base, steps=m)
        cache_rows = rows
    cache = model.layers * s.batch * kv_grp * cache_rows * d * elem * 2
    acts = (2 * hid + qkv_pe + o_pe + up_pe) * T * elem          # input, output, QKV, O and FFN, each once
    if model.moe:                        # the FFN's: the tokens dispatched to the PE's block, and their activations
        acts = (2 * hid + qkv_pe + o_pe) * T * elem + max(ffn["moe"]["loads_per_block"]) * (hid + up_pe) * elem
    if fit_hbm:
        _fits(t, model, layout, model.layers * stride + cache + acts, f"{model.layers} layers of weights "
              f"({budget.fmt_bytes(model.layers * stride)}), the KV cache ({budget.fmt_bytes(cache)}) and a "
              f"layer's activations ({budget.fmt_bytes(acts)})")
    info["layer"] = {
        "n_pe": n_pe, "ring": m, "norm": model.norm, "ffn_kind": model.ffn_kind, "x_elems": T * hid, "x_bytes": T * hid * elem,
        "qkv": qkv, "o": o, **ffn, "attn": attn,
        "qkv_shard_bytes": T * qkv_pe * elem, "o_shard_bytes": T * o_pe * elem // m,
        "o_in_bytes": T * o_pe * elem, "act_elems": T * ffn_pe, "h_bytes": T * ffn_pe * elem,
        "collective": collective, "allreduce_bytes": T * hid * elem, "allreduce_tile_io": True,
        "pinned": table.pinned(), "sequence_parallel": sp, "P": P, "overlap": overlap}
    wiring = (labels, peer, roles)
    if model.moe:                          # the all-to-alls' directions; a block's GEMMs, a rank's message sizes
        wiring = moe.wiring(labels, peer, roles, ffn["moe"], P)
    layer_piece = Piece("layer", nodes, *wiring, layer_kernel, info, table.commands,
                        table.macs * P + (ffn["moe"]["macs"] if model.moe else 0), repeat=model.layers,
                        allreduce="layer", memory=_memory(t, table, model.layers * stride, cache, acts))
    head_table = _Table(t)
    vocab_pe = -(-model.vocab // P)                      # padded to the PE count, as Megatron pads it
    head_info = dict({k: v for k, v in info.items() if k != "layer"}, head={"n_pe": n_pe, "norm": model.norm, "x_elems": s.batch * hid,
                                 "x_bytes": s.batch * hid * elem, "gemm": head_table.add(s.batch, vocab_pe, hid, 0),
                                 "logit_elems": s.batch * vocab_pe, "argmax_bytes": s.batch * ARGMAX_BYTES,
                                 "collective": collective, "allreduce_bytes": s.batch * ARGMAX_BYTES,
                                 "allreduce_tile_io": False, "pinned": head_table.pinned()})
    head_mem = _memory(t, head_table, hid * vocab_pe * elem, 0, (hid + vocab_pe) * s.batch * elem)
    return [layer_piece, Piece("head", nodes, labels, peer, roles, head_kernel, head_info, head_table.commands,
                               s.batch * hid * model.vocab,       # the vocabulary's padding is not useful work
                               allreduce="head", memory=head_mem)]


def _compile_split(t: Tables, model: Transformer, s: Shape, layout: str, layer: int, collective: str | None,
                   sequence_parallel: bool | None, overlap: str | None, fit_hbm: bool,
                   par: parallel.Parallel, ep: int | None = None, hot_expert: float | None = None) -> list[Piece]:
    """A step split ``par.pp`` x ``par.dp`` ways (kbfast.workloads.parallel): the layer of a stage (``layers /
    pp`` of them, a micro-batch's users) on stage 0 of every replica, the LM head on the last stage, and with a
    pipeline the hand-off between two stages and the tokens' trip back, each compiled on a group's own tray
    and placed on the whole.  A stage's memory is its layers' weights and KV cache for all of a replica's
    users (checked against the HBM slice unless ``fit_hbm`` is False)."""
    if model.layers % par.pp:
        raise KbfastError(f"--pp {par.pp}: {model.name}'s {model.layers} layers do not divide into {par.pp} stages"
                          f"\n  hint: use a --pp that divides {model.layers}")
    small = parallel.sub_tables(t, par)
    stage = model.model_copy(update={"layers": model.layers // par.pp})
    replica = dataclasses.replace(s, batch=s.batch // par.dp)
    micro = dataclasses.replace(replica, batch=replica.batch // par.micro_batches)
    opts = {"layout": layout, "layer": layer, "collective": collective, "sequence_parallel": sequence_parallel,
            "overlap": overlap, "ep": ep, "hot_expert": hot_expert}
    held = compile_model(small, stage, replica, fit_hbm=fit_hbm, **opts)
    one, head = held if micro == replica else compile_model(small, stage, micro, fit_hbm=False, **opts)
    one = dataclasses.replace(one, memory=held[0].memory)
    replicas = range(par.dp)
    out = [parallel.place(one, [parallel.nodes_at(t, small, one.nodes, par, k, 0) for k in replicas]),
           parallel.place(head, [parallel.nodes_at(t, small, head.nodes, par, k, par.pp - 1) for k in replicas])]
    if par.pp > 1:
        x_bytes = one.info["layer"]["x_bytes"]
        out += [parallel.handoff_piece(t, small, one, par, x_bytes),
                parallel.token_piece(t, small, one, par, micro.batch)]
    return out


def pipeline_kernel(tl: Tl):
    """A whole pipelined step on one working PE (:func:`pipeline_piece`): for each round and micro-batch, the
    stage's hand-off in (stage 0 after the first round: the last stage's tokens), its layers, the LM head on
    the last stage, the hand-off out (the last stage: the tokens back to stage 0).  Returns what the rank
    holds at the end: its stage's contributions and the previous stage's."""
    P = tl.info["pipeline"]
    stage, i = divmod(tl.rank, P["ranks"])
    S = P["stages"]
    me = parallel.local(tl, i, P["ranks"])
    out = None
    for r in range(P["rounds"]):
        for _ in range(P["micro_batches"]):
            got = None
            if stage > 0:
                got = yield from parallel.handoff_recv(me, P["handoff"])
            elif r > 0:
                yield me.phase("pp tokens in")
                yield me.recv(parallel.PIPE[1], P["token_bytes"])
            for _ in range(P["layers"]):
                acc = yield from layer_kernel(me)
            if stage < S - 1:
                yield from parallel.handoff_send(me, P["handoff"])
            else:
                acc = yield from head_kernel(me)
                if r < P["rounds"] - 1:
                    yield me.phase("pp tokens out")
                    yield me.send(parallel.PIPE[0], me.contribution(), P["token_bytes"])
            out = acc if got is None else me.add(got, acc)
    return out


def pipeline_piece(t: Tables, pieces: list[Piece], par: parallel.Parallel, layers: int, rounds: int = 1) -> Piece:
    """A pipelined step as one Program (exact mode's replay of what the fast path composes,
    kbfast.measure.pipeline): every stage of every replica, ``rounds`` steps of ``par.micro_batches``
    micro-batches each, from :func:`_compile_split`'s pieces with their collectives chosen (layer, head,
    hand-off, tokens); ``layers`` per stage."""
    layer, head, handoff, token = pieces
    small = parallel.sub_tables(t, par)
    n_pe = layer.info["layer"]["n_pe"]
    R = layer.info["group"]["ranks"]
    local = pe_nodes(small, n_pe)
    one = dataclasses.replace(layer, nodes=local, peer=layer.peer[:R], roles=layer.roles[:R])
    labels, peer, roles = parallel.stage_wiring(one, par.pp)
    off = len(layer.commands)
    H = head.info["head"]
    pinned = layer.info["layer"]["pinned"] + H["pinned"]
    info = {key: v for key, v in layer.info.items() if key not in ("group", "layer")}
    info.update(layer=dict(layer.info["layer"], pinned=pinned), head=dict(H, gemm=H["gemm"] + off, pinned=pinned),
                pipeline={"ranks": R, "stages": par.pp, "micro_batches": par.micro_batches, "rounds": rounds,
                          "layers": layers, "handoff": handoff.info["hand-off"],
                          "token_bytes": token.info["token"]["bytes"]})
    rank = np.arange(par.pp * R)
    lo = np.maximum(rank // R - 1, 0) * R
    groups = np.stack([lo, (rank // R + 1) * R], axis=1)
    whole = Piece("pipeline", np.concatenate([local] * par.pp), labels, peer, roles, pipeline_kernel, info,
                  layer.commands + head.commands, 0)
    blocks = [np.concatenate([parallel.nodes_at(t, small, local, par, k, s) for s in range(par.pp)])
              for k in range(par.dp)]
    return parallel.place(whole, blocks, np.concatenate([groups + k * par.pp * R for k in range(par.dp)]))


def _mlp(t, model: Mlp, nodes, n_pe, labels, peer, roles, info, layout, collective: str) -> Piece:
    d_in, d_h, d_out = model.dims
    P = len(nodes)
    if d_h % P:
        raise KbfastError(f"{model.name}: d_hidden {d_h} does not divide over the world of {P} PEs "
                          f"({t.layout.n_sips} SIPs, layout {layout}); the world size must divide {d_h}: "
                          "use 1, 2, 4, 8 or 16 SIPs")
    elem = t.spec.pe.elem_bytes
    table = _Table(t)
    h = d_h // P
    column = table.add(model.batch, h, d_in, 0)
    row = table.add(model.batch, d_out, h, 1 << 20)
    info = dict(info, mlp={"n_pe": n_pe, "column": column, "row": row, "x_bytes": model.batch * d_in * elem,
                           "h_bytes": model.batch * h * elem, "out_bytes": model.batch * d_out * elem,
                           "collective": collective, "allreduce_bytes": model.batch * d_out * elem,
                           "allreduce_tile_io": True, "pinned": table.pinned()})
    mem = _memory(t, table, (d_in * h + h * d_out) * elem, 0, model.batch * (d_in + h + d_out) * elem)
    return Piece("mlp", nodes, labels, peer, roles, mlp_kernel, info, table.commands, table.macs * P,
                 allreduce="mlp", memory=mem)


def _panel(t: Tables, model: AttentionPanels, name: str, p: Panel) -> Piece:
    lay = t.layout
    if p.rank_axis == 0:
        have = len(t.plan.pe_router)
        if p.n_ranks > have:
            raise KbfastError(f"panel {name}: {p.n_ranks} ranks on the PEs of one cube, which has {have}")
        nodes = pe_nodes(t, p.n_ranks)[:p.n_ranks]
    else:
        if p.n_ranks > lay.n_cubes_per_sip:
            raise KbfastError(f"panel {name}: {p.n_ranks} ranks on cubes, SIP 0 has {lay.n_cubes_per_sip}")
        nodes = pe_nodes(t, 1)[:p.n_ranks]
    n = p.n_ranks
    table = _Table(t)
    kv_rows = model.kv_len // n
    if p.kernel == "mesh_mlo":
        attn = _attention_dims(t, table, "mesh_mlo", 1, p.s_q, 1, model.d_head, 1, kv_rows, 0)
    else:
        rows = _divide(f"panel {name}: query rows per rank", p.s_q, n, "use an s_q divisible by n_ranks")
        attn = _attention_dims(t, table, "mesh_kv", 1, 1, 1, model.d_head, rows, kv_rows, 0)
    labels, peer = ring_peers(n)
    info = {"elem": t.spec.pe.elem_bytes, "attn": attn}
    mem = _memory(t, table, 0, kv_rows * model.d_head * 2 * t.spec.pe.elem_bytes, 0)
    steps = 1 if p.kernel == "mesh_mlo" else n
    return Piece(name, nodes, labels, peer, np.zeros((n, 1), np.int64), panel_kernel, info, table.commands,
                 table.macs * n * steps, memory=mem)


def _memory(t: Tables, table: _Table, weights: int, kv_cache: int, activations: int) -> dict[str, int]:
    """What one working PE holds, bytes: in its HBM slice the weights (every layer's, for a layer), the KV cache
    and the activations; in TCM the largest command's pinned operands and tile buffers (_Table.tcm_use); and
    the two budgets."""
    return {"weights": weights, "kv_cache": kv_cache, "activations": activations, **table.tcm_use(),
            "hbm_slice": t.spec.hbm_slice_bytes, "tcm": table.tcm_budget}


def _fits(t: Tables, model: Model, layout: str, per_pe: int, what: str) -> None:
    budget.check_hbm_slice(t.spec, per_pe, f"{model.name} does not fit layout {layout} on {t.layout.n_sips} SIPs: "
                           f"each working PE holds {what}", "use more SIPs (--set sips.count=N), layout tp_pes, "
                           "or a shorter --kv-len / smaller --batch")


def trace_roles(piece: Piece) -> np.ndarray:
    """The roles ``piece``'s ranks are traced by (kbfast.workloads.symbolic.run_traced: one trace per role).  Its
    own (:func:`_wiring`: a cube's first PE runs lrab's mesh and inter-SIP phases by its cube's place, every PE a
    chain by its own) where lrab runs; else one role for every rank: in a layer, the LM head, the TP MLP and an
    all-reduce alone, only lrab reads the rank, and hier2d's and ring_pipe's ranks all run the same ops
    (kbfast.workloads.collectives.hier2d, ring_pipe), so a trace per cube and PE would repeat one template; a
    mixture of experts' layer keeps the roles its routing adds (kbfast.workloads.moe.wiring).
    ``tests/test_models.py`` builds both ways and compares."""
    key = _UNIFORM_KERNELS.get(piece.kernel)
    fields = piece.info.get(key, {}) if key else {}
    if key is None or fields.get("collective") == "lrab":
        return piece.roles
    if "moe" in fields:                 # the experts' block, and the rank where the blocks' loads differ
        return piece.roles[:, -moe.ROLE_COLUMNS:]
    return np.zeros((len(piece.nodes), 1), np.int64)


def build_piece(t: Tables, router: Router, piece: Piece, lower, launch_ns: float | None = None) -> Program:
    """The Program of ``piece`` with its GEMM commands lowered by ``lower`` (kbfast.workloads.commands); the
    kernel starts at the launch barrier (``launch_ns``: its time when the caller knows it)."""
    b = ProgramBuilder(t, router, name=piece.name)
    tl_info = dict(piece.info)
    kernel = piece.kernel
    if "group" in tl_info:              # placed on groups (kbfast.workloads.parallel.place): each rank in its own
        tl_info["group"], kernel = dict(tl_info["group"], kernel=kernel), parallel.grouped_kernel
    run_traced(b, b.pe_agents(piece.nodes), wire(piece.labels, piece.peer), kernel, tl_info.get("elem", 2),
               trace_roles(piece), tl_info, lower=lower, cache=True, groups=piece.groups)
    if launch_ns is None:
        launch_ns = launch_timing(t, router, piece.nodes).target_start_ns
    return b.build(launch_ns=launch_ns)
