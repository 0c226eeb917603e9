"""Run traced kernel templates on every rank, in :func:`~kbfast.workloads.kernels.run_kernels`'s order.

Same scheduler as the generator path: ranks in a round-robin queue, each running until it blocks
on a recv whose channel is empty; a channel is created at the first send on it.  Same symbolic
check (spec_ccl §5.0, kernels.py): every value is a set of contributing ranks (a leaf rank, or a
bitset row of a refcounted pool), ``add`` refuses a rank counted twice, every rank must end with
every contribution.  Returns the emitted ops in program order, ready for
:meth:`~kbfast.ir.ProgramBuilder.add_ops`; a tile DMA (``tl.load`` / ``tl.store``) gets its rank's own
HBM controller as target after the run, in one array lookup.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np
from numba import njit

from kbfast.config import budget
from kbfast.ir import Op, ProgramBuilder
from kbfast.topology.names import own_hbm_ctrls
from kbfast.workloads.install import Wiring
from kbfast.workloads.kernels import Kernel, ScheduleError, Tl
from kbfast.workloads.templates import ADD, PHASE, PREFETCH, SAME, UNEMITTED, templates_to_arrays, trace

OK, E_TWICE, E_DEADLOCK, E_MISSING, E_DIFFER = 0, 1, 2, 3, 4
# the kernels' codes are literals here: Numba bakes globals into its cached machine code and keys the cache on
# this file alone, so a value imported from templates.py could go stale in the cache
_SEND, _RECV, _ADD, _PHASE, _SAME = 5, 6, 8, 9, 64
assert (_SEND, _RECV, _ADD, _PHASE, _SAME) == (Op.SEND, Op.RECV, ADD, PHASE, SAME)
_READ, _WRITE, _GEMM = int(Op.DMA_READ), int(Op.DMA_WRITE), int(Op.GEMM)


# The traced templates of every role, flat (kbfast.workloads.templates.templates_to_arrays): ``tpl_of[rank]`` the
# rank's template; ``ptr`` CSR of instructions by template; per instruction ``op``, ``label`` (direction
# index), ``val`` (value defined or sent), ``a``, ``b`` (add operands), ``phase``; ``kill_ptr`` / ``kill`` CSR
# of the values dead after each instruction; per template ``n_values`` and ``ret`` (the value returned).
Templates = namedtuple("Templates", ["tpl_of", "ptr", "op", "label", "val", "a", "b", "phase", "kill_ptr", "kill",
                                     "n_values", "ret"])


@njit(cache=True)
def _has(pool, h, q):
    """Does value ``h`` (a leaf ``-rank - 1``, or a pool row) contain rank ``q``?"""
    if h < 0:
        return q == -h - 1
    return (pool[h, q >> 6] >> np.uint64(q & 63)) & np.uint64(1) != 0


@njit(cache=True)
def _both(pool, x, y, n, out):
    """The ranks values ``x`` and ``y`` both contain, into ``out``; returns how many."""
    m = 0
    for q in range(n):
        if _has(pool, x, q) and _has(pool, y, q):
            out[m] = q
            m += 1
    return m


@njit(cache=True)
def _differ(pool, x, y, n, out):
    """The ranks in exactly one of values ``x`` and ``y``, into ``out``; returns how many (0: the same set)."""
    m = 0
    for q in range(n):
        if _has(pool, x, q) != _has(pool, y, q):
            out[m] = q
            m += 1
    return m


@njit(cache=True)
def _grow(pool, refc, free, cap):
    """Double the value pool: (pool, refcounts, free list, capacity); the new rows are the free ones."""
    W = pool.shape[1]
    pool2 = np.zeros((2 * cap, W), np.uint64)
    pool2[:cap] = pool
    refc2 = np.zeros(2 * cap, np.int64)
    refc2[:cap] = refc
    free2 = np.empty(2 * cap, np.int64)
    free2[:cap] = np.arange(2 * cap - 1, cap - 1, -1)
    return pool2, refc2, free2, 2 * cap


@njit(cache=True)
def _union(pool, row, x, y):
    """Pool row ``row`` := value ``x`` | value ``y``; returns whether they share a rank (counted twice)."""
    W = pool.shape[1]
    if x >= 0:
        pool[row] = pool[x]
    else:
        pool[row] = 0
        q = -x - 1
        pool[row, q >> 6] |= np.uint64(1) << np.uint64(q & 63)
    if y >= 0:
        overlap = np.uint64(0)
        for w in range(W):                   # branch-free, so it vectorises
            overlap |= pool[row, w] & pool[y, w]
            pool[row, w] |= pool[y, w]
        return overlap != 0
    q = -y - 1
    bit = np.uint64(1) << np.uint64(q & 63)
    twice = (pool[row, q >> 6] & bit) != 0
    pool[row, q >> 6] |= bit
    return twice


@njit(cache=True)
def _ones(k):
    """A word's low ``k`` bits set (``k`` clipped to 0..64)."""
    if k <= 0:
        return np.uint64(0)
    if k >= 64:
        return np.uint64(0xFFFFFFFFFFFFFFFF)
    return (np.uint64(1) << np.uint64(k)) - np.uint64(1)


