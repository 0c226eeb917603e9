"""Kernel-style collective generators, run symbolically to emit Program IR.

A kernel is a Python generator per rank, written like the original ``tl.*``
kernels (spec_ccl §5.0)::

    def kernel(tl):
        acc = tl.contribution()
        r = yield tl.recv("W")
        acc = tl.add(acc, r)          # PE_MATH over the tile
        yield tl.math()
        yield tl.send("E", acc)
        return acc

:func:`run_kernels` steps every rank's generator, blocking a rank on a recv
whose channel is still empty, and appends each yielded op to the rank's agent
in program order.  Every payload carries the set of contributing ranks (a
bitset); ``tl.add`` refuses to count a rank twice and, at the end, every rank
must hold every contribution exactly once — a broken schedule is caught before
anyone trusts its timing (the symbolic correctness check).

``tl.load()`` and ``tl.store()`` are the kernel's tile DMA: a blocking read of the tile from the
rank's own HBM slice (``hbm_ctrl.pe{X}`` of its PE and cube, address 0) into the PE, and the write
of the result back.  :func:`with_tile_io` wraps a kernel in them, as every reference kernel begins
with ``acc = load(pe_addr)`` and ends with ``store(pe_addr, acc)``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

from kbfast.errors import KbfastError
from kbfast.ir import ProgramBuilder
from kbfast.topology.names import own_hbm_ctrls
from kbfast.workloads.install import Install

TILE_LOAD = "tile load"      # the phases of with_tile_io's load and store
TILE_STORE = "tile store"


class ScheduleError(KbfastError):
    """The collective's schedule is wrong: it double counts, misses a contribution, or deadlocks."""


@dataclass(frozen=True)
class Request:
    """One op a kernel yields: its kind, a direction (or phase name, or MATH op), the payload (a contributor
    set, or a GEMM command number), the bytes (or MATH elements) and a COMPUTE time in ns."""

    kind: str                 # "send", "recv", "math", "compute", "phase", "load", "store", "gemm", "prefetch"
    direction: str = ""
    payload: int = 0
    nbytes: int = 0
    value: float = 0.0


@dataclass
class Tl:
    """What a kernel sees: its rank, the tile size, and the op constructors."""

    rank: int
    n_ranks: int
    nbytes: int
    n_elem: int
    info: dict = field(default_factory=dict)
    tagged: bool = True       # payloads are plain ints a kernel may tag (False when traced: opaque values)

    def contribution(self) -> int:
        """This rank's own contribution: the set of one contributor, itself."""
        return 1 << self.rank

    def add(self, acc: int, other: int) -> int:
        """acc + other over sets of contributors; a contributor counted twice is a schedule error."""
        if acc & other:
            dup = [r for r in range(self.n_ranks) if (acc & other) >> r & 1]
            raise ScheduleError(f"rank {self.rank} adds contributions of ranks {dup[:8]} twice")
        return acc | other

    def same(self, value: int, other: int) -> int:
        """Check that ``value`` and ``other`` hold the same contributors (two pieces of one reduced buffer) and
        return ``value``; a difference is a schedule error (traced: checked when the template runs)."""
        if value != other:
            diff = [r for r in range(self.n_ranks) if (value ^ other) >> r & 1]
            raise ScheduleError(f"rank {self.rank} holds pieces of one buffer whose contributors differ in ranks "
                                f"{diff[:8]}")
        return value

    def send(self, direction: str, payload: int, nbytes: int | None = None) -> Request:
        """IPCQ send of ``payload`` on ``direction``, ``nbytes`` (default: the tile)."""
        return Request("send", direction, payload, self.nbytes if nbytes is None else nbytes)

    def recv(self, direction: str, nbytes: int | None = None) -> Request:
        """IPCQ recv on ``direction``, ``nbytes`` (default: the tile); the kernel gets the payload back."""
        return Request("recv", direction, nbytes=self.nbytes if nbytes is None else nbytes)

    def math(self, n_elem: int | None = None, op: str = "add") -> Request:
        """PE_MATH ``op`` over ``n_elem`` elements (default: the tile's), priced by kbfast.ir.tiling.math_ns."""
        return Request("math", direction=op, nbytes=self.n_elem if n_elem is None else n_elem)

    def gemm(self, command: int) -> Request:
        """GEMM command number ``command`` of the workload's command table (the lowering's; see
        kbfast.workloads.symbolic.run_traced)."""
        return Request("gemm", payload=command)

    def prefetch(self, command: int, most: int | None = None) -> Request:
        """Start streaming GEMM command ``command``'s first tiles into TCM, as many as TCM holds and at most
        ``most``; its next ``tl.gemm(command)`` finds them there (none after it: the next step's, which the
        kernel's first GEMM of that command finds, and the kernel's end waits for; kbfast.workloads.commands)."""
        return Request("prefetch", payload=command, value=float("inf") if most is None else float(most))

    def compute(self, ns: float) -> Request:
        """COMPUTE for ``ns`` nanoseconds."""
        return Request("compute", value=ns)

    def phase(self, name: str) -> Request:
        """Tag the ops that follow with phase ``name``."""
        return Request("phase", direction=name)

    def load(self, nbytes: int | None = None) -> Request:
        """Blocking DMA read of the tile from the rank's own HBM slice (address 0) into the PE."""
        return Request("load", nbytes=self.nbytes if nbytes is None else nbytes)

    def store(self, nbytes: int | None = None) -> Request:
        """Blocking DMA write of the tile from the PE to the rank's own HBM slice (address 0)."""
        return Request("store", nbytes=self.nbytes if nbytes is None else nbytes)


Kernel = Callable[[Tl], Generator[Request, int, int]]


