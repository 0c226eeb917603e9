"""The Program IR (design §4): a workload as flat numpy arrays, built by generators and read by both evaluators.

* :mod:`kbfast.ir.program`: ``Program``, ``Channels``, the op codes ``Op``, ``AgentKind`` and the constants;
* :mod:`kbfast.ir.builder`: ``ProgramBuilder``, which adds agents, ops and channels and resolves the routes;
* :mod:`kbfast.ir.gemm_pipeline`: the ops of a GEMM command's five helper agents;
* :mod:`kbfast.ir.tiling`: how a GEMM is cut into tiles (``plan_gemm``, ``GemmPlan``, epilogues, ``math_ns``).

``from kbfast.ir import Program, Op, ProgramBuilder, ...`` names them all.
"""

from kbfast.ir.builder import ProgramBuilder
from kbfast.ir.gemm_pipeline import gemm_ops, gemm_ops_count, prefetch_ops, prefetch_ops_count
from kbfast.ir.program import BUFFER_KINDS, RECV_ANY, WAIT_ALL, AgentKind, Channels, Op, Program

__all__ = ["BUFFER_KINDS", "RECV_ANY", "WAIT_ALL", "AgentKind", "Channels", "Op", "Program", "ProgramBuilder",
           "gemm_ops", "gemm_ops_count", "prefetch_ops", "prefetch_ops_count"]