@njit(cache=True)
def _missing(pool, slot, base, tp, n, lo, hi, out):
    """The exactly-once check at the end: the first rank ``r`` whose returned value is not exactly the
    contributions of ranks ``lo[r]`` to ``hi[r] - 1`` (every rank, for a collective; its group's, for pieces
    that run side by side: kbfast.workloads.parallel), and the ranks it differs in (into ``out``): (rank, how
    many), or (-1, 0) when every rank holds its own.  Ranks often share a pool row: each row is checked once
    per range."""
    W = pool.shape[1]
    seen_lo = np.full(len(pool), -1, np.int64)
    seen_hi = np.full(len(pool), -1, np.int64)
    for r in range(n):
        v = tp.ret[tp.tpl_of[r]]
        h = slot[base[r] + v] if v >= 0 else -(n + 1)
        full = True
        if h >= 0:
            if seen_lo[h] == lo[r] and seen_hi[h] == hi[r]:
                continue
            seen_lo[h], seen_hi[h] = lo[r], hi[r]
            for w in range(W):
                want = _ones(hi[r] - w * 64) & ~_ones(lo[r] - w * 64)
                full &= pool[h, w] == want
        else:
            full = v >= 0 and hi[r] - lo[r] == 1 and h == -lo[r] - 1
        if not full:
            m = 0
            for q in range(n):
                if _has(pool, h, q) != (lo[r] <= q < hi[r]):
                    out[m] = q
                    m += 1
            return r, m
    return -1, 0


@njit(cache=True)
def _start(tp, n):
    """Each rank's value slots and program counter: (base, slot, pc, end); rank r's values are
    ``slot[base[r]:base[r + 1]]``, value 0 its own contribution (the leaf ``-r - 1``), and it runs
    instructions ``pc[r]`` to ``end[r]`` of its template."""
    base = np.zeros(n + 1, np.int64)
    for r in range(n):
        base[r + 1] = base[r] + tp.n_values[tp.tpl_of[r]]
    slot = np.full(base[n], -1, np.int64)
    pc = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    for r in range(n):
        slot[base[r]] = -r - 1
        pc[r] = tp.ptr[tp.tpl_of[r]]
        end[r] = tp.ptr[tp.tpl_of[r] + 1]
    return base, slot, pc, end


@njit(cache=True)
def _blocked_in_queue(live, lh, n_live, blocked, out):
    """The blocked ranks of the round-robin queue (``n_live`` from ``live[lh]``), in queue order, into
    ``out``; returns how many."""
    m = 0
    for j in range(n_live):
        q = live[(lh + j) % len(live)]
        if blocked[q]:
            out[m] = q
            m += 1
    return m


