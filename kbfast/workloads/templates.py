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
    """Instructions of one role.  ``val``: value defined (recv, add) or sent (send); ``a``, ``b``: add operands;
    ``label``: direction index (send / recv); ``phase``: phase id; ``kills``: values dead after each
    instruction; ``ret``: the value the kernel returns (-1: nothing)."""

    op: list[int]
    label: list[int]
    val: list[int]
    a: list[int]
    b: list[int]
    nbytes: list[int]
    arg: list[float]
    phase: list[int]
    kills: list[list[int]]
    n_values: int
    ret: int


def trace(kernel: Kernel, tl: Tl, labels: dict[str, int], phases: dict[str, int], math_ns) -> Template:
    """Run ``kernel`` on ``tl`` with symbolic payloads; ``labels`` maps direction names to indices
    (unknown names are appended), ``phases`` collects phase names (ids in order of first trace)."""
    t = Template([], [], [], [], [], [], [], [], [], 1, -1)
    uses: dict[int, int] = {}

    def emit(op: int, label: int = -1, val: int = -1, a: int = -1, b: int = -1, nbytes: int = 0,
             arg: float = 0.0, phase: int = -1) -> None:
        for v in (a, b) if op in (ADD, SAME) else (val,) if op == Op.SEND else ():
            uses[v] = len(t.op)
        if op in (ADD, Op.RECV):
            uses[val] = len(t.op)
        for col, x in zip((t.op, t.label, t.val, t.a, t.b, t.nbytes, t.arg, t.phase),
                          (op, label, val, a, b, nbytes, arg, phase)):
            col.append(x)

    def new_value() -> int:
        t.n_values += 1
        return t.n_values - 1

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
    while True:
        try:
            req = gen.send(reply)
        except StopIteration as stop:
            t.ret = -1 if stop.value is None else int(stop.value)
            break
        reply = None
        if req.kind == "send":
            emit(Op.SEND, labels.setdefault(req.direction, len(labels)), val=int(req.payload), nbytes=req.nbytes)
        elif req.kind == "recv":
            reply = new_value()
            emit(Op.RECV, labels.setdefault(req.direction, len(labels)), val=reply, nbytes=req.nbytes, arg=1.0)
        elif req.kind == "math":
            emit(Op.MATH, nbytes=req.nbytes, arg=math_ns(req.nbytes, req.direction or "add"))
        elif req.kind == "gemm":                # a command: nbytes names it, the lowering expands it
            emit(Op.GEMM, nbytes=int(req.payload))
        elif req.kind == "prefetch":
            emit(PREFETCH, nbytes=int(req.payload), arg=req.value)
        elif req.kind == "compute":
            if req.value < 0:
                raise KbfastError(f"COMPUTE needs ns >= 0 (got {req.value})")
            emit(Op.COMPUTE, arg=req.value)
        elif req.kind in ("load", "store"):     # the tile DMA: its target (the rank's own slice) is set per rank
            if req.nbytes < 0:
                raise KbfastError(f"DMA needs nbytes >= 0 and addr >= 0 (got {req.nbytes}, 0)")
            emit(Op.DMA_WRITE if req.kind == "store" else Op.DMA_READ, nbytes=req.nbytes)
        elif req.kind == "phase":
            emit(PHASE, phase=phases.setdefault(req.direction, len(phases)))
        else:
            raise KbfastError(f"a kernel yielded an unknown request kind {req.kind!r}")
    t.kills = [[] for _ in t.op]
    for v, last in uses.items():
        if v != t.ret:
            t.kills[last].append(v)
    return t


def templates_to_arrays(tpls: list[Template]) -> dict[str, np.ndarray]:
    """Concatenate templates into flat arrays (CSR by template, and the kill lists CSR by instruction)."""
    cat = lambda f, d: np.array([x for tp in tpls for x in getattr(tp, f)], d)
    kills = [k for tp in tpls for k in tp.kills]
    cols = {f: cat(f, d) for f, d in (("op", np.int8), ("label", np.int64), ("val", np.int64), ("a", np.int64),
                                     ("b", np.int64), ("nbytes", np.int64), ("arg", np.float64), ("phase", np.int64))}
    return {**cols,
            "ptr": np.concatenate([[0], np.cumsum([len(tp.op) for tp in tpls])]).astype(np.int64),
            "kill_ptr": np.concatenate([[0], np.cumsum([len(k) for k in kills])]).astype(np.int64),
            "kill": np.array([v for k in kills for v in k], np.int64),
            "n_values": np.array([tp.n_values for tp in tpls], np.int64),
            "ret": np.array([tp.ret for tp in tpls], np.int64)}
