"""Slow, obvious references for the Numba kernels, in plain Python; the tests check each kernel against one.

* :class:`NaiveEventQueue`: the event queue of ``kbfast.sim.heap`` as a ``heapq`` of (time, sequence,
  payload): equal times pop in insertion order;
* :func:`global_filling`: the fluid schedule's weighted max-min water-filling over all active flows at
  once (``kbfast.fast.waterfill._rates`` fills per connected component);
* :func:`max_min_fair`: textbook progressive filling (every flow an equal share, no weights, optional
  demands);
* :func:`pairwise_interference`: the interference bound of ``kbfast.fast.bounds`` by looking at every
  pair of flows;
* :func:`causal_before`: the flows that end before others begin in every schedule
  (``kbfast.fast.causal.knowledge``), by search over a graph of events;
* :func:`pairwise_runs`: its run bound (``run_coefficients`` and ``run_charges``): every pair of classes' runs of shared
  servers from Python lists, nested by cutting, and every pair of flows charged per piece;
* :func:`naive_pipeline`: the GEMM tile pipeline's recurrence (``kbfast.fast.pipeline``), tile by tile with
  whole lists of stage times;
* :func:`naive_transfer_end`: one isolated transfer's completion (``kbfast.fast.closed_form.transfer_end``),
  flit by flit through every FIFO server of its route and every PC commit.
"""

from __future__ import annotations

import heapq
import math

import numpy as np


class NaiveEventQueue:
    """Events ordered by (time, insertion sequence), as ``kbfast.sim.heap`` orders them."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, payload: int) -> None:
        """Queue ``payload`` at ``time``, after every event already queued at that time."""
        heapq.heappush(self._heap, (time, self._seq, payload))
        self._seq += 1

    def peek_time(self) -> float:
        """The next event's time (the queue must not be empty)."""
        return self._heap[0][0]

    def pop(self) -> tuple[float, int]:
        """Remove the next event; returns (time, payload)."""
        time, _, payload = heapq.heappop(self._heap)
        return time, payload


def global_filling(flows, bn, res_cap, res_ovh, nbytes, users):
    """Rates of ``flows`` (lists of resource ids) by water-filling over all of them at once."""
    def w(r, o):
        return res_ovh[r] / max(nbytes[o], 1) if res_ovh[r] > 0.0 else 1.0

    entries = [[(r, w(r, o)) for r in flows[o] if users[r] > 1] for o in range(len(flows))]
    cap_rem = {r: 0.0 for es in entries for r, _ in es}
    weight = dict(cap_rem)
    for o, es in enumerate(entries):
        for r, x in es:
            weight[r] += x
            cap_rem[r] += x * bn[o]
    rate = [0.0] * len(flows)
    frozen = [not any(cap_rem[r] > res_cap[r] * (1.0 + 1e-12) for r, _ in es) for es in entries]
    for o in range(len(flows)):
        if frozen[o]:
            rate[o] = bn[o]
    for r in cap_rem:
        cap_rem[r], weight[r] = res_cap[r], 0.0
    for o, es in enumerate(entries):
        for r, x in es:
            if frozen[o]:
                cap_rem[r] -= x * rate[o]
            else:
                weight[r] += x
    left = frozen.count(False)
    while left > 0:
        level, best_res, best_flow = math.inf, -1, -1
        for o, es in enumerate(entries):
            if frozen[o]:
                continue
            if bn[o] < level:
                level, best_flow, best_res = bn[o], o, -1
            for r, _ in es:
                if weight[r] > 0.0 and cap_rem[r] / weight[r] < level:
                    level, best_res, best_flow = cap_rem[r] / weight[r], r, -1
        level = max(level, 0.0)
        for o, es in enumerate(entries):
            if frozen[o] or not (o == best_flow or (best_res >= 0 and any(r == best_res for r, _ in es))):
                continue
            frozen[o], rate[o] = True, level
            left -= 1
            for r, x in es:
                cap_rem[r] -= x * level
                weight[r] -= x
    return rate