@njit(cache=True)
def run_templates(tp, peer, inbound, n_phases, n_emit, n_msgs, lo, hi):
    """Run every rank's traced template (``tp``, a :data:`Templates`) in ``run_kernels``'s order over the
    install ``peer`` / ``inbound`` (:class:`~kbfast.workloads.install.Wiring`), checking that every
    contribution is counted exactly once and that rank ``r`` ends with those of ranks ``lo[r]`` to
    ``hi[r] - 1``; ``n_phases``, ``n_emit``, ``n_msgs``: phase names, emitted ops and messages (the output
    sizes).

    Ranks take turns in a round-robin queue, each running until it blocks on a recv whose channel is empty;
    a channel is created at its first send.  A value is a leaf (``-rank - 1``) or a refcounted row of a
    bitset pool.  Returns (err, err_rank, err_ranks, out_rank, out_ins, out_chan, out_phase, ch_src, ch_dst,
    phase_order, last_phase, pc): ``err`` OK, E_TWICE (``err_rank`` adds ``err_ranks`` twice), E_DEADLOCK
    (``err_ranks``: the blocked ranks in queue order), E_DIFFER (a ``tl.same`` of ``err_rank`` finds its two
    values differ in ``err_ranks``) or E_MISSING (``err_rank`` ends without ``err_ranks``);
    per emitted op its rank, instruction, channel (-1: none) and phase id; per channel its ranks; the phase
    ids in order of first use, each rank's last phase and its next instruction.

    One dispatch loop over the instructions, about 115 lines: the round-robin queue, the message FIFOs and
    the value pool are its locals (counters among them); moving the per-op steps (the FIFO push and pop,
    the release of dead values) into functions of their own made it 10 % slower, so they stay inline.  The
    set-up, the pool's growth, the union and the end and error checks are functions of their own."""
    n = len(tp.tpl_of)
    L = peer.shape[1]
    base, slot, pc, end = _start(tp, n)
    op, label, val, a, b, phase, kill_ptr, kill = tp.op, tp.label, tp.val, tp.a, tp.b, tp.phase, tp.kill_ptr, tp.kill
    cap = np.int64(64)   # not a literal: one compiled _grow
    pool = np.zeros((cap, (n + 63) >> 6), np.uint64)
    refc = np.zeros(cap, np.int64)
    free = np.arange(cap - 1, -1, -1)
    n_free = cap
    head = np.full(n * L, -1, np.int64)
    tail = np.full(n * L, -1, np.int64)
    msg_next = np.empty(n_msgs, np.int64)
    msg_val = np.empty(n_msgs, np.int64)
    n_msg = 0
    chan_of = np.full(n * L, -1, np.int64)
    ch_src = np.empty(n_msgs, np.int64)
    ch_dst = np.empty(n_msgs, np.int64)
    n_ch = 0
    out_rank = np.empty(n_emit, np.int64)
    out_ins = np.empty(n_emit, np.int64)
    out_chan = np.full(n_emit, -1, np.int64)
    out_phase = np.empty(n_emit, np.int64)
    k = 0
    cur_phase = np.full(n, -1, np.int64)
    seen = np.zeros(n_phases, np.bool_)
    phase_order = np.empty(n_phases, np.int64)
    n_seen = 0
    live = np.empty(n + 1, np.int64)
    for r in range(n):
        live[r] = r
    lh, lt, n_live = 0, n, n
    blocked = np.zeros(n, np.bool_)
    err_ranks = np.empty(max(n, 8), np.int64)
    blocked_since = 0
    while n_live > 0:
        r = live[lh]
        lh = (lh + 1) % (n + 1)
        n_live -= 1
        while pc[r] < end[r]:
            i = pc[r]
            o = op[i]
            s = base[r]
            if o == _RECV:
                link = inbound[r, label[i]]
                m = head[link]
                if m < 0:
                    blocked[r] = True
                    break
                head[link] = msg_next[m]
                if head[link] < 0:
                    tail[link] = -1
                slot[s + val[i]] = msg_val[m]
                out_chan[k] = chan_of[link]
            elif o == _SEND:
                link = r * L + label[i]
                if chan_of[link] < 0:
                    chan_of[link] = n_ch
                    ch_src[n_ch] = r
                    ch_dst[n_ch] = peer[r, label[i]]
                    n_ch += 1
                h = slot[s + val[i]]
                if h >= 0:
                    refc[h] += 1
                msg_val[n_msg] = h
                msg_next[n_msg] = -1
                if tail[link] >= 0:
                    msg_next[tail[link]] = n_msg
                else:
                    head[link] = n_msg
                tail[link] = n_msg
                n_msg += 1
                out_chan[k] = chan_of[link]
            elif o == _ADD:
                if n_free == 0:
                    n_free = cap
                    pool, refc, free, cap = _grow(pool, refc, free, cap)
                n_free -= 1
                row = free[n_free]
                refc[row] = 1
                x, y = slot[s + a[i]], slot[s + b[i]]
                if _union(pool, row, x, y):
                    m = _both(pool, x, y, n, err_ranks)
                    return (E_TWICE, r, err_ranks[:m], out_rank, out_ins, out_chan, out_phase, ch_src[:n_ch],
                            ch_dst[:n_ch], phase_order[:n_seen], cur_phase, pc)
                slot[s + val[i]] = row
            elif o == _SAME:
                m = _differ(pool, slot[s + a[i]], slot[s + b[i]], n, err_ranks)
                if m:
                    return (E_DIFFER, r, err_ranks[:m], out_rank, out_ins, out_chan, out_phase, ch_src[:n_ch],
                            ch_dst[:n_ch], phase_order[:n_seen], cur_phase, pc)
            elif o == _PHASE:
                cur_phase[r] = phase[i]
                if not seen[phase[i]]:
                    seen[phase[i]] = True
                    phase_order[n_seen] = phase[i]
                    n_seen += 1
            if o != _ADD and o != _PHASE and o != _SAME:
                out_rank[k] = r
                out_ins[k] = i
                out_phase[k] = cur_phase[r]
                k += 1
            for j in range(kill_ptr[i], kill_ptr[i + 1]):     # the values dead after i: free their rows
                h = slot[s + kill[j]]
                if h >= 0:
                    refc[h] -= 1
                    if refc[h] == 0:
                        free[n_free] = h
                        n_free += 1
            pc[r] += 1
            blocked_since = 0
        if pc[r] < end[r]:
            live[lt] = r
            lt = (lt + 1) % (n + 1)
            n_live += 1
            blocked_since += 1
            if blocked_since > n_live:
                m = _blocked_in_queue(live, lh, n_live, blocked, err_ranks)
                return (E_DEADLOCK, -1, err_ranks[:m], out_rank, out_ins, out_chan, out_phase, ch_src[:n_ch],
                        ch_dst[:n_ch], phase_order[:n_seen], cur_phase, pc)
    err_rank, m = _missing(pool, slot, base, tp, n, lo, hi, err_ranks)
    return (OK if err_rank < 0 else E_MISSING, err_rank, err_ranks[:m], out_rank, out_ins, out_chan, out_phase,
            ch_src[:n_ch], ch_dst[:n_ch], phase_order[:n_seen], cur_phase, pc)


