"""The roofline of a model step: the floors no schedule can go below, beside what kbfast measured
(docs/models.md "Roofline").

Per piece, from its Program with every GEMM command as one op (kbfast.workloads.commands.TimedLowering), and
per working PE (every operand of the model lives in the PE's own HBM slice):

* **HBM floor**: the bytes the PE must read and write once each: its DMA reads and writes (tile loads and
  stores, the KV blocks), and per GEMM command each operand it streams (B: ``k n``, A unless pinned in TCM:
  ``m k``) and its output (``m n``), at the PE's element size.  Reads and writes share the controller's
  pseudo-channels (``pcs_per_pe x pc_bw``), and each direction has its own path between PE and controller
  (the slower of ``pe_to_router`` and ``router_hbm``): ``max((r + w) / controller, r / path, w / path)``.
* **compute floor**: the hardware tiles of the PE's GEMM commands, each ``tile_macs`` MACs at
  ``pe.gemm_macs_per_ns`` (the compute slot runs one at a time); ``useful_compute_ns`` counts the useful
  MACs ``m n k`` instead, the floor a perfect tile shape would reach.
* **collective floor**: the bytes of every IPCQ send on each link of its route, over the link's bandwidth:
  the busiest link's.

A piece's floor of each kind is the largest over its PEs (or links); the step's is the sum over its pieces,
times how often the step runs each, as the step's latency is.  Each floor is a lower bound of the step's
latency: every byte it counts crosses that resource, which serves it at its bandwidth at best.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbfast.ir import Op, Program
from kbfast.sim.lowering import data_routes
from kbfast.measure.bottleneck import busy_ns
from kbfast.topology.builder import Tables
from kbfast.workloads.commands import GemmCommand

FLOORS = ("hbm", "compute", "collective")     # the roofline's kinds, in the order a report shows them


@dataclass(frozen=True)
class Floors:
    """One piece's (or step's) floors, ns: HBM, compute (whole tiles), collective; and the useful-MAC compute
    floor, with the bytes and MACs behind them."""

    hbm_ns: float
    compute_ns: float
    collective_ns: float
    useful_compute_ns: float
    hbm_bytes: float            # of the PE that sets the HBM floor
    collective_bytes: float     # on the link that sets the collective floor

    def __add__(self, other: Floors) -> Floors:
        return Floors(*(a + b for a, b in zip(self._values(), other._values())))

    def __mul__(self, k: int) -> Floors:
        return Floors(*(a * k for a in self._values()))

    def _values(self) -> tuple[float, ...]:
        return (self.hbm_ns, self.compute_ns, self.collective_ns, self.useful_compute_ns, self.hbm_bytes,
                self.collective_bytes)

    def bound(self) -> tuple[str, float]:
        """The roofline: (its kind, the largest floor)."""
        return max(((k, getattr(self, f"{k}_ns")) for k in FLOORS), key=lambda kv: kv[1])


ZERO = Floors(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _command_bytes(c: GemmCommand, elem: int) -> tuple[int, int]:
    """(bytes read, bytes written) of one GEMM command: each operand it streams once, its output once."""
    plan = c.plan
    read = (0 if plan.b_pinned else plan.k * plan.n) + (0 if plan.a_pinned else plan.m * plan.k)
    return read * elem, plan.m * plan.n * elem


def piece_floors(t: Tables, p: Program, commands: list[GemmCommand], command_op: np.ndarray,
                 command_id: np.ndarray) -> Floors:
    """The floors of one piece from its Program ``p``, whose op ``command_op[i]`` stands for GEMM command
    ``commands[command_id[i]]`` (module docstring)."""
    spec = t.spec
    elem = spec.pe.elem_bytes
    n = p.n_agents
    agent = p.op_agent
    code = p.op_code
    reads = np.bincount(agent[code == Op.DMA_READ], p.op_nbytes[code == Op.DMA_READ], n).astype(np.float64)
    writes = np.bincount(agent[code == Op.DMA_WRITE], p.op_nbytes[code == Op.DMA_WRITE], n).astype(np.float64)
    rate = spec.pe.gemm_macs_per_ns
    per = np.array([(*_command_bytes(c, elem), c.plan.n_tile_total * c.plan.tile_macs / rate, c.plan.macs / rate)
                    for c in commands]).reshape(-1, 4)
    ops, cid = np.asarray(command_op, np.int64), np.asarray(command_id, np.int64)
    tiles_ns, useful_ns = np.zeros(n), np.zeros(n)
    for acc, col in ((reads, 0), (writes, 1), (tiles_ns, 2), (useful_ns, 3)):
        np.add.at(acc, agent[ops], per[cid, col])
    path = min(spec.link.pe_to_router.bw_gbs, spec.link.router_hbm.bw_gbs)
    ctrl = spec.hbm.pcs_per_pe * spec.pc_bw_gbs
    hbm = np.maximum((reads + writes) / ctrl, np.maximum(reads, writes) / path)
    worst = int(np.argmax(hbm)) if n else 0
    sends = np.flatnonzero((code == Op.SEND) & (p.op_nbytes > 0))
    coll_ns = coll_bytes = 0.0
    if len(sends):
        route = data_routes(p)[sends]
        lo, length = p.route_ptr[route], p.route_ptr[route + 1] - p.route_ptr[route]
        first = np.repeat(lo - (np.cumsum(length) - length), length)      # each send's edges, in one gather
        edges = p.route_edges[first + np.arange(int(length.sum()))].astype(np.int64)
        load = np.bincount(edges, np.repeat(p.op_nbytes[sends], length).astype(np.float64))
        used = np.flatnonzero(load)           # every send carries bytes: the edges they use, ascending
        load = load[used]
        busy = busy_ns(t, used, load)
        k = int(np.argmax(busy))
        coll_ns, coll_bytes = float(busy[k]), float(load[k])
    return Floors(float(hbm.max(initial=0.0)), float(tiles_ns.max(initial=0.0)), coll_ns,
                  float(useful_ns.max(initial=0.0)), float(reads[worst] + writes[worst]) if n else 0.0, coll_bytes)


def roofline_row(floors: Floors, latency_ns: float) -> dict:
    """The roofline as a report shows it: each floor (ns), the useful-MAC compute floor, the bound's kind and
    value, and the step's latency over it."""
    kind, bound = floors.bound()
    return {"hbm_floor_ns": floors.hbm_ns, "compute_floor_ns": floors.compute_ns,
            "useful_compute_floor_ns": floors.useful_compute_ns, "collective_floor_ns": floors.collective_ns,
            "hbm_bytes": floors.hbm_bytes, "collective_bytes": floors.collective_bytes, "bound": kind,
            "bound_ns": bound, "ratio": latency_ns / bound if bound > 0 else float("nan")}