def max_min_fair(flows: list[list[int]], capacity: list[float], demand: list[float] | None = None) -> list[float]:
    """Textbook progressive filling, every flow weighing the same: raise every unfrozen flow's rate together;
    a flow freezes when it reaches its demand (none: unbounded) or one of its resources fills.

    ``flows[o]`` lists flow o's distinct resources; every user of a resource counts, one user or many.  A flow
    on no resource with no demand gets ``inf``.
    """
    rate = [0.0] * len(flows)
    demand = [math.inf] * len(flows) if demand is None else list(demand)
    frozen = [not f and d == math.inf for f, d in zip(flows, demand)]
    for o in range(len(flows)):
        if frozen[o]:
            rate[o] = math.inf
    left = list(capacity)
    while not all(frozen):
        active = [o for o in range(len(flows)) if not frozen[o]]
        users = {r: sum(1 for o in active if r in flows[o]) for r in range(len(capacity))}
        step = min([demand[o] - rate[o] for o in active]
                   + [left[r] / users[r] for r in range(len(capacity)) if users[r]])
        step = max(step, 0.0)
        for o in active:
            rate[o] += step
            for r in flows[o]:
                left[r] -= step
        for o in active:
            full = any(left[r] <= 1e-12 * max(capacity[r], 1.0) for r in flows[o])
            if full or rate[o] >= demand[o] * (1 - 1e-12):
                frozen[o] = True
    return rate


