"""Pipeline and data parallelism: a tensor-parallel layout on each group of SIPs or cubes, side by side.

docs/models.md "Pipeline and data parallelism" walks through it.  The tray's ``S`` SIPs split into
``pp x dp`` groups of ``g = S / (pp dp)`` consecutive SIPs, or, when ``pp x dp`` is a multiple of ``S``, each
SIP into groups of whole rows of its cubes; group ``k pp + s`` holds pipeline stage ``s`` of data-parallel
replica ``k``, and runs the layout (``tp_pes``, ``tp_cubes``) on its SIPs or cubes as the whole tray would, with
``layers / pp`` layers and ``batch / dp`` users.  A stage's users flow through it in ``M``
micro-batches; the last stage adds the LM head.  Between stages, each working PE ``i`` of a stage sends its
``1 / R`` of a micro-batch's activations to PE ``i`` of the next stage, whose ``R`` PEs all-gather them
(:func:`handoff_send`, :func:`handoff_recv`: the scatter-gather hand-off); the last stage sends each
micro-batch's sampled tokens back to stage 0, where the next step's tokens start.

Every group's pieces are compiled on a tray of the group's size (:func:`sub_tables`) and placed on their SIPs
or cubes of the whole tray (:func:`nodes_at`, :func:`place`): the same PEs, wiring and roles, shifted by whole
SIPs or rows of cubes (a SIP's node ids are a block, a cube's too; routes are the whole tray's, and between
two cubes of a group they stay in its rows: a detour out of them is longer).  Pieces placed on
several groups run side by side in one Program, contending wherever their traffic meets; each group's ranks
must end with their own group's contributions (kbfast.workloads.symbolic.run_traced's ``groups``).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np

from kbfast.config.schema import GRID_TOPOLOGIES
from kbfast.errors import KbfastError
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import cube_locals
from kbfast.workloads.collectives import in_model
from kbfast.workloads.kernels import Tl

PIPE = ("pipe_E", "pipe_W")       # to the next stage, from the previous one (a ring over the stages)
TOKEN_BYTES = 4                   # a sampled token id, i32, per user
HANDOFF_GATHER = "hier2d"         # the next stage's all-gather of the handed-off activations


@dataclass(frozen=True)
class Parallel:
    """How a step splits the tray: ``pp`` pipeline stages, ``dp`` data-parallel replicas, ``micro_batches``
    per stage and step; a group is ``sips`` whole SIPs, or (``rows`` > 0) ``rows`` rows of one SIP's cubes."""

    pp: int = 1
    dp: int = 1
    micro_batches: int = 1
    sips: int = 1
    rows: int = 0

    @property
    def groups(self) -> int:
        """Groups: one per (replica, stage)."""
        return self.pp * self.dp

    def where(self, t: Tables, replica: int, stage: int) -> tuple[int, int]:
        """Replica ``replica``'s stage ``stage``: its first SIP and first row of cubes."""
        g = replica * self.pp + stage
        if not self.rows:
            return g * self.sips, 0
        per = t.layout.cube_h // self.rows
        return g // per, g % per * self.rows

    def group_text(self) -> str:
        """What a group is: ``1 SIP``, ``2 SIPs``, ``2 cube rows``."""
        if self.rows:
            return f"{self.rows} cube row{'s' if self.rows > 1 else ''}"
        return f"{self.sips} SIP{'s' if self.sips > 1 else ''}"

    def label(self, layout: str) -> str:
        """``tp_pes``, or ``tp_pes pp2 dp1 mb2`` with pipeline or data parallelism."""
        if self.groups == 1:
            return layout
        return f"{layout} pp{self.pp} dp{self.dp}" + (f" mb{self.micro_batches}" if self.pp > 1 else "")