_TRACED: OrderedDict = OrderedDict()     # (kernel, sizes, roles, wiring, info, PE costs) -> a checked run


def forget_traces() -> None:
    """Empty the memo of checked runs: the next kernel is traced afresh (a cold measurement)."""
    _TRACED.clear()
TRACED_CACHE = 128      # up to a few MB each: a sweep system's shapes, layer and head


def _trace_and_run(b: ProgramBuilder, n: int, wiring: Wiring, kernel: Kernel, nbytes: int, roles: np.ndarray,
                      info: dict | None, groups: np.ndarray | None = None):
    """Trace every role, run the templates on every rank and run the symbolic check: (phase names, the
    template arrays, the emitted rows (rank, instruction, channel, phase), the channels, the phase order and
    each rank's last phase).  Raises ScheduleError on a double count, a deadlock or a missing contribution."""
    elem = b.t.spec.pe.elem_bytes
    rep, tpl_of = _distinct_rows(roles)
    labels = {d: k for k, d in enumerate(wiring.labels)}
    phases: dict[str, int] = {}
    tpls = [trace(kernel, Tl(rank=int(r), n_ranks=n, nbytes=nbytes, n_elem=max(nbytes // elem, 1),
                             info=info or {}), labels, phases, b.math_ns) for r in rep]
    names = list(labels)
    _check_directions(wiring, tpls, tpl_of, names)
    ar = templates_to_arrays(tpls)
    per_tpl = np.bincount(tpl_of, minlength=len(tpls))
    emits = np.array([np.count_nonzero(~np.isin(tp.op, UNEMITTED)) for tp in tpls], np.int64)
    sends = np.array([np.count_nonzero(tp.op == _SEND) for tp in tpls], np.int64)
    n_emit = int(per_tpl @ emits)
    budget.check(f"generating {b.name} on {n:,} ranks ({n_emit:,} ops)",
                 budget.program_bytes(n_emit) + 16 * n * ((n + 63) // 64),      # + the symbolic check's bitsets
                 "use fewer ranks (fewer SIPs or cubes, or ranks=cube_pe0) or an algorithm with fewer messages "
                 "per rank")
    tp = Templates(tpl_of, ar["ptr"], ar["op"], ar["label"], ar["val"], ar["a"], ar["b"], ar["phase"],
                   ar["kill_ptr"], ar["kill"], ar["n_values"], ar["ret"])
    if groups is None:
        lo, hi = np.zeros(n, np.int64), np.full(n, n, np.int64)
    else:
        lo, hi = (np.ascontiguousarray(c, dtype=np.int64) for c in np.asarray(groups).reshape(n, 2).T)
    res = run_templates(tp, wiring.peer, wiring.inbound, len(phases), n_emit, int(per_tpl @ sends), lo, hi)
    err, err_rank, err_ranks, out_rank, out_ins, out_chan, out_phase, ch_src, ch_dst, phase_order, last, pc = res
    bad = err_ranks.tolist()
    if err == E_TWICE:
        raise ScheduleError(f"rank {err_rank} adds contributions of ranks {bad[:8]} twice")
    if err == E_DEADLOCK:
        waits = [f"rank {i} on recv {names[ar['label'][pc[i]]]!r}" for i in bad]
        raise ScheduleError("the collective deadlocks (every remaining rank waits on an empty channel): "
                            + "; ".join(waits[:8]))
    if err == E_DIFFER:
        raise ScheduleError(f"rank {err_rank} holds pieces of one buffer whose contributors differ in ranks "
                            f"{bad[:8]}")
    if err == E_MISSING and groups is not None:
        want = f"ranks {lo[err_rank]} to {hi[err_rank] - 1}"
        raise ScheduleError(f"rank {err_rank} ends not with exactly its group's contributions ({want}): it differs "
                            f"in ranks {bad[:8]}" + (f" (and {len(bad) - 8} more)" if len(bad) > 8 else ""))
    if err == E_MISSING:
        raise ScheduleError(f"rank {err_rank} ends without the contributions of ranks {bad[:8]}"
                            + (f" (and {len(bad) - 8} more)" if len(bad) > 8 else ""))
    return phases, ar, (out_rank, out_ins, out_chan, out_phase, ch_src, ch_dst, phase_order, last)


def run_traced(b: ProgramBuilder, agents: np.ndarray, wiring: Wiring, kernel: Kernel, nbytes: int,
               roles: np.ndarray, info: dict | None = None, lower=None, cache: bool = False,
               groups: np.ndarray | None = None) -> None:
    """:func:`~kbfast.workloads.kernels.run_kernels` for a kernel whose control flow depends only on the
    rank's role (``roles[rank]``, one row of features per rank): the same ops, channels, phases and checks.

    A kernel's GEMM commands (``tl.gemm(i)``) need ``lower``, a :class:`kbfast.workloads.commands.Lowering`:
    it turns the emitted command rows into ops (the tile pipeline, or a timed stand-in) and appends what
    follows the bulk (the pipelines' helper agents).  ``cache`` keeps the checked run for the next call
    with the same kernel, sizes, roles, wiring, info and PE costs (a sweep's points that differ elsewhere).
    ``groups`` (n x 2): rank ``r`` must end with the contributions of ranks ``groups[r, 0]`` to
    ``groups[r, 1] - 1`` (default: every rank's), so that independent pieces run side by side in one
    Program (kbfast.workloads.parallel)."""
    n = len(agents)
    agents = np.asarray(agents, np.int64)
    roles = np.asarray(roles, np.int64).reshape(n, -1)
    key = None
    if cache:
        key = (kernel, nbytes, roles.tobytes(), roles.shape, wiring.labels, wiring.peer.tobytes(), repr(info),
               repr(b.t.spec.pe), None if groups is None else groups.tobytes())
    if key is not None and key in _TRACED:
        _TRACED.move_to_end(key)
        phases, ar, res = _TRACED[key]
    else:
        phases, ar, res = _trace_and_run(b, n, wiring, kernel, nbytes, roles, info, groups)
        if key is not None:
            _TRACED[key] = (phases, ar, res)
            if len(_TRACED) > TRACED_CACHE:
                _TRACED.popitem(last=False)
    out_rank, out_ins, out_chan, out_phase, ch_src, ch_dst, phase_order, last = res
    out_chan = out_chan.copy()                                 # filled in below, per Program
    zeros = np.zeros(n, np.int64)
    b.add_ops(agents, np.full(n, int(Op.START), np.int8), np.full(n, -1), zeros, zeros.astype(np.float64),
              np.full(n, -1))
    ids = b.channels(agents[ch_src], agents[ch_dst])
    phase_names = list(phases)
    to_builder = np.full(len(phases) + 1, -1, np.int64)       # trace phase id -> builder phase index (-1 stays)
    for p in phase_order:
        to_builder[p] = b.phase_index(phase_names[p])
    code = ar["op"][out_ins]
    ipcq = (code == _SEND) | (code == _RECV)
    out_chan[ipcq] = ids[out_chan[ipcq]]                       # the builder may hold channels already
    if np.any((ar["op"] == _READ) | (ar["op"] == _WRITE)):     # tile DMAs target the rank's own HBM slice
        dma = (code == _READ) | (code == _WRITE)
        out_chan[dma] = own_hbm_ctrls(b.t, b.agent_nodes(agents))[out_rank[dma]]
    cols = (agents[out_rank], code, out_chan, ar["nbytes"][out_ins], ar["arg"][out_ins], to_builder[out_phase])
    if lower is not None:
        lower.emit(b, *cols)
    elif np.any((code == _GEMM) | (code == PREFETCH)):
        raise ScheduleError("the kernel issues GEMM commands but run_traced got no lowering for them")
    else:
        b.add_ops(*cols)
    b.set_phases(agents[last >= 0], to_builder[last[last >= 0]])


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_index=True, return_inverse=True)[1:]`` (first row of each distinct
    row, in lexicographic order, and each row's index among them), through one mixed-radix int64 key per
    row when the values allow it (np.unique over rows sorts structured records: 20 ms at 16 k ranks)."""
    lo = rows.min(axis=0) if len(rows) else np.zeros(rows.shape[1], np.int64)
    radix = (rows.max(axis=0) - lo + 1) if len(rows) else np.ones(rows.shape[1], np.int64)
    if float(np.prod(radix.astype(np.float64))) >= 2.0 ** 62:
        _, rep, inv = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        return rep, inv.ravel().astype(np.int64)
    key = np.zeros(len(rows), np.int64)
    for j in range(rows.shape[1]):                 # column 0 most significant: lexicographic order
        key = key * radix[j] + (rows[:, j] - lo[j])
    _, rep, inv = np.unique(key, return_index=True, return_inverse=True)
    return rep, inv.astype(np.int64)


def _check_directions(wiring: Wiring, tpls: list, tpl_of: np.ndarray, names: list[str]) -> None:
    """F1 (as ``Install.peer`` / ``Install.inbound`` raise it) for a direction some rank of a role lacks."""
    L = len(wiring.labels)
    for t_id, tp in enumerate(tpls):
        ranks = np.flatnonzero(tpl_of == t_id)
        comm = (tp.op == _SEND) | (tp.op == _RECV)
        for o, k in dict.fromkeys(zip(tp.op[comm].tolist(), tp.label[comm].tolist())):
            side = wiring.peer if o == _SEND else wiring.inbound
            bad = ranks if k >= L else ranks[side[ranks, k] < 0]
            if len(bad):
                wiring.fail(int(bad[0]), names[k], send=o == _SEND)