def pinned_gemm(tl: Tl, pinned: tuple[bool, ...], command: int, a_bytes: int):
    """GEMM command ``command``, its A operand (``a_bytes``) loaded into TCM first when the command pins it
    (``pinned[command]``); a command that streams A reads it tile by tile from the PE's slice."""
    if pinned[command]:
        yield tl.load(a_bytes)
    yield tl.gemm(command)


def activation(tl: Tl, n_elem: int, kind: str):
    """An FFN's activation over ``n_elem`` elements: SiLU and the gate product (``swiglu``), or GELU."""
    for op in ("exp", "mul", "mul") if kind == "swiglu" else ("exp", "mul"):
        yield tl.math(n_elem, op)


def with_tile_io(kernel: Kernel) -> Kernel:
    """``kernel`` between a tile load and a tile store, each in its own phase (``tile load``, ``tile store``):
    the reference kernels' ``acc = load(pe_addr)`` ... ``store(pe_addr, acc)``."""

    def tiled(tl: Tl):
        yield tl.phase(TILE_LOAD)
        yield tl.load()
        acc = yield from kernel(tl)
        yield tl.phase(TILE_STORE)
        yield tl.store()
        return acc

    tiled.__name__ = tiled.__qualname__ = f"{getattr(kernel, '__name__', 'kernel')}_with_tile_io"
    return tiled


def run_kernels(b: ProgramBuilder, agents: Sequence[int], inst: Install, kernel: Kernel, nbytes: int,
                expect: Callable[[int], int] | None = None, info: dict | None = None) -> list[int]:
    """Run ``kernel`` on every rank (rank i = agent ``agents[i]``); emit ops; check the payloads.

    ``expect(rank)`` is the contributor set rank must end with (default: all ranks).
    Returns the final payload of every rank.
    """
    n = len(agents)
    elem = b.t.spec.pe.elem_bytes
    tls = [Tl(rank=r, n_ranks=n, nbytes=nbytes, n_elem=max(nbytes // elem, 1), info=info or {}) for r in range(n)]
    gens = [kernel(tl) for tl in tls]
    for a in agents:
        b.start(a)
    slices: list[int] = []       # each rank's own HBM controller, looked up at the first tile DMA

    def own_slice(r: int) -> int:
        if not slices:
            slices.extend(own_hbm_ctrls(b.t, b.agent_nodes(agents)).tolist())
        return slices[r]

    queues: dict[tuple[int, str], deque[int]] = {}
    channels: dict[tuple[int, str], int] = {}
    pending: list[Request | None] = [None] * n
    value: list[int | None] = [None] * n
    done: list[int | None] = [None] * n
    live = deque(range(n))

    def channel(sender: int, d: str) -> int:
        key = (sender, d)
        if key not in channels:
            channels[key] = b.channel(agents[sender], agents[inst.peer(sender, d)])
        return channels[key]

    blocked_since = 0
    while live:
        r = live.popleft()
        req = pending[r]
        while True:
            if req is None:
                try:
                    req = gens[r].send(value[r]) if value[r] is not None else next(gens[r])
                except StopIteration as stop:
                    done[r] = stop.value if stop.value is not None else 0
                    req = None
                    break
                value[r] = None
            if req.kind == "recv":
                sender, sdir = inst.inbound(r, req.direction)
                q = queues.get((sender, sdir))
                if not q:
                    break  # blocked: try other ranks
                value[r] = q.popleft()
                b.recv(agents[r], channel(sender, sdir), req.nbytes)
            elif req.kind == "send":
                inst.peer(r, req.direction)
                queues.setdefault((r, req.direction), deque()).append(req.payload)
                b.send(agents[r], channel(r, req.direction), req.nbytes)
                value[r] = 0
            else:
                _emit_local(b, agents[r], req, own_slice, r)
                value[r] = 0
            req = None
            blocked_since = 0
        pending[r] = req
        if done[r] is None:
            live.append(r)
            blocked_since += 1
            if blocked_since > len(live):
                waits = [f"rank {i} on recv {pending[i].direction!r}" for i in live if pending[i] is not None]
                raise ScheduleError("the collective deadlocks (every remaining rank waits on an empty channel): "
                                    + "; ".join(waits[:8]))
    _check_contributions(done, expect)
    return [int(x) for x in done]


def _emit_local(b: ProgramBuilder, agent: int, req: Request, own_slice: Callable[[int], int], r: int) -> None:
    """Append a request that involves no peer (MATH, COMPUTE, the tile DMA, a phase tag) to ``agent``;
    ``own_slice(r)`` is rank ``r``'s HBM controller."""
    if req.kind == "math":
        b.math(agent, req.nbytes, req.direction or "add")
    elif req.kind == "compute":
        b.compute(agent, req.value)
    elif req.kind in ("load", "store"):
        b.dma(agent, own_slice(r), req.nbytes, write=req.kind == "store")
    elif req.kind == "phase":
        b.phase(agent, req.direction)
    else:       # a GEMM command needs the traced path's lowering (kbfast.workloads.symbolic.run_traced)
        raise ScheduleError(f"run_kernels cannot emit a {req.kind!r} request; use run_traced")


def _check_contributions(done: list, expect: Callable[[int], int] | None) -> None:
    """Every rank ends with the contributor set ``expect(rank)`` (default: every rank), else ScheduleError."""
    n = len(done)
    full = (1 << n) - 1
    for r, got in enumerate(done):
        want = expect(r) if expect else full
        if got != want:
            missing = [i for i in range(n) if (want & ~got) >> i & 1]
            raise ScheduleError(f"rank {r} ends without the contributions of ranks {missing[:8]}"
                                + (f" (and {len(missing) - 8} more)" if len(missing) > 8 else ""))
