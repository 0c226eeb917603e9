"""GEMM commands inside traced kernels, and the two ways to lower them (docs/models.md "Two lowerings").

A kernel issues ``tl.gemm(i)``: command ``i`` of a :class:`GemmCommand` table, run by the issuing PE on
operands in its own HBM slice.  The trace keeps it as one row (code ``Op.GEMM``, ``nbytes = i``); a
lowering turns the rows into ops when :func:`kbfast.workloads.symbolic.run_traced` emits them:

* :class:`TileLowering` (exact mode): the command becomes the tile pipeline of
  :meth:`kbfast.ir.ProgramBuilder.gemm`: a 0 ns COMPUTE marker, the five helper agents' ops (appended after
  the kernel's ops) and a WAIT for the last C write;
* :class:`TimedLowering` (fast path): the command becomes one COMPUTE op lasting the command's latency,
  which the caller computes once per distinct (command, PE) from the GEMM fast path.

A kernel may also issue ``tl.prefetch(i)`` (a PREFETCH row): command ``i``'s first tiles stream into free
TCM from there, and its next ``tl.gemm(i)`` finds them (docs/models.md "Overlap").  Exact mode reads them
on the PE's reader helper (:func:`kbfast.ir.gemm_pipeline.prefetch_ops`) and runs the command with them
preloaded; the fast path runs the prefetch as a helper op the command waits for (:class:`TimedLowering`).

Both record the command counts per kind (:attr:`counts`), as the reference's op logs show them, and where
each command went (:attr:`command_op`: the op that starts it, :attr:`command_end`: the op that ends it,
:attr:`command_id`: its table row).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kbfast.config import budget
from kbfast.errors import KbfastError
from kbfast.ir import Op, ProgramBuilder, gemm_ops, gemm_ops_count, prefetch_ops, prefetch_ops_count
from kbfast.ir.tiling import GemmPlan
from kbfast.topology.names import own_hbm_ctrls
from kbfast.workloads.templates import PREFETCH

COUNTED = {"gemm": Op.GEMM, "ipcq_send": Op.SEND, "ipcq_recv": Op.RECV, "dma_read": Op.DMA_READ,
           "dma_write": Op.DMA_WRITE, "math": Op.MATH}


@dataclass(frozen=True)
class GemmCommand:
    """One GEMM command: its plan and the byte addresses of A, B and C in the issuing PE's own slice."""

    plan: GemmPlan
    a_addr: int
    b_addr: int
    c_addr: int


@dataclass
class Prefetches:
    """How a Program's ``tl.prefetch`` rows pair with its GEMM rows (:meth:`_Counting.prefetches`).

    Per GEMM row (``gemm``, row indices): ``pre``, the tiles it finds prefetched (0: none), and ``source``, the
    PREFETCH row that streams them (-1: none, or they are in TCM when it starts: a prefetch late in the
    kernel is the next step's, and the kernel's first GEMM of that command finds its tiles).  Per PREFETCH
    row (``rows``): ``tiles``, ``trailing`` (it streams the next step's, and the kernel waits for it at its
    end) and ``tag``, the row whose phase its ops take: its GEMM's, or a trailing one's agent's last row, so
    that a stage ends when its own work does.  ``area``: the TCM bytes the prefetched tiles may take
    (:func:`prefetch_area`)."""

    gemm: np.ndarray
    pre: np.ndarray
    source: np.ndarray
    rows: np.ndarray
    tiles: np.ndarray
    trailing: np.ndarray
    tag: np.ndarray
    area: int


def prefetch_area(b: ProgramBuilder, commands: list[GemmCommand], code, target, nbytes) -> int:
    """The TCM a kernel's prefetches may fill (decisions table, overlap row; docs/models.md "Overlap"): the
    budget (``pe.tcm_kib``) less everything TCM may hold beside them at once: the largest command's pinned
    operand and tile buffers (commands never interleave), the largest tile the kernel loads or stores, and
    the IPCQ slot buffers of the PE that receives on the most, when they live in TCM.  Never below 0."""
    held = max((sum(c.plan.tcm_bytes()) for c in commands), default=0)
    dma = (code == Op.DMA_READ) | (code == Op.DMA_WRITE)
    tile = int(np.max(nbytes[dma], initial=0))
    sends = code == Op.SEND
    slots = b.tcm_slot_bytes(target[sends], nbytes[sends])
    return max(b.t.spec.pe.tcm_kib * 1024 - held - tile - slots, 0)


