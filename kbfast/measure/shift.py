"""One evaluation of a stand-in Program for every length of its attention (docs/models.md "Attention shifts").

A decode layer's KV length changes only ops of its attention phase that keep their own PE busy for their
time and touch nothing shared: its GEMM commands (one COMPUTE each in a stand-in) and its MATH.  On each
agent that has them they form *runs* (maximal sequences of such ops; exchanges between them, as in a ring
attention, split them); every such agent has as many runs.  An op's *class* is how many runs came before it:
by position on those agents, and on the others (the helper agents that stream a prefetch, which only WAIT
and COMPUTE) the largest class of what it waits for.

When the fabric is idle across run ``k`` (every op that uses it, a DMA, a SEND or a RECV, of class ``<= k``
ends, a receive's credit included, before any op of class ``> k`` is issued; every message sent before the
run is received before it), what follows sees an idle system, so it runs the same from any start.  If every
agent spends ``D`` ns more in run ``k``, every op of class ``> k`` is the same ``D`` ns later, provided a WAIT
whose target and predecessor are of different classes was held up by the later-class one (so moving that one
later keeps it binding).  The ops before are unchanged: they ran before.

So a layer's point is evaluated once, as its *base*: the same Program with each run's ops 0 ns but its last,
which takes ``B`` ns.  A point whose agents all spend ``A_k >= B_k`` ns in run ``k`` is the base with every op
of class ``> k`` moved ``A_k - B_k`` ns later (summed over the runs before it) and its run ops at their own
times, back to back; the base checks the gaps and the WAITs in its own timeline, the exact replay's or the
fluid schedule's (:func:`gaps`, :func:`held`).  ``B`` is 0 where the lower-bound schedule of the layer with
its runs at 0 ns shows the gap, else twice that gap (:func:`plan`).  A run that a point spends less than
``B`` in, or that its agents spend different times in (a short step between two exchanges, which the next
exchange always meets), is *fixed*: its ops keep their times in that point's base.  ``B`` depends only on
what the points share, so each point's figures are the same whichever was evaluated first.

The times are the base's plus a shift, rounded once; a replay of the point itself adds its times in another
order, which can order two flits that tie exactly in the base the other way (tests/test_model_shift.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np

from kbfast.ir import Op, Program
from kbfast.sim.lowering import agent_pes

PHASE = "attention"      # the phase whose length the KV length sets
NO_FABRIC = (Op.COMPUTE, Op.MATH, Op.START, Op.WAIT)


@dataclass(frozen=True)
class Split:
    """Where a Program's attention runs sit (the module docstring): the running agents, the runs' ops in
    ``agent_ops`` order (their positions, agents' rows and runs), per running agent and run the positions of
    its first and last op, per op its class and its predecessor's, and the cross-agent WAITs."""

    runners: np.ndarray       # the agents that have runs, ascending (a row each below)
    ops: np.ndarray           # the runs' op ids, in agent_ops order
    pos: np.ndarray           # their positions in agent_ops
    row_of: np.ndarray        # each one's agent's row
    run_of: np.ndarray        # and run
    first: np.ndarray         # [running agents, runs]: position of the run's first op
    last: np.ndarray          # [running agents, runs]: of its last
    cls: np.ndarray           # per op id: its class (a run op: its run)
    issue_cls: np.ndarray     # per op id: its predecessor's class (what its issue waits for), 0 for a first op
    waits: np.ndarray         # op ids of WAITs on another agent's op

    @property
    def runs(self) -> int:
        return self.first.shape[1]


@dataclass(frozen=True)
class Times:
    """One evaluator's per-op issue and end times and per-agent finishes, ns."""

    op_issue_ns: np.ndarray
    op_end_ns: np.ndarray
    agent_finish_ns: np.ndarray

    def latency(self, launch_ns: float) -> float:
        """The last agent's finish from the launch barrier."""
        return float(self.agent_finish_ns.max() - launch_ns) if len(self.agent_finish_ns) else 0.0


def split(p: Program) -> Split | None:
    """``p``'s attention runs, when shifts can move them (the module docstring), or None: runs of synchronous
    COMPUTEs and MATHs in the attention phase, as many on every agent that has one, on PEs where no other
    agent computes (the other agents only START, WAIT and COMPUTE, and WAIT only for the running agents' ops);
    before each run, as many messages received by each agent as were sent to it."""
    mask = run_mask(p)
    if mask is None:
        return None
    ops, pos = p.agent_ops, np.arange(len(p.agent_ops))
    owner = np.repeat(np.arange(p.n_agents), np.diff(p.op_ptr))
    code = p.op_code[ops]
    at = mask[ops]
    running = np.bincount(owner[at], minlength=p.n_agents) > 0
    mine = running[owner]
    pe = agent_pes(p)[running]
    if (not running.any() or not np.all((code == Op.START) | (code == Op.WAIT) | (code == Op.COMPUTE) | mine)
            or len(np.unique(pe)) != len(pe) or np.any(pe < 0)):
        return None
    begins = p.op_ptr[owner]
    opens = at & ((pos == begins) | ~np.roll(at, 1))
    closes = at & ((pos == p.op_ptr[owner + 1] - 1) | ~np.roll(at, -1))
    opened = np.bincount(owner[opens], minlength=p.n_agents)[running]
    runs = int(opened[0])
    if np.any(opened != runs):
        return None
    first, last = pos[opens].reshape(-1, runs), pos[closes].reshape(-1, runs)
    closed = np.cumsum(closes) - closes               # runs closed before each position, over all agents
    cls = np.zeros(p.n_ops, np.int64)
    cls[ops[mine]] = (closed - closed[begins])[mine]  # by position on a running agent (a run op: its run)
    waits_on = (code == Op.WAIT) & (p.op_target[ops] >= 0)
    target = np.where(waits_on, p.op_target[ops], 0)  # other ops' targets are channels or nodes
    other = waits_on & (p.op_agent[target] != owner)
    if np.any(other & ~mine & ~running[p.op_agent[target]]):
        return None                                   # a follower waits for a follower's op
    if (~mine).any():      # a follower's class: the largest of its predecessor's and what it waits for, in order
        dep = np.where(other, cls[target], 0)[~mine]
        rank = np.cumsum(np.r_[True, owner[~mine][1:] != owner[~mine][:-1]]) - 1
        cls[ops[~mine]] = np.maximum.accumulate(dep + rank * (runs + 1)) - rank * (runs + 1)
    start = pos == begins
    ended = cls[ops] + at                            # the class of each op's end: a run's last op ends the run
    issue_cls = np.zeros(p.n_ops, np.int64)
    issue_cls[ops[~start]] = ended[pos[~start] - 1]
    issue_cls[ops[at]] = cls[ops[at]]                 # a run op: its run's (moved from where the run starts)
    # before each run, as many messages taken by each agent as sent to it: counts per (class, agent), summed
    sends, recvs = code == Op.SEND, code == Op.RECV
    width = (runs + 1) * p.n_agents
    sent = np.bincount(cls[ops[sends]] * p.n_agents + p.channels.dst[p.op_target[ops[sends]]], minlength=width)
    taken = np.bincount(cls[ops[recvs]] * p.n_agents + owner[recvs], minlength=width)
    gap = np.cumsum((sent - taken).reshape(runs + 1, p.n_agents), axis=0)[:runs]
    if np.any(gap != 0):
        return None
    row = np.cumsum(running) - 1                      # each running agent's row in first and last
    return Split(np.flatnonzero(running), ops[at], pos[at], row[owner[at]], cls[ops[at]], first, last, cls, issue_cls,
                 ops[other])


def spent(p: Program, s: Split) -> np.ndarray:
    """[running agents, runs]: the ns each agent spends in each run (the sum of its ops' times)."""
    per = np.zeros((len(s.runners), s.runs))
    np.add.at(per, (s.row_of, s.run_of), p.op_arg[s.ops])
    return per


def based(p: Program, s: Split, b_ns: np.ndarray, fixed: np.ndarray | None = None) -> Program:
    """``p`` as a base: the ops of every run but the ``fixed`` ones 0 ns, but each such run's last op, ``b_ns``
    of that run; the fixed runs as they are.  Only the times change (a MATH's elements are read by no
    evaluator: :func:`key` leaves the runs' out)."""
    moving = np.ones(s.runs, bool) if fixed is None else ~fixed
    arg = p.op_arg.copy()
    arg[s.ops[moving[s.run_of]]] = 0.0
    last = p.agent_ops[s.last[:, moving]]
    arg[last] = np.broadcast_to(np.asarray(b_ns)[moving], last.shape)
    return dataclasses.replace(p, op_arg=arg)


def plan(p: Program, s: Split, lower_schedule) -> np.ndarray:
    """The runs' ``B`` ns (the module docstring): 0 where the lower-bound schedule (``lower_schedule`` of a
    Program, a quick guide: the base checks its own timeline) of ``p`` with every run at 0 ns shows the
    fabric idle across the run, else twice the gap it shows."""
    state = lower_schedule(based(p, s, np.zeros(s.runs)))
    g = gaps(p, s, Times(state.op_issue, state.op_end, state.a_finish))
    return np.where(g < 0.0, 0.0, 2.0 * g + 1.0)


def run_mask(p: Program) -> np.ndarray | None:
    """Per op: a synchronous COMPUTE or MATH of the attention phase, what :func:`split` makes runs of; None
    without that phase."""
    if PHASE not in p.phase_names or p.op_phase is None or not len(p.agent_ops):
        return None
    code = p.op_code
    return (p.op_phase == p.phase_names.index(PHASE)) & ((code == Op.COMPUTE) | (code == Op.MATH)) & ~p.op_async


def layer_key(p: Program, mask: np.ndarray) -> bytes:
    """A digest of everything the evaluators read of ``p`` but its tables (the caller keys those), with the
    ``mask`` ops' times and elements (:func:`run_mask`) left out: the same at every KV length of a layer, and
    of everything :func:`split` reads (the caller remembers its split under it)."""
    h = hashlib.sha1(usedforsecurity=False)      # a memo key, not a signature: sha1 hashes twice as fast here
    ch = p.channels
    arg, nbytes = p.op_arg.copy(), p.op_nbytes.copy()
    arg[mask] = 0.0
    nbytes[mask] = 0
    for a in (p.agent_node, p.agent_kind, p.agent_start_ns, p.op_ptr, p.agent_ops, p.op_code, p.op_target,
              nbytes, p.op_addr, p.op_async, arg, p.op_route, p.op_rroute, p.route_ptr, p.route_edges,
              p.op_phase, *(getattr(ch, f.name) for f in dataclasses.fields(ch))):
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    h.update(repr((p.launch_ns, p.phase_names, p.name)).encode())
    return h.digest()


def gaps(p: Program, s: Split, times: Times) -> np.ndarray:
    """Per run ``k``, how much later the ops of class ``> k`` would have to start for the fabric to be idle
    across it in ``times`` (below 0: it is): the last end of an op of class ``<= k`` that uses the fabric (a
    receive's credit included) minus the first issue of the ops that follow the run on each running agent."""
    fabric = np.flatnonzero(~np.isin(p.op_code, NO_FABRIC))
    done = times.op_end_ns[fabric]
    if len(p.channels.credit_ns):          # the largest credit: a receive may take any channel
        done = np.where(p.op_code[fabric] == Op.RECV, done + max(float(p.channels.credit_ns.max()), 0.0), done)
    out = np.full(s.runs, -np.inf)
    ends_at = p.op_ptr[1:][s.runners]
    for k in range(s.runs):
        before = s.cls[fabric] <= k
        nxt = s.last[:, k] + 1
        head = p.agent_ops[nxt[nxt < ends_at]]
        if before.any() and len(head):
            out[k] = float(done[before].max() - times.op_issue_ns[head].min())
    return out


def held(p: Program, s: Split, times: Times) -> bool:
    """Whether every WAIT on another agent's op was held up, in ``times``, by the later class of its two (its
    target's, or its predecessor's), ties included: moving that class later then keeps it binding.  A
    running agent's WAIT has its position's class, so its target may be of no later class."""
    w = s.waits
    if not len(w):
        return True
    target = p.op_target[w]
    late = s.cls[target] - s.issue_cls[w]
    waited = times.op_end_ns[target] - times.op_issue_ns[w]
    runner = np.isin(p.op_agent[w], s.runners)
    return bool(np.all(((late > 0) & (waited >= 0.0) & ~runner) | ((late < 0) & (waited <= 0.0)) | (late == 0)))


def moved(base: Times, p: Program, s: Split, shift_ns: np.ndarray) -> Times:
    """``base``'s times for point ``p``: every op of class ``c`` later by ``shift_ns[0] + .. + shift_ns[c - 1]``
    (its issue by its predecessor's class's), the runs' ops back to back from where each run starts, at
    ``p``'s own times, and each agent's finish with its last op."""
    total = np.concatenate([[0.0], np.cumsum(shift_ns)])
    issue, end = base.op_issue_ns + total[s.issue_cls], base.op_end_ns + total[s.cls]
    took = p.op_arg[s.ops]
    opened = s.first[s.row_of, s.run_of]               # each run op's run's first position
    start = issue[p.agent_ops[opened]]
    before = np.cumsum(took) - took                     # over all runs' ops, in order
    head = np.searchsorted(s.pos, opened)
    issue[s.ops] = start + (before - before[head])
    end[s.ops] = issue[s.ops] + took
    n = np.diff(p.op_ptr)
    lasts = p.agent_ops[np.maximum(p.op_ptr[1:] - 1, 0)]
    finish = np.where(n > 0, base.agent_finish_ns + (end[lasts] - base.op_end_ns[lasts]), base.agent_finish_ns)
    return Times(issue, end, finish)
