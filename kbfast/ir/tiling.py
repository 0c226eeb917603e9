"""The tiling plan of a GEMM command: a pure function from the command to its tiles and stages.

spec_pe §5.1–§5.2 and the decisions table ("GEMM tile and loop order", "PE tile pipeline"): an
``M x N x K`` GEMM runs as ``max(1, ceil(M/tm)) * max(1, ceil(N/tn)) * max(1, ceil(K/tk))`` hardware
tiles of ``tm x tk x tn`` (32 x 64 x 32), in M -> N -> K order with K innermost.  Per tile (m, n, k)::

    DMA_READ A (unless A is pinned in TCM), DMA_READ B (unless pinned)
    FETCH  (TCM read channel: the A and B tiles, (tm*tk + tk*tn) * elem bytes)
    GEMM   (compute slot: tm*tk*tn / gemm_macs_per_ns)
    MATH   for each k_tile epilogue                      (compute slot)
    on the last k only: MATH for each output_tile epilogue, STORE (TCM write channel: the C tile,
    tm*tn * elem bytes), DMA_WRITE C

The accumulator stays in the register file across K: no STORE or DMA_WRITE on other k.  Operands sit in
HBM as whole tiles (tile-major, padded to the tile grid), so every tile moves whole operand tiles and a
GEMM smaller than a tile in some dimension still costs a whole tile (``under_tile``).  Tile ``(m, k)`` of
A is at ``a_addr + (m * k_tiles + k) * a_tile_bytes``, tile ``(k, n)`` of B at
``b_addr + (k * n_tiles + n) * b_tile_bytes``, tile ``(m, n)`` of C at ``c_addr + (m * n_tiles + n) *
c_tile_bytes``.  Both evaluators time the same plan: the Program builder lowers it to ops
(:meth:`kbfast.ir.ProgramBuilder.gemm`), the fast path feeds its stage times to the max-plus recurrence.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbfast.errors import KbfastError, did_you_mean, not_one_of

SCOPES = ("k_tile", "output_tile")
MAX_DIM = 1 << 24          # a GEMM dimension a user gives (m, n or k): 16Mi
MAX_TILES = 1 << 32        # hardware tiles of one GEMM: the fast path's tile indices and times stay exact


@dataclass(frozen=True)
class Epilogue:
    """A MATH op fused after the GEMM of a tile (spec_pe §5.4): ``op`` names it, ``scope`` says when it runs
    (every k tile, or the last k of an output tile only), ``ns`` is its cost on the compute slot."""

    op: str
    scope: str
    ns: float


@dataclass(frozen=True)
class GemmPlan:
    """Tiles and per-stage service times of one GEMM command (see the module docstring)."""

    m: int
    n: int
    k: int
    m_tiles: int
    n_tiles: int
    k_tiles: int
    a_pinned: bool
    b_pinned: bool
    a_tile_bytes: int
    b_tile_bytes: int
    c_tile_bytes: int
    fetch_ns: float              # TCM read of the A and B tiles
    gemm_ns: float               # one hardware tile on the compute slot
    store_ns: float              # TCM write of the C tile
    k_epilogue_ns: float         # every k tile: the k_tile epilogues
    out_epilogue_ns: float       # the last k tile: the output_tile epilogues
    macs: int                    # the GEMM's useful MACs, M * N * K
    tile_macs: int               # MACs of one hardware tile
    out_elems: int               # elements of a C tile (an epilogue's MATH works on them)
    depth: int                   # pe.tile_buffers
    under_tile: bool             # some dimension is smaller than the tile: the MAC array runs part empty
    epilogues: tuple[Epilogue, ...] = ()

    @property
    def n_tile_total(self) -> int:
        """Hardware tiles of the GEMM: m_tiles x n_tiles x k_tiles."""
        return self.m_tiles * self.n_tiles * self.k_tiles

    @property
    def n_out(self) -> int:
        """Output tiles (each ends with STORE and DMA_WRITE)."""
        return self.m_tiles * self.n_tiles

    @property
    def comp_inner_ns(self) -> float:
        """Compute slot per tile with k < k_tiles - 1: GEMM and the k_tile epilogues."""
        return self.gemm_ns + self.k_epilogue_ns

    @property
    def comp_last_ns(self) -> float:
        """Compute slot on the last k: GEMM, k_tile and output_tile epilogues."""
        return self.gemm_ns + self.k_epilogue_ns + self.out_epilogue_ns

    def a_addr(self, base: int, m: int, k: int) -> int:
        """HBM address of A's tile (``m``, ``k``), A laid out tile-major from ``base``."""
        return base + (m * self.k_tiles + k) * self.a_tile_bytes

    def b_addr(self, base: int, k: int, n: int) -> int:
        """HBM address of B's tile (``k``, ``n``), B laid out tile-major from ``base``."""
        return base + (k * self.n_tiles + n) * self.b_tile_bytes

    def c_addr(self, base: int, m: int, n: int) -> int:
        """HBM address of C's tile (``m``, ``n``), C laid out tile-major from ``base``."""
        return base + (m * self.n_tiles + n) * self.c_tile_bytes

    def tcm_bytes(self) -> tuple[int, int]:
        """What the command keeps in PE_TCM: (the pinned operands whole, the tile buffers: ``depth`` streamed
        A and B tiles in flight and the C tile being stored)."""
        a, b, _ = self.operand_bytes()
        pinned = (a if self.a_pinned else 0) + (b if self.b_pinned else 0)
        streamed = (0 if self.a_pinned else self.a_tile_bytes) + (0 if self.b_pinned else self.b_tile_bytes)
        return pinned, self.depth * streamed + self.c_tile_bytes

    def operand_bytes(self) -> tuple[int, int, int]:
        """HBM footprint of A, B, C in whole tiles."""
        return (self.m_tiles * self.k_tiles * self.a_tile_bytes, self.k_tiles * self.n_tiles * self.b_tile_bytes,
                self.m_tiles * self.n_tiles * self.c_tile_bytes)