def _tile_bytes(plan: GemmPlan) -> int:
    """The TCM one prefetched tile takes: its streamed operands' tiles."""
    return (0 if plan.a_pinned else plan.a_tile_bytes) + (0 if plan.b_pinned else plan.b_tile_bytes)


def _streamed(plan: GemmPlan) -> int:
    """How many operands a tile reads (A and B unless pinned)."""
    return (not plan.a_pinned) + (not plan.b_pinned)


@dataclass
class _Counting:
    commands: list[GemmCommand]
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTED, 0))
    command_op: list[int] = field(default_factory=list)
    command_end: list[int] = field(default_factory=list)
    command_id: list[int] = field(default_factory=list)
    prefetched: dict[int, int] = field(default_factory=dict)     # command -> tiles each prefetch streams
    area: int = 0                                                # TCM bytes the prefetches may take

    def prefetch_bytes(self) -> dict[str, int]:
        """The TCM the prefetches may fill (``tcm_prefetch_area``) and the most one of them fills
        (``tcm_prefetch``); empty without a prefetch."""
        if not self.prefetched:
            return {}
        most = max(k * _tile_bytes(self.commands[c].plan) for c, k in self.prefetched.items())
        return {"tcm_prefetch": most, "tcm_prefetch_area": self.area}

    def _count(self, code: np.ndarray) -> None:
        for name, op in COUNTED.items():
            self.counts[name] += int(np.count_nonzero(code == op))

    def _record(self, ops: np.ndarray, ends: np.ndarray, cmd: np.ndarray) -> None:
        self.command_op += np.asarray(ops, np.int64).tolist()
        self.command_end += np.asarray(ends, np.int64).tolist()
        self.command_id += np.asarray(cmd, np.int64).tolist()

    def prefetches(self, b: ProgramBuilder, agent, code, target, nbytes, arg) -> Prefetches:
        """Pair every PREFETCH row with the GEMM row of its command that consumes it on the same agent: the
        next one, or when there is none (a prefetch for the next step) the agent's first; and size the
        prefetches: each command's first ``area // tile bytes`` tiles (:func:`prefetch_area`), at most all and
        at most the row's own limit (its ``arg``: ``tl.prefetch(command, most)``)."""
        gemm = np.flatnonzero(code == Op.GEMM)
        pre, source = np.zeros(len(gemm), np.int64), np.full(len(gemm), -1, np.int64)
        rows = np.flatnonzero(code == PREFETCH)
        if not len(rows):
            return Prefetches(gemm, pre, source, rows, np.zeros(0, np.int64), np.zeros(0, bool), rows, 0)
        self.area = area = prefetch_area(b, self.commands, code, target, nbytes)
        for c, most in sorted(set(zip(nbytes[rows].tolist(), arg[rows].tolist()))):   # one per command and limit
            plan = self.commands[c].plan
            fits = min(plan.n_tile_total, area // _tile_bytes(plan)) if _tile_bytes(plan) else 0
            self.prefetched[c] = int(min(fits, most))
        both = np.concatenate([gemm, rows])
        order = np.lexsort((both, nbytes[both], agent[both]))       # by agent, command, then row
        srt = both[order]
        key = np.stack([agent[srt], nbytes[srt]], 1)
        head = np.concatenate([[True], np.any(key[1:] != key[:-1], 1)])
        group_first = np.maximum.accumulate(np.where(head, np.arange(len(srt)), 0))
        is_pf = code[srt] == PREFETCH
        nxt = np.arange(len(srt)) + 1
        later = nxt < len(srt)
        later[later] &= ~head[nxt[later]]                           # a next row of the same agent and command
        trailing = is_pf & ~later
        consumer = np.where(trailing, group_first, np.minimum(nxt, len(srt) - 1))
        bad = is_pf & (code[srt[consumer]] != Op.GEMM)
        if np.any(bad):
            r = int(srt[np.flatnonzero(bad)[0]])
            raise KbfastError(f"the kernel prefetches GEMM command {int(nbytes[r])} twice before it runs, or never "
                              "runs it")
        pos = np.searchsorted(gemm, srt[consumer[is_pf]])
        tiles = np.array([self.prefetched[int(c)] for c in nbytes[srt[is_pf]].tolist()], np.int64)
        pre[pos] = tiles
        source[pos] = np.where(trailing[is_pf] | (tiles == 0), -1, srt[is_pf])
        last = np.zeros(int(agent.max()) + 1, np.int64)
        np.maximum.at(last, agent, np.arange(len(agent)))
        tag = np.where(trailing[is_pf], last[agent[srt[is_pf]]], srt[consumer[is_pf]])
        back = np.argsort(srt[is_pf])                                # PREFETCH rows in row order
        return Prefetches(gemm, pre, source, srt[is_pf][back], tiles[back], trailing[is_pf][back], tag[back], area)


class TileLowering(_Counting):
    """Exact mode: every command becomes its tile pipeline, every prefetch its reads (module docstring)."""

    def emit(self, b: ProgramBuilder, agent, code, target, nbytes, arg, phase) -> None:
        """Append the emitted rows to ``b``, each GEMM command row expanded into its tile pipeline, each
        PREFETCH row into a 0 ns marker and its reads on the PE's reader helper, and after the rows a WAIT for
        each prefetch of the next step."""
        self._count(code)
        pf = self.prefetches(b, agent, code, target, nbytes, arg)
        g = code == Op.GEMM
        rep = np.where(g, 2, 1)
        src = np.repeat(np.arange(len(code)), rep)
        first = np.cumsum(rep) - rep                    # each row's first position after the expansion
        agent, code, target, nbytes, arg, phase = (np.asarray(x)[src].copy() for x in
                                                   (agent, code, target, nbytes, arg, phase))
        rows = np.flatnonzero(g)
        cmd = np.asarray(nbytes)[first[rows]].copy()
        marker, wait = first[rows], first[rows] + 1
        live = pf.tiles > 0                               # prefetches with tiles to read
        tag_phase = np.asarray(phase)[pf.tag]             # each prefetch's ops' phase (Prefetches.tag)
        p_marker, p_cmd, p_tiles, p_trail = first[pf.rows[live]], nbytes[first[pf.rows[live]]], pf.tiles[live], \
            pf.trailing[live]
        # the lowered items in row order: each command's pipeline, each live prefetch's reads
        order = np.argsort(np.concatenate([rows, pf.rows[live]]), kind="stable")
        size = np.array([gemm_ops_count(self.commands[c].plan, int(k), bool(s >= 0)) for c, k, s in
                         zip(cmd.tolist(), pf.pre, pf.source)] +
                        [prefetch_ops_count(self.commands[c].plan, int(k), bool(tr)) for c, k, tr in
                         zip(p_cmd.tolist(), p_tiles, p_trail)], np.int64)
        budget.check(f"the exact Program of {b.name!r} (its GEMM commands lowered to {int(size.sum()):,} tile ops)",
                     budget.program_bytes(int(size.sum())), "use the fast path (drop --exact and --compare), a "
                     "smaller --batch or --seq, or more PEs")
        base = b.n_ops
        n_trail = int(p_trail.sum())
        at = np.empty(len(size), np.int64)                # each item's first op id
        at[order] = base + len(code) + n_trail + np.cumsum(size[order]) - size[order]
        for m in (marker, p_marker, first[pf.rows[~live]]):
            code[m], target[m], nbytes[m], arg[m] = int(Op.COMPUTE), -1, 0, 0.0
        code[wait], target[wait], nbytes[wait], arg[wait] = int(Op.WAIT), at[:len(rows)] + size[:len(rows)] - 1, 0, 0.0
        self._record(base + marker, base + wait, cmd)
        b.add_ops(agent, code, target, nbytes, arg, phase)
        if n_trail:                                       # the kernel waits for its next step's prefetches last
            settle = (at[len(rows):] + size[len(rows):] - 1)[p_trail]
            b.add_ops(agent[p_marker[p_trail]], np.full(n_trail, int(Op.WAIT), np.int8), settle,
                      np.zeros(n_trail, np.int64), np.zeros(n_trail), tag_phase[live][p_trail])
        own = own_hbm_ctrls(b.t, b.agent_nodes(agent[np.concatenate([marker, p_marker])]))
        ready: dict[int, np.ndarray] = {}                 # PREFETCH row -> its tiles' last reads
        item_marker, item_cmd = np.concatenate([marker, p_marker]), np.concatenate([cmd, p_cmd])
        item_phase = np.concatenate([phase[marker], tag_phase[live]])
        for i in order.tolist():
            m = int(item_marker[i])
            o, com = int(own[i]), self.commands[int(item_cmd[i])]
            a, bb, c = (o, com.a_addr), (o, com.b_addr), (o, com.c_addr)
            helpers = b.gemm_helpers(int(agent[m]))
            if i < len(rows):
                ops = gemm_ops(com.plan, base + m, a, bb, c, first=int(at[i]), preloaded=int(pf.pre[i]),
                               ready=ready.pop(int(pf.source[i])) if pf.source[i] >= 0 else None)
            else:
                j = i - len(rows)
                k = int(p_tiles[j])
                ops = [prefetch_ops(com.plan, base + m, a, bb, k, bool(p_trail[j]))]
                ready[int(pf.rows[live][j])] = int(at[i]) + _streamed(com.plan) * np.arange(1, k + 1)
            for helper, cols in zip(helpers, ops):
                if len(cols[0]):
                    b.add_ops(helper, *cols[:4], int(item_phase[i]), addr=cols[4], is_async=cols[5])


class TimedLowering(_Counting):
    """Fast path: every command becomes a COMPUTE of ``ns(commands, pe_dma nodes, preloaded, part)``
    nanoseconds (part 0: with its ``preloaded`` tiles in TCM), every prefetch a helper op (module docstring)."""

    def __init__(self, commands: list[GemmCommand], ns: Callable[..., np.ndarray]):
        super().__init__(commands)
        self.ns = ns
        self.timed_op: list[int] = []        # every op whose time ``ns`` gives, with its arguments
        self.timed_args: list[np.ndarray] = []

    @classmethod
    def untimed(cls, commands: list[GemmCommand]) -> TimedLowering:
        """Every command and prefetch one op of 0 ns: the Program's structure, for what counts ops or bytes."""
        return cls(commands, lambda c, *_: np.zeros(len(c)))

    def _timed(self, b: ProgramBuilder, ops: np.ndarray, agents: np.ndarray, cmd, pre, part) -> np.ndarray:
        """The times of ``ops`` (on ``agents``), remembered with their arguments for the bounds."""
        args = [np.asarray(x, np.int64) for x in (cmd, pre, part)]
        self.timed_op += np.asarray(ops, np.int64).tolist()
        self.timed_args.append(np.stack(args, 1) if len(args[0]) else np.zeros((0, 3), np.int64))
        return self.ns(args[0], b.agent_nodes(agents), args[1], args[2]) if len(args[0]) else np.zeros(0)

    def timed(self) -> tuple[np.ndarray, np.ndarray]:
        """The timed ops, and per op its (command, preloaded tiles, part) for ``ns``."""
        return np.asarray(self.timed_op, np.int64), np.concatenate(self.timed_args or [np.zeros((0, 3), np.int64)])

    def emit(self, b: ProgramBuilder, agent, code, target, nbytes, arg, phase) -> None:
        """Append the emitted rows to ``b``: each GEMM command row as a COMPUTE of its time with its preloaded
        tiles in TCM (``part`` 0), and a WAIT for the prefetch that streams them, when the kernel has one;
        each PREFETCH row as a 0 ns marker and, on the PE's reader helper, a WAIT for it, a COMPUTE of the
        prefetch alone (``part`` 2) and, unless it is the next step's, a COMPUTE of the rest of its command
        from there (``part`` 1).  A command then ends at max(its start + its time with the tiles in TCM, the
        prefetch's start + its time from there): the tile pipeline is a max-plus system in those two start
        times (docs/models.md "Overlap").  The kernel's DMA reads while a prefetch streams wait for it (they
        share the PE's read channel, first in, first out), and the kernel waits for the next step's last."""
        self._count(code)
        pf = self.prefetches(b, agent, code, target, nbytes, arg)
        live = pf.tiles > 0
        trail = pf.trailing & live
        streams = live & ~trail
        tag_phase = np.asarray(phase)[pf.tag]
        queued = self._queued(agent, code, pf, live)       # (DMA read row, its prefetch's index)
        waits = pf.source >= 0
        rep = np.ones(len(code), np.int64)
        rep[pf.gemm[waits]] = 2
        rep[queued[:, 0]] = 2
        src = np.repeat(np.arange(len(code)), rep)
        first = np.cumsum(rep) - rep
        agent, code, target, nbytes, arg, phase = (np.asarray(x)[src].copy() for x in
                                                   (agent, code, target, nbytes, arg, phase))
        base = b.n_ops
        n_trail = int(trail.sum())
        size = np.where(streams, 3, 2) * live                        # each prefetch's helper ops
        alone = base + len(code) + n_trail + np.cumsum(size) - size + 1   # its COMPUTE of the prefetch alone
        # the DMA reads that queue behind a prefetch: a WAIT for it first, the read after
        q = first[queued[:, 0]]
        code[q + 1], target[q + 1], nbytes[q + 1], arg[q + 1] = code[q], target[q], nbytes[q], arg[q]
        code[q], target[q], nbytes[q], arg[q] = int(Op.WAIT), alone[queued[:, 1]], 0, 0.0
        g, cmd = first[pf.gemm], nbytes[first[pf.gemm]].copy()
        self._record(base + g, base + g + waits, cmd)
        arg[g] = self._timed(b, base + g, agent[g], cmd, pf.pre, np.zeros(len(g)))
        code[g], nbytes[g] = int(Op.COMPUTE), 0
        by_row = dict(zip(pf.rows.tolist(), (alone + 1).tolist()))   # a streaming prefetch's last op
        w = g[waits] + 1
        code[w], target[w], nbytes[w], arg[w] = int(Op.WAIT), [by_row[r] for r in pf.source[waits].tolist()], 0, 0.0
        p_marker = first[pf.rows]
        p_cmd = nbytes[p_marker].copy()
        code[p_marker], target[p_marker], nbytes[p_marker], arg[p_marker] = int(Op.COMPUTE), -1, 0, 0.0
        b.add_ops(agent, code, target, nbytes, arg, phase)
        if n_trail:
            b.add_ops(agent[p_marker[trail]], np.full(n_trail, int(Op.WAIT), np.int8), alone[trail],
                      np.zeros(n_trail, np.int64), np.zeros(n_trail), tag_phase[trail])
        if live.any():
            ns = np.zeros((len(pf.rows), 2))
            for col, part, which in ((0, 2, live), (1, 1, streams)):
                ns[which, col] = self._timed(b, alone[which] + col, agent[p_marker[which]], p_cmd[which],
                                             pf.tiles[which], np.full(int(which.sum()), part))
            # per live prefetch, in row order (the ids of ``alone``): WAIT marker, COMPUTE part 2[, COMPUTE part 1]
            j = np.flatnonzero(live)
            n = size[j]
            slot = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)       # 0, 1[, 2] per prefetch
            rep = np.repeat(j, n)
            readers = np.array([b.gemm_helpers(int(a))[0] for a in agent[p_marker[j]].tolist()], np.int64)
            b.add_ops(np.repeat(readers, n), np.where(slot == 0, int(Op.WAIT), int(Op.COMPUTE)).astype(np.int8),
                      np.where(slot == 0, base + p_marker[rep], -1), np.zeros(len(rep), np.int64),
                      np.where(slot == 0, 0.0, ns[rep, np.maximum(slot - 1, 0)]), tag_phase[rep])

    @staticmethod
    def _queued(agent, code, pf: Prefetches, live: np.ndarray) -> np.ndarray:
        """The kernel's DMA read rows issued while a live prefetch streams (after its row and before its GEMM's;
        a trailing one's: to the end), each with that prefetch's index in ``pf.rows``: int64 [n, 2]."""
        reads = np.flatnonzero(code == Op.DMA_READ)
        if not len(reads) or not live.any():
            return np.zeros((0, 2), np.int64)
        span = len(code) + 1
        key = agent[reads].astype(np.int64) * span + reads
        order = np.argsort(key, kind="stable")
        key, reads = key[order], reads[order]
        ends = np.full(len(pf.rows), len(code), np.int64)
        fed = pf.source >= 0
        ends[np.searchsorted(pf.rows, pf.source[fed])] = pf.gemm[fed]
        which = np.flatnonzero(live)
        a = agent[pf.rows[which]].astype(np.int64) * span
        lo = np.searchsorted(key, a + pf.rows[which], "right")
        n = np.maximum(np.searchsorted(key, a + ends[which], "left") - lo, 0)
        at = np.repeat(lo, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        return np.stack([reads[at], np.repeat(which, n)], 1)
