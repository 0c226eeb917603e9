"""Lowering: a Program's arrays packed and renumbered for the kernels of both evaluators.

* :func:`compact` keeps the nodes and edges a Program touches, renumbered 0..n-1;
* :func:`make_prog` packs the agents, ops and IPCQ channels into a :class:`~kbfast.sim.agents.Prog`;
* :func:`heap_capacity` and :func:`estimate_memory_bytes` size the event queue and the replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbfast.ir import Op, Program
from kbfast.sim.agents import Prog
from kbfast.topology.kinds import NodeKind


@dataclass(frozen=True)
class Compact:
    """The nodes and edges a Program touches, renumbered 0..n-1 for the kernel."""

    nodes: np.ndarray        # global node ids, ascending
    edges: np.ndarray        # global edge ids, ascending
    route_edges: np.ndarray  # local edge ids
    e_src: np.ndarray        # per local edge: local source node (int32)
    e_dst: np.ndarray        # per local edge: local destination node (int32)
    hbm_ctrls: np.ndarray    # global node ids of the HBM controllers, by local controller index
    node_hbm: np.ndarray     # local node -> controller index or -1


def renumber(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``ids`` (all in [0, n)) ascending, and the map global -> local (int32), by
    marking instead of sorting (np.unique's sort took 0.15 s at 1024 SIPs)."""
    used = np.zeros(n, np.bool_)
    used[ids] = True
    distinct = np.flatnonzero(used)
    local = np.full(n, -1, np.int32)
    local[distinct] = np.arange(len(distinct), dtype=np.int32)
    return distinct, local


def compact(p: Program) -> Compact:
    t = p.tables
    edges, edge_local = renumber(p.route_edges, len(t.edge_src))
    ends = (t.edge_src[edges], t.edge_dst[edges], p.agent_node)
    nodes, node_local = renumber(np.concatenate(ends), len(t.node_kind))
    nodes = nodes.astype(np.result_type(t.edge_src.dtype, p.agent_node.dtype))
    is_hbm = t.node_kind[nodes] == NodeKind.HBM_CTRL
    node_hbm = np.full(len(nodes), -1, np.int32)
    node_hbm[is_hbm] = np.arange(int(is_hbm.sum()), dtype=np.int32)
    return Compact(nodes=nodes, edges=edges, route_edges=edge_local[p.route_edges], e_src=node_local[ends[0]],
                   e_dst=node_local[ends[1]], hbm_ctrls=nodes[is_hbm], node_hbm=node_hbm)


def vc_edges(p: Program, edges: np.ndarray) -> np.ndarray:
    """Which of ``edges`` are PE egress links, where PE_DMA's two virtual channels meet (spec_ccl §2.8)."""
    t = p.tables
    return t.node_kind[t.edge_src[edges]] == NodeKind.PE_DMA


def heap_capacity(p: Program) -> int:
    """Bound on pending events: one per flit of every transaction, plus agent and control events."""
    flit = p.tables.spec.fabric.flit_bytes
    return int(np.sum((p.op_nbytes + flit - 1) // flit)) + 4 * (p.n_ops + p.n_agents) + 64


def estimate_memory_bytes(p: Program) -> int:
    """Upper estimate of the replay's memory: per-op state plus one pending event per flit in flight."""
    flits = int(np.sum((p.op_nbytes + p.tables.spec.fabric.flit_bytes - 1) // p.tables.spec.fabric.flit_bytes))
    # 80 B per queue slot (kbfast.sim.heap: 8 arrays of 8 B, two free lists)
    return 200 * p.n_ops + 64 * len(p.route_edges) + 80 * (flits + p.n_ops + p.n_agents)


def make_prog(p) -> Prog:
    """Pack a Program's arrays for the kernels (channels included)."""
    ch = p.channels
    # Messages of a channel, in the sender's program order (= send order).
    pos_in_program = np.empty(p.n_ops, np.int64)
    pos_in_program[p.agent_ops] = np.arange(p.n_ops)
    sends = np.flatnonzero(p.op_code == Op.SEND)
    sends = sends[np.lexsort((pos_in_program[sends], p.op_target[sends]))]
    counts = np.bincount(p.op_target[sends], minlength=len(ch)) if len(ch) else np.zeros(0, np.int64)
    return Prog(
        a_start=p.agent_start_ns, a_host=p.agent_kind == 1, op_ptr=p.op_ptr, agent_ops=p.agent_ops,
        op_code=p.op_code, op_target=p.op_target.astype(np.int64), op_nbytes=p.op_nbytes, op_async=p.op_async,
        op_arg=p.op_arg, ch_src=ch.src, ch_dst=ch.dst, ch_nslots=ch.n_slots, ch_setup=ch.setup_ns,
        ch_tier_bw=ch.tier_bw, ch_hop_bw=ch.hop_bw, ch_credit=ch.credit_ns, ch_in_ptr=ch.in_ptr,
        ch_in_list=ch.in_list, ch_msg_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        ch_msg_op=sends.astype(np.int64), credit_blocking=bool(ch.credit_blocking), poll_ns=float(ch.poll_ns))
