"""A pipelined step's timing from its pieces (docs/models.md "Pipeline and data parallelism").

The fast path times a stage's layer, the LM head, the hand-off between two stages and the tokens' trip back
once each (kbfast.workloads.parallel), then composes them by the pipeline's recurrence, per round ``r``,
micro-batch ``j`` and stage ``s`` (every replica alike):

    arrive = 0                                     stage 0, first round
           = C[r-1, j, S-1] + token                stage 0 after: the micro-batch's tokens back
           = C[r, j, s-1] + send                   stage s > 0: the hand-off sent
    begin  = max(free[s], arrive)
    C[r, j, s] = begin + (recv if s > 0) + L x layer (+ head on the last stage)
    free[s]    = C[r, j, s] + (send, or token_out on the last stage)

``send`` is the hand-off's sender side (its load and IPCQ send), ``recv`` the rest of the hand-off (the
receive and the next stage's all-gather), ``token`` the tokens' trip (``token_out``: its sender side).  The
step's latency is the makespan of one round (fill and drain); its period, what a step costs when steps
follow each other (the next round's micro-batches enter as their tokens come back), is the makespan of two
rounds less that of one.  The recurrence is monotone in its terms: run on the pieces' lower and upper
bounds it bounds the makespan.

It sees each piece from a launch barrier: a stage's next piece starts when the piece's last PE is done,
where in the pipeline each PE goes on as soon as it is (a hand-off's part leaves as its PE ends the layer).
With stages of a few microseconds that skew is several per cent of the step (a two-layer toy: 6.5 % above
the exact replay of the whole pipeline), with real layers under one either way (Llama-3.2-1B, two stages:
0.4 % below it).  So the fast path evaluates the whole
pipeline's stand-in Program (kbfast.workloads.model.pipeline_piece, every GEMM command one timed op) when
its replay fits the hybrid budget (:func:`whole_events`), and composes by the recurrence above it.  Exact
mode always replays the whole pipeline with its tiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TERMS = ("layer", "head", "send", "recv", "token", "token_out")
RECURRENCE, WHOLE = "pipeline recurrence", "pipeline replayed whole"


@dataclass(frozen=True)
class PipelineTiming:
    """A pipelined step: its makespan (one round, fill and drain), its period (a step among steps), each
    stage's row of one round (first start, last end, busy and idle ns), and the time each term spends on the
    critical path of one round (ns)."""

    makespan_ns: float
    period_ns: float
    stages: list[dict] = field(default_factory=list)
    on_path: dict[str, float] = field(default_factory=dict)


def _run(terms: dict[str, float], stages: int, micro: int, layers: int, rounds: int):
    """The recurrence (module docstring) over ``rounds``; returns (makespan, stage rows of the first round,
    critical path's time per term)."""
    S, M = stages, micro
    free = [0.0] * S
    free_at = [None] * S                 # the event that freed each stage
    done: dict[tuple, tuple] = {}        # (r, j, s) -> (C, [(term, ns)], predecessor event)
    rows = [{"start_ns": None, "end_ns": 0.0, "busy_ns": 0.0} for _ in range(S)]
    last = None
    for r in range(rounds):
        for j in range(M):
            for s in range(S):
                if s > 0:
                    arrive, src = done[(r, j, s - 1)][0] + terms["send"], (r, j, s - 1)
                elif r > 0:
                    arrive, src = done[(r - 1, j, S - 1)][0] + terms["token"], (r - 1, j, S - 1)
                else:
                    arrive, src = 0.0, None
                if free[s] > arrive:             # waits for itself: its own hand-off out of the last one
                    begin, pred, link = free[s], free_at[s], "send" if s < S - 1 else "token_out"
                else:                             # waits for its input
                    begin, pred, link = arrive, src, "send" if s > 0 else "token"
                path = [(link, terms[link])] if pred is not None else []
                work = [("recv", terms["recv"])] if s > 0 else []
                work += [("layer", layers * terms["layer"])] + ([("head", terms["head"])] if s == S - 1 else [])
                C = begin + sum(ns for _, ns in work)
                out = terms["send"] if s < S - 1 else terms["token_out"]
                free[s], free_at[s] = C + out, (r, j, s)
                done[(r, j, s)] = (C, path + work, pred)
                if r == 0:
                    row = rows[s]
                    row["start_ns"] = begin if row["start_ns"] is None else row["start_ns"]
                    row["end_ns"] = C
                    row["busy_ns"] += C - begin
                if last is None or C >= done[last][0]:
                    last = (r, j, s)
    makespan = done[last][0]
    on_path = dict.fromkeys(TERMS, 0.0)
    event = last
    while event is not None:
        for k, ns in done[event][1]:
            on_path[k] += ns
        event = done[event][2]
    return makespan, rows, on_path


def schedule(terms: dict[str, float], stages: int, micro: int, layers: int) -> PipelineTiming:
    """The pipelined step of ``stages`` stages of ``layers`` layers and ``micro`` micro-batches, from the
    pieces' ``terms`` (ns, :data:`TERMS`)."""
    one, rows, on_path = _run(terms, stages, micro, layers, 1)
    two = _run(terms, stages, micro, layers, 2)[0]
    for row in rows:
        row["idle_ns"] = one - row["busy_ns"]
    return PipelineTiming(one, two - one, rows, on_path)


def terms_of(results: dict, field_name: str = "latency_ns") -> dict[str, float]:
    """The recurrence's terms from the pieces' results by name (layer, head, hand-off, token), from their
    ``field_name`` (``latency_ns``, ``lo_ns``, ``hi_ns``): the hand-off split at its sender's end, the
    tokens' trip at theirs."""
    hand, tok = results["hand-off"], results["token"]
    send = hand.phase_ns.get("pp send", 0.0)
    out = tok.phase_ns.get("pp tokens out", 0.0)
    whole = getattr(hand, field_name)
    return {"layer": getattr(results["layer"], field_name), "head": getattr(results["head"], field_name),
            "send": send, "recv": whole - send, "token": getattr(tok, field_name), "token_out": out}


def whole_runs(name: str, layers: int, stages: int, micro: int, rounds: int) -> int:
    """How often the whole pipeline of ``rounds`` rounds runs the piece ``name`` (on all its replicas at once):
    every layer of every stage, the head and the tokens' trip per micro-batch, a hand-off between every two
    stages (the tokens' trip: after every round but the last)."""
    per = {"layer": layers, "head": 1, "hand-off": stages - 1}.get(name)
    if per is None:
        return micro * (rounds - 1)
    return per * micro * rounds


def whole_events(estimates: dict[str, int], layers: int, stages: int, micro: int, rounds: int = 2) -> int:
    """About the events an exact replay of the whole pipeline's stand-in takes: each piece's estimate
    (kbfast.sim.lowering.replay_events_estimate of its stand-in) times :func:`whole_runs`."""
    return sum(n * whole_runs(name, layers, stages, micro, rounds) for name, n in estimates.items())
