"""Chrome / Perfetto trace JSON of an exact replay (open it in ui.perfetto.dev).

One track per agent with a slice per op (issue to completion; DMA slices also
show the channel wait), and one counter track per busy edge with its
utilisation over the whole run.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from pathlib import Path

from kbfast.ir import Op
from kbfast.topology.names import node_name

if TYPE_CHECKING:                       # a type only: the report never runs a replay
    from kbfast.exact.replay import ExactResult


def trace_events(res: ExactResult) -> list[dict]:
    """The trace events of ``res``: a thread per agent with a slice per op (times in µs), then a counter per
    busy edge with its whole-run utilisation."""
    p = res.program
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": p.name}}]
    for a in range(p.n_agents):
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": a, "args": {"name": p.agent_name(a)}})
        for o in p.ops_of(a):
            o = int(o)
            code = Op(int(p.op_code[o]))
            start, end = float(res.op_issue_ns[o]), float(res.op_end_ns[o])
            if start < 0 or end < 0:
                continue
            args = {"op": o, "begin_ns": float(res.op_begin_ns[o])}
            name = code.name
            if code in (Op.DMA_WRITE, Op.DMA_READ):
                args.update(nbytes=int(p.op_nbytes[o]), dst=node_name(p.tables, int(p.op_target[o])),
                            addr=int(p.op_addr[o]), channel_wait_ns=float(res.op_begin_ns[o] - start))
                name = f"{code.name} {int(p.op_nbytes[o])} B"
            # Trace timestamps are microseconds.
            events.append({"name": name, "ph": "X", "pid": 1, "tid": a, "ts": start / 1e3,
                           "dur": max(end - start, 0.0) / 1e3, "args": args})
    busy = res.edges[res.edges["bytes"] > 0]
    for _, row in busy.iterrows():
        events.append({"name": f"{row['src']} -> {row['dst']}", "ph": "C", "pid": 2, "ts": 0.0,
                       "args": {"utilization": float(row["utilization"]), "bytes": float(row["bytes"])}})
    events.append({"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "links (whole-run utilisation)"}})
    return events


def write_trace(res: ExactResult, path: str | Path) -> Path:
    """Write :func:`trace_events` of ``res`` as a Perfetto / Chrome trace JSON at ``path`` (its folder made);
    returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": trace_events(res), "displayTimeUnit": "ns"}))
    return path


__all__ = ["trace_events", "write_trace"]
