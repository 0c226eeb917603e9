"""Trace a kernel once per rank *role* into a static instruction template (spec_ccl §5.0).

The built-in kernels' control flow depends on the rank's position (its role), never on the
payloads, so ranks of one role run the same op sequence.  :func:`trace` runs the kernel's
generator once with symbolic payloads: ``tl.contribution()`` is value 0, every recv and every
``tl.add`` defines a new value id, and sends name the value they carry (SSA form).  The
template is what :mod:`kbfast.workloads.symbolic` runs for every rank of the role.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbfast.errors import KbfastError
from kbfast.ir import Op
from kbfast.workloads.kernels import Kernel, Tl

ADD = 8      # template-only ops (nothing emitted): acc := a + b, a phase tag, and the check a == b; codes a
PHASE = 9    # template never emits (FETCH and STORE come from a GEMM's lowering only), or no Op's
SAME = 64
PREFETCH = 65  # emitted, and lowered like a GEMM command row (kbfast.workloads.commands): no Op of its own
assert min(SAME, PREFETCH) > max(Op)
UNEMITTED = (ADD, PHASE, SAME)


@dataclass
class Template:
    """Instructions of one role, as arrays (one entry per instruction).  ``val``: value defined (recv, add) or
    sent (send); ``a``, ``b``: add operands; ``label``: direction index (send / recv); ``phase``: phase id;
    ``kill_count`` / ``kill``: how many values die after each instruction, and which, in instruction order;
    ``ret``: the value the kernel returns (-1: nothing)."""

    op: np.ndarray
    label: np.ndarray
    val: np.ndarray
    a: np.ndarray
    b: np.ndarray
    nbytes: np.ndarray
    arg: np.ndarray
    phase: np.ndarray
    kill_count: np.ndarray
    kill: np.ndarray
    n_values: int
    ret: int


_INT_COLUMNS = ("op", "label", "val", "a", "b", "nbytes", "phase")


def trace(kernel: Kernel, tl: Tl, labels: dict[str, int], phases: dict[str, int], math_ns) -> Template:
    """Run ``kernel`` on ``tl`` with symbolic payloads; ``labels`` maps direction names to indices
    (unknown names are appended), ``phases`` collects phase names (ids in order of first trace)."""
    rows: list[tuple] = []          # per instruction: the _INT_COLUMNS
    args: list[float] = []
    uses: dict[int, int] = {}       # value -> the last instruction that reads or defines it
    n_values = [1]                  # value 0 is the rank's contribution

    def emit(op: int, label: int = -1, val: int = -1, a: int = -1, b: int = -1, nbytes: int = 0,
             arg: float = 0.0, phase: int = -1) -> None:
        i = len(rows)
        if op == ADD or op == SAME:
            uses[a] = i
            uses[b] = i
        elif op == Op.SEND:
            uses[val] = i
        if op == ADD or op == Op.RECV:
            uses[val] = i
        rows.append((op, label, val, a, b, nbytes, phase))
        args.append(arg)

    def new_value() -> int:
        n_values[0] += 1
        return n_values[0] - 1

    def add(acc: int, other: int) -> int:
        out = new_value()
        emit(ADD, val=out, a=acc, b=other)
        return out

    def same(value: int, other: int) -> int:
        emit(SAME, a=value, b=other)
        return value

    tl.contribution = lambda: 0
    tl.add = add
    tl.same = same
    tl.tagged = False
    gen = kernel(tl)
    reply = None
    ret = -1
    while True:
        try:
            req = gen.send(reply)
        except StopIteration as stop:
            ret = -1 if stop.value is None else int(stop.value)
            break
        reply = None
        kind = req.kind
        if kind == "send":
            emit(Op.SEND, labels.setdefault(req.direction, len(labels)), val=int(req.payload), nbytes=req.nbytes)
        elif kind == "recv":
            reply = new_value()
            emit(Op.RECV, labels.setdefault(req.direction, len(labels)), val=reply, nbytes=req.nbytes, arg=1.0)
        elif kind == "math":
            emit(Op.MATH, nbytes=req.nbytes, arg=math_ns(req.nbytes, req.direction or "add"))
        elif kind == "gemm":                    # a command: nbytes names it, the lowering expands it
            emit(Op.GEMM, nbytes=int(req.payload))
        elif kind == "prefetch":
            emit(PREFETCH, nbytes=int(req.payload), arg=req.value)
        elif kind == "compute":
            if req.value < 0:
                raise KbfastError(f"COMPUTE needs ns >= 0 (got {req.value})")
            emit(Op.COMPUTE, arg=req.value)
        elif kind in ("load", "store"):         # the tile DMA: its target (the rank's own slice) is set per rank
            if req.nbytes < 0:
                raise KbfastError(f"DMA needs nbytes >= 0 and addr >= 0 (got {req.nbytes}, 0)")
            emit(Op.DMA_WRITE if kind == "store" else Op.DMA_READ, nbytes=req.nbytes)
        elif kind == "phase":
            emit(PHASE, phase=phases.setdefault(req.direction, len(phases)))
        else:
            raise KbfastError(f"a kernel yielded an unknown request kind {kind!r}")
    cols = np.array(rows, np.int64).reshape(len(rows), len(_INT_COLUMNS))
    dead = [(last, v) for v, last in uses.items() if v != ret]      # each value dies after its last use
    last = np.array([d[0] for d in dead], np.int64)
    order = np.argsort(last, kind="stable")                          # in the order the values were first seen
    op, label, val, a, b, nbytes, phase = (np.ascontiguousarray(c) for c in cols.T)
    return Template(op.astype(np.int8), label, val, a, b, nbytes, np.array(args, np.float64), phase,
                    np.bincount(last, minlength=len(rows)).astype(np.int64),
                    np.array([d[1] for d in dead], np.int64)[order], n_values[0], ret)


def templates_to_arrays(tpls: list[Template]) -> dict[str, np.ndarray]:
    """Concatenate templates into flat arrays (CSR by template, and the kill lists CSR by instruction)."""
    cat = lambda f: np.concatenate([getattr(tp, f) for tp in tpls])
    counts = cat("kill_count")
    return {**{f: cat(f) for f in ("op", "label", "val", "a", "b", "nbytes", "arg", "phase", "kill")},
            "ptr": np.concatenate([[0], np.cumsum([len(tp.op) for tp in tpls])]).astype(np.int64),
            "kill_ptr": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            "n_values": np.array([tp.n_values for tp in tpls], np.int64),
            "ret": np.array([tp.ret for tp in tpls], np.int64)}
