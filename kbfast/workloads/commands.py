"""GEMM commands inside traced kernels, and the two ways to lower them (docs/models.md "Two lowerings").

A kernel issues ``tl.gemm(i)``: command ``i`` of a :class:`GemmCommand` table, run by the issuing PE on
operands in its own HBM slice.  The trace keeps it as one row (code ``Op.GEMM``, ``nbytes = i``); a
lowering turns the rows into ops when :func:`kbfast.workloads.symbolic.run_traced` emits them:

* :class:`TileLowering` (exact mode): the command becomes the tile pipeline of
  :meth:`kbfast.ir.ProgramBuilder.gemm`: a 0 ns COMPUTE marker, the five helper agents' ops (appended after
  the kernel's ops) and a WAIT for the last C write;
* :class:`TimedLowering` (fast path): the command becomes one COMPUTE op lasting the command's latency,
  which the caller computes once per distinct (command, PE) from the GEMM fast path.

Both record the command counts per kind (:attr:`counts`), as the reference's op logs show them, and where
each command went (:attr:`command_op`: the op that starts it, :attr:`command_id`: its table row); in
exact mode the op after the start is the WAIT that ends it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kbfast.config import budget
from kbfast.ir import Op, ProgramBuilder, gemm_ops, gemm_ops_count
from kbfast.ir.tiling import GemmPlan
from kbfast.topology.names import own_hbm_ctrls

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
class _Counting:
    commands: list[GemmCommand]
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTED, 0))
    command_op: list[int] = field(default_factory=list)
    command_id: list[int] = field(default_factory=list)

    def _count(self, code: np.ndarray) -> None:
        for name, op in COUNTED.items():
            self.counts[name] += int(np.count_nonzero(code == op))

    def _record(self, ops: np.ndarray, cmd: np.ndarray) -> None:
        self.command_op += np.asarray(ops, np.int64).tolist()
        self.command_id += np.asarray(cmd, np.int64).tolist()


class TileLowering(_Counting):
    """Exact mode: every command becomes its tile pipeline (see the module docstring)."""

    def emit(self, b: ProgramBuilder, agent, code, target, nbytes, arg, phase) -> None:
        """Append the emitted rows to ``b``, each GEMM command row expanded into its tile pipeline."""
        self._count(code)
        g = code == Op.GEMM
        rep = np.where(g, 2, 1)
        src = np.repeat(np.arange(len(code)), rep)
        first = np.cumsum(rep) - rep                    # each row's first position after the expansion
        agent, code, target, nbytes, arg, phase = (np.asarray(x)[src].copy() for x in
                                                   (agent, code, target, nbytes, arg, phase))
        rows = np.flatnonzero(g)
        cmd = np.asarray(nbytes)[first[rows]].copy()
        marker, wait = first[rows], first[rows] + 1
        size = np.array([gemm_ops_count(self.commands[c].plan) for c in cmd.tolist()], np.int64)
        budget.check(f"the exact Program of {b.name!r} (its GEMM commands lowered to {int(size.sum()):,} tile ops)",
                     budget.program_bytes(int(size.sum())), "use the fast path (drop --exact and --compare), a "
                     "smaller --batch or --seq, or more PEs")
        base = b.n_ops
        helpers_at = base + len(code) + np.cumsum(size) - size
        code[marker], target[marker], nbytes[marker], arg[marker] = int(Op.COMPUTE), -1, 0, 0.0
        code[wait], target[wait], nbytes[wait], arg[wait] = int(Op.WAIT), helpers_at + size - 1, 0, 0.0
        self._record(base + marker, cmd)
        b.add_ops(agent, code, target, nbytes, arg, phase)
        own = own_hbm_ctrls(b.t, b.agent_nodes(agent[marker])) if len(rows) else []
        for j, c in enumerate(cmd.tolist()):
            com = self.commands[c]
            ops = gemm_ops(com.plan, base + int(marker[j]), (int(own[j]), com.a_addr), (int(own[j]), com.b_addr),
                           (int(own[j]), com.c_addr), first=int(helpers_at[j]))
            for helper, cols in zip(b.gemm_helpers(int(agent[marker[j]])), ops):
                if len(cols[0]):
                    b.add_ops(helper, *cols[:4], int(phase[marker[j]]), addr=cols[4], is_async=cols[5])


class TimedLowering(_Counting):
    """Fast path: every command becomes a COMPUTE of ``ns(commands, pe_dma nodes)`` nanoseconds."""

    def __init__(self, commands: list[GemmCommand], ns: Callable[[np.ndarray, np.ndarray], np.ndarray]):
        super().__init__(commands)
        self.ns = ns

    def emit(self, b: ProgramBuilder, agent, code, target, nbytes, arg, phase) -> None:
        """Append the emitted rows to ``b``, each GEMM command row as a COMPUTE of its timed duration."""
        self._count(code)
        g = np.flatnonzero(code == Op.GEMM)
        code, nbytes, arg = code.copy(), np.array(nbytes, np.int64), np.array(arg, np.float64)
        if len(g):
            self._record(b.n_ops + g, nbytes[g])
            arg[g] = self.ns(nbytes[g], b.agent_nodes(agent[g]))
            code[g], nbytes[g] = int(Op.COMPUTE), 0
        b.add_ops(agent, code, target, nbytes, arg, phase)