def math_ns(pe, n_elem: int, op: str = "add") -> float:
    """PE_MATH over ``n_elem`` elements: ``max(math_overhead_ns, n_elem * ns_per_elem(op))`` (decisions table,
    "MATH cost"); ``add`` costs ``math_ns_per_elem``, every other op its ``math_ops`` entry."""
    if op == "add":
        per = pe.math_ns_per_elem
    elif op in pe.math_ops:
        per = pe.math_ops[op]
    else:
        raise KbfastError(f"unknown PE_MATH op {op!r}: {did_you_mean(op, ['add', *pe.math_ops])} "
                          f"(pe.math_ops names the others)")
    return max(pe.math_overhead_ns, n_elem * per)


def epilogue(pe, op: str, scope: str = "output_tile") -> Epilogue:
    """An epilogue ``op`` over one output tile of the hardware tile (``tile.m * tile.n`` elements), priced by
    :func:`math_ns`; ``scope`` defaults to ``output_tile`` (spec_pe §5.4)."""
    return Epilogue(op, scope, math_ns(pe, pe.tile.m * pe.tile.n, op))


def plan_gemm(pe, m: int, n: int, k: int, *, a_pinned: bool = False, b_pinned: bool = False,
              epilogues: tuple[Epilogue, ...] = ()) -> GemmPlan:
    """The plan of an ``m x n x k`` GEMM on a PE configured by ``pe`` (the ``pe`` section of a topology)."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise KbfastError(f"GEMM {name} must be a positive integer (got {v!r})")
    for e in epilogues:
        if e.scope not in SCOPES:
            raise not_one_of(f"epilogue {e.op!r}: scope", e.scope, SCOPES)
        if not e.ns >= 0.0:
            raise KbfastError(f"epilogue {e.op!r}: cost must be >= 0 ns (got {e.ns})")
    t, eb = pe.tile, pe.elem_bytes
    a_tile, b_tile, c_tile = t.m * t.k * eb, t.k * t.n * eb, t.m * t.n * eb
    tile_macs = t.m * t.k * t.n
    m_tiles, n_tiles, k_tiles = max(1, -(-m // t.m)), max(1, -(-n // t.n)), max(1, -(-k // t.k))
    if m_tiles * n_tiles * k_tiles > MAX_TILES:
        raise KbfastError(f"the {m:,} x {n:,} x {k:,} GEMM (m x n x k) has {m_tiles * n_tiles * k_tiles:,} tiles of "
                          f"{t.m} x {t.k} x {t.n}, more than the limit of {MAX_TILES:,} (2^32); use smaller m, n or k")
    return GemmPlan(
        m=m, n=n, k=k, m_tiles=m_tiles, n_tiles=n_tiles,
        k_tiles=k_tiles, a_pinned=bool(a_pinned), b_pinned=bool(b_pinned),
        a_tile_bytes=a_tile, b_tile_bytes=b_tile, c_tile_bytes=c_tile,
        fetch_ns=(a_tile + b_tile) / pe.tcm_read_gbs, gemm_ns=tile_macs / pe.gemm_macs_per_ns,
        store_ns=c_tile / pe.tcm_write_gbs,
        k_epilogue_ns=sum(e.ns for e in epilogues if e.scope == "k_tile"),
        out_epilogue_ns=sum(e.ns for e in epilogues if e.scope == "output_tile"),
        macs=m * n * k, tile_macs=tile_macs, out_elems=t.m * t.n, depth=pe.tile_buffers, under_tile=m < t.m or n < t.n or k < t.k,
        epilogues=tuple(epilogues))