def split(t: Tables, pp: int | None, dp: int | None, micro_batches: int | None, users: int | None) -> Parallel:
    """Check the degrees against the tray and the users (``users``: the step's batch; None for a model with no
    step shape) and return the split: groups of whole SIPs when ``pp x dp`` divides the SIPs, else of whole
    rows of cubes when it is a multiple of the SIPs and each SIP's rows divide evenly.  ``micro_batches``
    defaults to the largest divisor of a replica's users not above ``pp`` (1 without a pipeline)."""
    pp, dp = 1 if pp is None else pp, 1 if dp is None else dp
    for name, v in (("pp", pp), ("dp", dp), ("micro-batches", micro_batches)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise KbfastError(f"--{name} must be a positive integer (got {v!r})")
    n, rows, g = t.layout.n_sips, t.layout.cube_h, pp * dp
    if n % g and (g % n or rows % (g // n)):
        raise KbfastError(f"--pp {pp} x --dp {dp} = {g} groups: {g} does not divide the tray's {n} SIPs, nor "
                          f"split each SIP's {rows} rows of cubes evenly\n  hint: choose degrees whose product "
                          f"divides {n}, or is {n} times a divisor of {rows}; or another SIP count "
                          "(--set sips.count=N)")
    if users is None:
        if g > 1 or micro_batches not in (None, 1):
            raise KbfastError("--pp, --dp and --micro-batches split a transformer's step; this model has none")
        return Parallel()
    if users % dp:
        raise KbfastError(f"--dp {dp}: the step's {users} users (--batch) do not divide over {dp} replicas\n"
                          f"  hint: use a --batch divisible by {dp}")
    per = users // dp
    if micro_batches is None:
        micro_batches = max(m for m in range(1, min(pp, per) + 1) if per % m == 0)
    if pp == 1 and micro_batches != 1:
        raise KbfastError(f"--micro-batches {micro_batches} needs a pipeline (--pp 2 or more)")
    if per % micro_batches:
        raise KbfastError(f"--micro-batches {micro_batches}: a replica's {per} users do not divide into "
                          f"{micro_batches} micro-batches\n  hint: use a divisor of {per}")
    if n % g == 0:
        return Parallel(pp, dp, micro_batches, n // g)
    return Parallel(pp, dp, micro_batches, 1, rows // (g // n))


_SMALL: dict[str, Tables] = {}      # repr of a group's system -> its tables


def _tables_of(spec) -> Tables:
    key = repr(spec)
    if key not in _SMALL:
        if len(_SMALL) >= 16:
            _SMALL.pop(next(iter(_SMALL)))
        _SMALL[key] = build_tables(spec)
    return _SMALL[key]


def sub_tables(t: Tables, par: Parallel) -> Tables:
    """The tables of a group's own tray: ``t``'s with ``par.sips`` SIPs (a grid SIP topology keeps its width
    when the group is whole rows of it, else the group's SIPs form a ring, ``ring_1d``), or one SIP of
    ``par.rows`` rows of cubes (its IO chiplet's ports on those rows; a group's PEs never use them)."""
    sips = t.spec.sips
    if par.rows:
        mesh = t.spec.sip.cube_mesh.model_copy(update={"h": par.rows})
        chip = t.spec.sip.io_chiplets[0]
        chip = chip.model_copy(update={"cube_ports": [p for p in chip.cube_ports if p.cube[1] < par.rows]})
        sip = t.spec.sip.model_copy(update={"cube_mesh": mesh, "io_chiplets": [chip]})
        one = sips.model_copy(update={"count": 1, "topology": "ring_1d", "w": None, "h": None})
        return _tables_of(t.spec.model_copy(update={"sips": one, "sip": sip}))
    if par.sips == t.layout.n_sips:
        return t
    update: dict = {"count": par.sips}
    if sips.topology in GRID_TOPOLOGIES:
        w, _ = t.spec.sip_grid()
        update = dict(update, w=w, h=par.sips // w) if par.sips % w == 0 else \
            dict(update, topology="ring_1d", w=None, h=None)
    return _tables_of(t.spec.model_copy(update={"sips": sips.model_copy(update=update)}))


def nodes_at(t: Tables, small: Tables, nodes: np.ndarray, par: Parallel, replica: int, stage: int) -> np.ndarray:
    """The nodes of the whole tray ``t`` that the cube nodes ``nodes`` of the group's tray ``small`` are, for
    replica ``replica``'s stage ``stage``: the same node of the same cube, its SIP and row shifted to the
    group's (node ids are blocks: a SIP's after the switch, its IO chiplet's then its cubes' row by row)."""
    sip, row0 = par.where(t, replica, stage)
    ls, lw = small.layout, t.layout
    cube, within = cube_locals(small, nodes)
    y, x = np.divmod(cube, ls.cube_w)
    return lw.cube_node_base(sip + (np.asarray(nodes, np.int64) - 1) // ls.nodes_per_sip,
                             (y + row0) * lw.cube_w + x) + within


def place(piece, blocks: list[np.ndarray], groups: np.ndarray | None = None):
    """``piece`` run side by side on each block of nodes of the whole tray (``blocks``: its nodes in each group,
    :func:`nodes_at`): its ranks repeated per block in that order, their neighbours shifted with them, its
    kernel run on each rank's place within its block (:func:`grouped_kernel`, when it is built).  ``groups``: each rank's range
    of ranks it must end with, when not its own block's."""
    R = len(piece.nodes)
    assert all(len(b) == R for b in blocks)
    k = len(blocks)
    peer = _shifted(piece.peer, k)
    if groups is None:
        lo = np.repeat(np.arange(k, dtype=np.int64) * R, R)
        groups = np.stack([lo, lo + R], axis=1)
    info = dict(piece.info, group={"ranks": R})
    return dataclasses.replace(piece, nodes=np.concatenate(blocks), peer=peer, roles=np.tile(piece.roles, (k, 1)),
                               info=info, groups=groups, macs=piece.macs * k)


def _shifted(peer: np.ndarray, k: int) -> np.ndarray:
    """The neighbour table ``peer`` of ``R`` ranks repeated for ``k`` blocks of ranks, each block's neighbours
    shifted with it (-1 stays)."""
    R = len(peer)
    shift = (np.arange(k, dtype=np.int64) * R)[:, None, None]
    return np.where(peer[None] >= 0, peer[None] + shift, -1).reshape(k * R, -1)


def local(tl: Tl, rank: int, n_ranks: int) -> Tl:
    """``tl`` seen from a group of ``n_ranks`` ranks, as rank ``rank``: the same ops and values (a copy keeps the
    tracer's ``add`` and ``same``), so that a kernel written for a whole tray runs on one group of it."""
    out = copy.copy(tl)
    out.rank, out.n_ranks = rank, n_ranks
    return out


def grouped_kernel(tl: Tl):
    """The kernel ``info["group"]["kernel"]`` on the rank's place within its group (:func:`place`;
    kbfast.workloads.model.build_piece sets the kernel)."""
    g = tl.info["group"]
    return (yield from g["kernel"](local(tl, tl.rank % g["ranks"], g["ranks"])))


# -- the hand-off between stages ---------------------------------------------------------------------------
def handoff_send(tl: Tl, h: dict):
    """Stage ``s``'s side of a hand-off (``tl``: the rank within its stage): its ``1 / R`` of the micro-batch's
    activations loaded from its slice and sent to its peer in stage ``s + 1``.  Returns nothing."""
    yield tl.phase("pp send")
    yield tl.load(h["part"])
    yield tl.send(PIPE[0], tl.contribution(), h["part"])


def handoff_recv(tl: Tl, h: dict):
    """Stage ``s + 1``'s side: the peer's part received, the ``R`` parts all-gathered over the stage
    (:data:`HANDOFF_GATHER`, kbfast.workloads.collectives.in_model) and the whole stored to the slice.
    Returns the senders' contributions (each once)."""
    yield tl.phase("pp receive")
    part = yield tl.recv(PIPE[1], h["part"])
    tl.nbytes, tl.n_elem = h["bytes"], max(h["bytes"] // tl.info["elem"], 1)
    got = part
    if tl.n_ranks > 1:
        got = yield from in_model.all_gather(tl, part, HANDOFF_GATHER, h["n_pe"])
    yield tl.store(h["bytes"])
    return got


def handoff_kernel(tl: Tl):
    """A hand-off alone (:func:`handoff_piece`): ranks ``0 .. R-1`` send, ``R .. 2R-1`` receive."""
    h = tl.info["hand-off"]
    R = h["ranks"]
    stage, i = divmod(tl.rank, R)
    me = local(tl, i, R)
    if stage == 0:
        yield from handoff_send(me, h)
        return me.contribution()
    return (yield from handoff_recv(me, h))


def stage_wiring(piece, stages: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``piece``'s labels, neighbours and roles repeated over ``stages`` consecutive groups of its ranks, with
    the stage ring (:data:`PIPE`) from each rank to the same rank of the next and previous stage, and the
    stage as the roles' first column."""
    R = len(piece.nodes)
    peer = _shifted(piece.peer, stages)
    rank = np.arange(stages * R, dtype=np.int64)
    ring = np.stack([(rank + R) % (stages * R), (rank - R) % (stages * R)], axis=1)
    roles = np.concatenate([np.repeat(np.arange(stages), R)[:, None], np.tile(piece.roles, (stages, 1))], axis=1)
    return list(piece.labels) + list(PIPE), np.concatenate([peer, ring], axis=1), roles


def _between_stages(t: Tables, small: Tables, layer, par: Parallel, name: str, kernel, fields: dict,
                    sender: int, receiver: int, receivers_get: str):
    """A piece from one stage's working PEs to another's (stages ``sender`` and ``receiver``), every PE to the
    same PE of the other stage, on every replica at once; from ``layer``, the layer piece compiled on the
    small tray (its ranks, wiring and roles).  ``fields`` go to the kernel as ``info[name]``; a sender ends
    with its own contribution, a receiver (``receivers_get``) with its peer's, or with every sender's."""
    R = len(layer.nodes)
    labels, peer, roles = stage_wiring(layer, 2)
    info = dict({k: v for k, v in layer.info.items() if k != "layer"}, **{name: dict(fields, ranks=R)})
    rank = np.arange(2 * R)
    lo = np.where(rank < R, rank, 0 if receivers_get == "all" else rank - R)
    hi = np.where(rank < R, rank + 1, R if receivers_get == "all" else rank - R + 1)
    two = dataclasses.replace(layer, name=name, nodes=np.concatenate([layer.nodes, layer.nodes]), labels=labels,
                              peer=peer, roles=roles, kernel=kernel, info=info, commands=[], macs=0, repeat=1,
                              allreduce="", memory={}, groups=None)
    blocks = [np.concatenate([nodes_at(t, small, layer.nodes, par, k, s) for s in (sender, receiver)])
              for k in range(par.dp)]
    return place(two, blocks, np.concatenate([np.stack([lo, hi], axis=1) + k * 2 * R for k in range(par.dp)]))


def handoff_piece(t: Tables, small: Tables, layer, par: Parallel, x_bytes: int):
    """Stage 0 handing a micro-batch's activations (``x_bytes``) to stage 1 (:func:`handoff_kernel`)."""
    R = len(layer.nodes)
    fields = {"bytes": x_bytes, "part": max(x_bytes // R, 1), "n_pe": layer.info["layer"]["n_pe"]}
    return _between_stages(t, small, layer, par, "hand-off", handoff_kernel, fields, 0, 1, "all")


def token_piece(t: Tables, small: Tables, layer, par: Parallel, users: int):
    """The last stage sending a micro-batch's sampled tokens (``users`` x :data:`TOKEN_BYTES`) to stage 0, every
    working PE to its peer (:func:`token_kernel`): what a step's next tokens wait for."""
    return _between_stages(t, small, layer, par, "token", token_kernel, {"bytes": users * TOKEN_BYTES},
                           par.pp - 1, 0, "peer")


def token_kernel(tl: Tl):
    """The tokens' trip back (:func:`token_piece`): ranks ``0 .. R-1`` (the last stage) send, the others receive;
    each receiver ends with its sender's contribution."""
    T = tl.info["token"]
    if tl.rank < T["ranks"]:
        yield tl.phase("pp tokens out")
        yield tl.send(PIPE[0], tl.contribution(), T["bytes"])
        return tl.contribution()
    yield tl.phase("pp tokens in")
    return (yield tl.recv(PIPE[1], T["bytes"]))