def window_offsets(B, nbytes, flit, message):
    """(pre, post) per entry of ``B.res`` and (seq_pre, seq_post) per position of ``B.seq_res`` of
    ``kbfast.fast.bounds.window_offsets``, from lists: along a class's route, ``pre`` sums the servers before
    (overhead + 1/bw x the class's smallest first flit) and ``post`` the servers after (1/bw x the smallest last
    flit, + the overhead if every op of the class is one flit); zeros on classes with an op that is not a
    ``message``, on serial classes and on controllers."""
    pre, post = np.zeros(len(B.res)), np.zeros(len(B.res))
    seq_pre, seq_post = np.zeros(len(B.seq_res)), np.zeros(len(B.seq_res))
    for c in range(len(B.cls_ptr) - 1):
        sizes = [int(nbytes[g]) for g in B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]]
        if B.serial[c] or not sizes or not all(message[g] for g in B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]):
            continue
        flits = [max(1, -(-n // flit)) for n in sizes]
        s0 = min(min(n, flit) for n in sizes)
        last = min(n - (f - 1) * flit for n, f in zip(sizes, flits))
        single = max(flits) == 1
        seq = list(range(B.seq_ptr[c], B.seq_ptr[c + 1]))
        for i in seq:
            seq_pre[i] = sum(B.seq_o[j] + B.seq_c[j] * s0 for j in seq if j < i)
            seq_post[i] = sum(B.seq_c[j] * last + (B.seq_o[j] if single else 0.0) for j in seq if j > i)
        # or, where more, from the segments' whole trains (the lattice of flits x servers, filled cell by
        # cell): the trains before and the head's way in its segment; its tail's way and the trains after
        segments, run = [], []
        for i in seq:
            if B.seq_res[i] >= 0:
                run.append(i)
            elif run:
                segments, run = segments + [run], []
        segments += [run] if run else []
        pre_n, post_n = {}, {}
        for n in set(sizes):
            k = max(1, -(-n // flit))
            size = [min(n, flit)] + [flit] * (k - 2) + ([n - (k - 1) * flit] if k > 1 else [])
            lattices = []
            for part in segments:
                V = [[0.0] * len(part) for _ in range(k)]
                for f in range(k):
                    for x, i in enumerate(part):
                        cell = B.seq_c[i] * size[f] + (B.seq_o[i] if f == 0 else 0.0)
                        V[f][x] = max(V[f - 1][x] if f else 0.0, V[f][x - 1] if x else 0.0) + cell
                lattices.append(V[-1])
            for m, part in enumerate(segments):
                trains_before = sum(last[-1] for last in lattices[:m])
                trains_after = sum(last[-1] for last in lattices[m + 1:])
                for x, i in enumerate(part):
                    head = sum(B.seq_o[j] + B.seq_c[j] * size[0] for j in part[:x])
                    pre_n[i] = min(pre_n.get(i, np.inf), trains_before + head)
                    post_n[i] = min(post_n.get(i, np.inf), lattices[m][-1] - lattices[m][x] + trains_after)
        for i in pre_n:
            seq_pre[i] = max(seq_pre[i], pre_n[i])
            seq_post[i] = max(seq_post[i], post_n[i])
        for k in range(B.cls_ptr[c], B.cls_ptr[c + 1]):
            at = [i for i in seq if B.seq_res[i] == B.res[k]]
            if B.kind[k] <= 1 and at:
                pre[k], post[k] = seq_pre[at[0]], seq_post[at[0]]
    return pre, post, seq_pre, seq_post


def pairwise_interference(B, nbytes, begin_lo, end_hi, use_windows, own_extra, flit, posted=None, before=None,
                          pre=None, post=None, behind=None, crossing=None, pair_runs=None):
    """extra[o] = own + the work of every other op on o's resources whose window overlaps o's; on wires and
    node workers (kinds 0 and 1) not that of an op of o's own serial class (one PE DMA channel); on a
    controller (kind 2) nothing for a ``posted`` op.  With ``before`` (a set of (g, o): flow g ends before
    flow o begins, :func:`causal_before`), not an op that ends before o begins (but on a controller a posted
    read, whose commits outlive it) nor one that begins after o ends.  With ``pre`` and ``post`` (per entry),
    each window is narrowed to the entry: ``[begin + pre, max(end - post, begin + pre)]``.  With ``behind``
    (a set of (g, o), :func:`fifo_behind`), not an op g of o's own class that is behind o at every server.
    With ``crossing`` (``(order, flit)``: per entry its server's place on its route, -1 for none), a pair of
    one-flit ops pays, over the entries with a place, only the heaviest set of servers that both visit in the
    same order.  With ``pair_runs`` (a function of (class of o, class of g, g): the run charge of g to o over
    everything they share, inf for none), the other pairs pay on wires and node workers the smaller of their
    per-server work and that charge."""
    cls = np.full(len(nbytes), -1)
    for c in range(len(B.cls_ptr) - 1):
        cls[B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]] = c
    pre = np.zeros(len(B.res)) if pre is None else pre
    post = np.zeros(len(B.res)) if post is None else post

    def work(k, g):
        return B.base[k] * (nbytes[g], 1, -(-nbytes[g] // flit))[B.kind[k]]

    def entries(o):
        return range(B.cls_ptr[cls[o]], B.cls_ptr[cls[o] + 1]) if cls[o] >= 0 else range(0)

    def window(o, k):
        b = begin_lo[o] + pre[k]
        return b, max(end_hi[o] - post[k], b)

    extra = own_extra.copy()
    placed = {}                               # (o, g) -> [(place on o's route, place on g's, work)]
    wires = {}                                # (o, g) -> per-server work on wires and node workers
    for o in range(len(nbytes)):
        for k in entries(o):
            b_o, e_o = window(o, k)
            for g in range(len(nbytes)):
                if g == o:
                    continue
                if B.serial[cls[o]] and cls[g] == cls[o] and B.kind[k] <= 1:
                    continue
                if posted is not None and posted[o] and B.kind[k] == 2:
                    continue
                if before is not None and ((o, g) in before or (
                        (g, o) in before and not (posted[g] and B.kind[k] == 2))):
                    continue
                if behind is not None and (g, o) in behind and cls[g] == cls[o]:
                    continue
                for j in entries(g):
                    b_g, e_g = window(g, j)
                    if B.res[j] == B.res[k] and not (use_windows and (e_g < b_o or e_o < b_g)):
                        if crossing is not None and crossing[0][k] >= 0 and crossing[0][j] >= 0 and \
                                max(nbytes[o], nbytes[g]) <= crossing[1]:
                            placed.setdefault((o, g), []).append((crossing[0][k], crossing[0][j], work(j, g)))
                        elif B.kind[k] <= 1 and pair_runs is not None:
                            wires[(o, g)] = wires.get((o, g), 0.0) + work(j, g)
                        else:
                            extra[o] += work(j, g)
    for (o, g), w in wires.items():
        extra[o] += min(w, pair_runs(cls[o], cls[g], g))
    for (o, g), servers in placed.items():
        servers.sort()
        best = []
        for i, (_, place_g, w) in enumerate(servers):
            best.append(w + max([best[j] for j in range(i) if servers[j][1] < place_g], default=0.0))
        extra[o] += max(best)
    return extra


def fifo_behind(p) -> set[tuple[int, int]]:
    """The pairs (g, o) of SENDs on one channel where g is sent after o: its sender puts it into the same
    first-in first-out queue later, so on the same route it stays behind o."""
    from kbfast.ir import Op

    sends = [o for a in range(p.n_agents) for o in p.agent_ops[p.op_ptr[a]:p.op_ptr[a + 1]]
             if p.op_code[o] == Op.SEND]
    return {(g, o) for i, o in enumerate(sends) for g in sends[i + 1:] if p.op_target[g] == p.op_target[o]}


def causal_before(p, flows) -> set[tuple[int, int]]:
    """The pairs (g, o) of ``flows`` where flow g ends before flow o begins in every schedule, by search
    over an explicit graph of events: per op its issue and its return (a SEND is issued when accepted),
    per SEND its data's arrival.  Edges: an op's return to the next op's issue (program order), issue to
    return, a SEND's issue to its arrival, the k-th SEND's arrival on a channel to the k-th RECV's return,
    RECV k - n_slots's return to SEND k's issue (the credit).  A channel into an agent that also receives
    from any channel has neither of the last two.  A flow ends at its arrival (SEND) or its return (a
    blocking DMA); an asynchronous DMA's end is in no edge."""
    from kbfast.ir import Op, RECV_ANY

    issue = lambda o: ("issue", int(o))      # noqa: E731
    ret = lambda o: ("return", int(o))       # noqa: E731
    arrive = lambda o: ("arrive", int(o))    # noqa: E731
    edges: dict = {}

    def edge(a, b):
        edges.setdefault(a, []).append(b)

    unordered = set()
    for a in range(p.n_agents):
        ops = p.agent_ops[p.op_ptr[a]:p.op_ptr[a + 1]]
        if any(p.op_code[o] == Op.RECV and p.op_target[o] == RECV_ANY for o in ops):
            unordered.add(a)
        for x, y in zip(ops[:-1], ops[1:]):
            edge(ret(x), issue(y))
        for o in ops:
            edge(issue(o), ret(o))
    sends = {c: [] for c in range(len(p.channels.src))}
    recvs = {c: [] for c in range(len(p.channels.src))}
    for a in range(p.n_agents):
        for o in p.agent_ops[p.op_ptr[a]:p.op_ptr[a + 1]]:
            if p.op_code[o] == Op.SEND:
                sends[p.op_target[o]].append(o)
                edge(issue(o), arrive(o))
            elif p.op_code[o] == Op.RECV and p.op_target[o] != RECV_ANY:
                recvs[p.op_target[o]].append(o)
    for c in sends:
        if p.channels.dst[c] in unordered:
            continue
        for k, s in enumerate(sends[c]):
            if k < len(recvs[c]):
                edge(arrive(s), ret(recvs[c][k]))
            n = p.channels.n_slots[c]
            if k >= n and k - n < len(recvs[c]):
                edge(ret(recvs[c][k - n]), issue(s))
    before = set()
    for g in flows:
        if p.op_code[g] == Op.SEND:
            start = arrive(g)
        elif not p.op_async[g]:
            start = ret(g)
        else:
            continue
        seen, todo = {start}, [start]
        while todo:
            for nxt in edges.get(todo.pop(), []):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        before.update((int(g), int(o)) for o in flows if o != g and issue(o) in seen)
    return before


def pairwise_runs(B, nbytes, begin_lo, end_hi, use_windows, flit, max_partners, seq_pre=None, seq_post=None):
    """(extra, done) of ``kbfast.fast.runs.run_charges`` and ``run_coefficients``, from lists: a class's partners are the classes
    on any of its servers (itself if it has 2+ ops and is not serial); a run is a stretch of servers that
    follow each other on both routes; crossing runs are cut, longest first, at the crossing until every two
    nest or are apart; flow ``g`` pays ``sum o + s0 * sum c + (N - s0) * max c`` per piece, ``N * c`` per solo
    server shared.  With ``seq_pre`` and ``seq_post``, both windows are narrowed to the servers the two classes
    share, from ``seq_pre`` at the first to ``seq_post`` at the last; the partner's shift capped at its
    shortest window (``kbfast.fast.runs.run_charges``)."""
    n_cls = len(B.cls_ptr) - 1
    seqs = [[(int(B.seq_res[i]), float(B.seq_c[i]), float(B.seq_o[i]), bool(B.seq_solo[i]))
             for i in range(B.seq_ptr[c], B.seq_ptr[c + 1])] for c in range(n_cls)]
    ops = [list(B.ops[B.ops_ptr[c]:B.ops_ptr[c + 1]]) for c in range(n_cls)]
    extra = np.zeros(len(nbytes))
    done = np.zeros(n_cls, bool)
    for c in range(n_cls):
        mine = {r for r, *_ in seqs[c] if r >= 0}
        partners = [d for d in range(n_cls) if mine & {r for r, *_ in seqs[d] if r >= 0}
                    and not (d == c and (B.serial[c] or len(ops[c]) < 2))]
        if len(partners) > max_partners:
            continue
        runs, solo, at = [], {d: 0.0 for d in partners}, {d: [] for d in partners}
        for q, d in enumerate(partners):
            where = {r: j for j, (r, *_) in enumerate(seqs[d]) if r >= 0}
            at[d] = [(i, where[r]) for i, (r, *_) in enumerate(seqs[c]) if r >= 0 and r in where]
            i = 0
            while i < len(seqs[c]):
                r, cc, _, alone = seqs[c][i]
                if r < 0 or r not in where:
                    i += 1
                    continue
                if alone:
                    solo[d] += cc
                    i += 1
                    continue
                a, j = i, where[r]
                while (i + 1 < len(seqs[c]) and j + 1 < len(seqs[d]) and seqs[c][i + 1][0] >= 0
                       and not seqs[c][i + 1][3] and seqs[c][i + 1][0] == seqs[d][j + 1][0]):
                    i, j = i + 1, j + 1
                runs.append((q, a, i))
                i += 1
        pieces, todo = [], sorted(runs, key=lambda t: (-(t[2] - t[1]), t[0], t[1]))
        for run in todo:
            stack = [run]
            while stack:
                q, a, b = stack.pop()
                cross = [(x, y) for _, x, y in pieces if x < a <= y < b or a < x <= b < y]
                if not cross:
                    pieces.append((q, a, b))
                    continue
                x, y = cross[0]
                cut = y if x < a <= y < b else x - 1
                stack += [(q, a, cut), (q, cut + 1, b)]
        done[c] = True
        for o in ops[c]:
            for q, d in enumerate(partners):
                pc = qc = pd = qd = 0.0
                if seq_pre is not None:
                    first_i, last_i = min(i for i, _ in at[d]), max(i for i, _ in at[d])
                    first_j, last_j = min(j for _, j in at[d]), max(j for _, j in at[d])
                    pc, qc = seq_pre[B.seq_ptr[c] + first_i], seq_post[B.seq_ptr[c] + last_i]
                    room = max(0.999999 * min(end_hi[g] - begin_lo[g] for g in ops[d]), 0.0)
                    pd = min(seq_pre[B.seq_ptr[d] + first_j], room)
                    qd = min(seq_post[B.seq_ptr[d] + last_j], room - pd)
                b_o = begin_lo[o] + pc
                e_o = max(end_hi[o] - qc, b_o)
                for g in ops[d]:
                    if g == o or (use_windows and (end_hi[g] - qd < b_o or e_o < begin_lo[g] + pd)):
                        continue
                    s0 = min(nbytes[g], flit)
                    extra[o] += solo[d] * nbytes[g]
                    for q2, a, b in pieces:
                        if q2 == q:
                            part = seqs[c][a:b + 1]
                            extra[o] += (sum(x[2] for x in part) + s0 * sum(x[1] for x in part)
                                         + (nbytes[g] - s0) * max(x[1] for x in part))
    return extra, done


def naive_pipeline(n_mn, n_k, D, t0, a_hold, a_done, b_hold, b_done, fetch, comp_inner, comp_last, store, w_hold,
                   w_done):
    """(end, first output tile done) of the tile pipeline: every stage's start and end kept per tile."""
    T = n_mn * n_k
    fetch_end, comp_end, done = [], [], []
    read_free = store_end = write_free = -math.inf
    for t in range(T):
        last = t % n_k == n_k - 1
        r = max(t0, read_free, fetch_end[t - D] if t >= D else -math.inf)
        ready = r
        if a_hold or a_done:
            read_free, ready, r = r + a_hold, r + a_done, r + a_hold
        if b_hold or b_done:
            b0 = max(r, read_free)
            read_free, ready = b0 + b_hold, max(ready, b0 + b_done)
        fetch_end.append(max(ready, fetch_end[-1] if fetch_end else -math.inf) + fetch)
        comp_end.append(max(fetch_end[-1], comp_end[-1] if comp_end else -math.inf)
                        + (comp_last if last else comp_inner))
        if last:
            store_end = max(comp_end[-1], store_end) + store
            w = max(store_end, write_free)
            write_free = w + w_hold
            done.append(w + w_done)
    return done[-1], done[0]


def naive_train(route, e_dst, e_c, e_prop, n_ovh, n_flit, t0, nbytes, flit, to_worker=False):
    """Per flit of a ``nbytes`` train put at ``t0`` on ``route`` (edge ids), when it reaches the route's end
    node, or with ``to_worker`` when that node's worker takes it: every wire a FIFO server of ``size / bw``
    per flit followed by its propagation; a flit-aware node a FIFO worker whose first flit pays the overhead;
    a store-and-forward node waits for the whole train, then pays its overhead for all of it."""
    n = -(-nbytes // flit)
    sizes = [flit] * (n - 1) + [nbytes - flit * (n - 1)]
    ready = [t0] * n
    for k, e in enumerate(route):
        free, out = -math.inf, []
        for i in range(n):
            free = max(ready[i], free) + sizes[i] * e_c[e]
            out.append(free + e_prop[e])
        ready = out
        v = e_dst[e]
        if k == len(route) - 1 and not to_worker:
            break
        if n_flit[v] or k == len(route) - 1:
            free, out = -math.inf, []
            for i in range(n):
                free = max(ready[i], free) + (n_ovh[v] if i == 0 else 0.0)
                out.append(free)
            ready = out
        else:
            ready = [max(ready) + n_ovh[v]] * n
    return ready


def naive_commits(ready, addr, shift, n_pcs, commit, penalty, free):
    """The last commit of every PC: unit ``i`` (ready at ``ready[i]``) commits on PC ``((addr >> shift) + i)
    % n_pcs`` after the units before it on that PC; a PC's first commit waits for ``free[q]`` and pays
    ``penalty[q]``.  Returns per PC its last commit's end (-inf: untouched)."""
    last = [-math.inf] * n_pcs
    for i, t in enumerate(ready):
        q = ((addr >> shift) + i) % n_pcs
        first = last[q] == -math.inf
        start = max(t, free[q]) + penalty[q] if first else max(t, last[q])
        last[q] = start + commit
    return last


def naive_transfer_end(kind, T, nbytes, addr, fwd, rev, e_src, e_dst, e_c, e_bw, e_prop, n_ovh, n_flit, flit,
                       burst, shift, n_pcs, commit, burst_commit, penalty, free):
    """Completion of one isolated transfer begun at ``T`` (kinds of ``kbfast.fast.closed_form``: 0 a PE
    request, 1 a host write, 2 a host read, 3 a PE read finished when the controller takes its last flit),
    over the forward route ``fwd`` and the reverse route ``rev`` (edge id lists), and per PC its last commit."""
    def control(route):                 # a zero-byte message: propagation, intermediate overheads
        return sum(e_prop[e] for e in route) + sum(n_ovh[e_dst[e]] for e in route[:-1])

    head = T + n_ovh[e_src[fwd[0]]]
    ctrl, back = e_dst[fwd[-1]], n_ovh[e_dst[rev[-1]]]
    if kind == 2:
        t0 = head + control(fwd) + n_ovh[ctrl]
        n_chunks = -(-nbytes // burst)
        delta = nbytes / min(e_bw[e] for e in fwd) / n_chunks if n_chunks else 0.0
        ready = [t0 + (i + 1) * delta for i in range(n_chunks)]
        last = naive_commits(ready, addr, shift, n_pcs, burst_commit, penalty, [-math.inf] * n_pcs)
        send = max([t0 + n_chunks * delta] + last)
        if nbytes == 0:
            return send + control(rev) + back, last
        return naive_train(rev, e_dst, e_c, e_prop, n_ovh, n_flit, send, nbytes, flit)[-1] + back, last
    if nbytes == 0:
        return head + control(fwd) + n_ovh[ctrl] + (0.0 if kind == 1 else control(rev) + back), [-math.inf] * n_pcs
    taken = naive_train(fwd, e_dst, e_c, e_prop, n_ovh, n_flit, head, nbytes, flit, to_worker=True)
    last = naive_commits(taken, addr, shift, n_pcs, commit, penalty, free)
    fin = taken[-1] if kind == 3 else max(last)
    return fin + (0.0 if kind == 1 else control(rev) + back), last
