"""Diagnostics shared by both evaluators: deadlock and budget errors, the I1 check (spec_ccl §3) and the
report of blocked agents and IPCQ pointers (spec_ccl §3 F3)."""

from __future__ import annotations

import numpy as np

from kbfast.errors import KbfastError
from kbfast.ir import Op, Program
from kbfast.sim.agents import BLK_ALL, BLK_ANY, BLK_OP, BLK_SEND


class ReplayDeadlock(KbfastError):
    """The event queue emptied while agents were still blocked (``IpcqDeadlock`` with IPCQ channels)."""


class ReplayBudgetExceeded(KbfastError):
    """The replay used more events than its budget (a runaway or far too large workload)."""


class IpcqUnconsumed(KbfastError):
    """I1 (spec_ccl §3): a message was sent and never received."""


def check_consumed(p: Program, S) -> None:
    """Every IPCQ message must be received exactly once (invariant I1)."""
    left = np.flatnonzero(S.q_head > S.q_tail)
    if len(left):
        lost = int((S.q_head - S.q_tail)[left].sum())
        raise IpcqUnconsumed(f"I1 violated in {p.name!r}: {lost} IPCQ message{' was' if lost == 1 else 's were'} "
                             f"sent and never received (every send needs one recv)\npointers:\n"
                             + pointer_dump(p, S))


def blocked_report(p: Program, S) -> str:
    """Name every blocked agent and what it waits for, then dump the IPCQ pointers (spec_ccl §3 F3)."""
    kind = "IPCQ deadlock" if len(p.channels) else "deadlock"
    lines = [f"{kind} in {p.name!r}: the event queue emptied while agents were blocked"]
    for a in np.flatnonzero(S.a_finish < 0):
        block, arg = int(S.a_block[a]), int(S.a_arg[a])
        if block == BLK_OP:
            what = f"op {arg} ({Op(int(p.op_code[arg])).name}), which never completed"
        elif block == BLK_ALL:
            what = "WAIT for all outstanding ops"
        elif block == BLK_SEND:
            what = f"SEND on ch{arg}, whose ring stays full (no credit comes back)"
        elif block == BLK_ANY:
            what = "RECV on any channel, where nothing arrives"
        else:
            what = "an op that never ran"
        lines.append(f"  {p.agent_name(int(a))}: blocked on {what}")
    if len(p.channels):
        lines.append("pointers:")
        lines.append(pointer_dump(p, S))
    return "\n".join(lines)


def pointer_dump(p, S) -> str:
    """Every ring's pointers (spec_ccl §3 F3): sends accepted, credits seen, visible, consumed."""
    ch = p.channels
    lines = []
    for c in range(len(ch)):
        lines.append(f"  ch{c} {p.agent_name(int(ch.src[c]))} -> {p.agent_name(int(ch.dst[c]))}: "
                     f"my_head={int(S.q_head[c])} peer_tail_cache={int(S.q_tailc[c])} "
                     f"peer_head_cache={int(S.q_vis[c])} my_tail={int(S.q_tail[c])} n_slots={int(ch.n_slots[c])}")
    return "\n".join(lines)
