"""The ops of a GEMM command's tile pipeline (spec_pe §5.5): five helper agents of the PE (reader, fetcher,
compute, storer, writer) chained through WAITs on each other's ops.  :meth:`ProgramBuilder.gemm
<kbfast.ir.builder.ProgramBuilder.gemm>` appends them; the fast evaluator's GEMM plans count them."""

from __future__ import annotations

import numpy as np

from kbfast.ir.program import WAIT_ALL, Op
from kbfast.ir.tiling import GemmPlan


def gemm_ops_count(plan: GemmPlan, preloaded: int = 0, ready: bool = False) -> int:
    """How many ops :func:`gemm_ops` returns for ``plan`` (its five helper agents' together), the first
    ``preloaded`` tiles' operands already in TCM (``ready``: their FETCHes wait for the prefetch's reads)."""
    T, D, r, P = plan.n_tile_total, plan.depth, (not plan.a_pinned) + (not plan.b_pinned), preloaded
    n_o = sum(e.scope == "output_tile" for e in plan.epilogues)
    ci = 2 + sum(e.scope == "k_tile" for e in plan.epilogues)
    reader = (1 + (T - P) * r + max(T - P - D, 0)) if r else 0
    waits = (T - P + (P if ready else 0)) if r else 0
    return reader + 1 + T + waits + T * ci + plan.n_out * (n_o + 4)


def prefetch_ops_count(plan: GemmPlan, tiles: int, settle: bool) -> int:
    """How many ops :func:`prefetch_ops` returns."""
    return 1 + tiles * ((not plan.a_pinned) + (not plan.b_pinned)) + settle


def _tile_reads(plan: GemmPlan, a: tuple[int, int], b: tuple[int, int], t: np.ndarray) -> list:
    """The streamed operands' reads of tiles ``t``: per operand ((node, base address), tile bytes, addresses)."""
    m, rem = np.divmod(t, plan.n_tiles * plan.k_tiles)
    n, k = np.divmod(rem, plan.k_tiles)
    reads = [(a, plan.a_tile_bytes, plan.a_addr(a[1], m, k))] if not plan.a_pinned else []
    return reads + ([(b, plan.b_tile_bytes, plan.b_addr(b[1], k, n))] if not plan.b_pinned else [])


def prefetch_ops(plan: GemmPlan, marker: int, a: tuple[int, int], b: tuple[int, int], tiles: int,
                 settle: bool) -> list[np.ndarray]:
    """The reader's ops that prefetch a GEMM's first ``tiles`` tiles into TCM (the decisions table's overlap
    row, docs/models.md "Overlap"): WAIT ``marker``, then the tiles' asynchronous reads of their streamed
    operands in tile order, as the GEMM itself would read them; with ``settle`` a WAIT for all of them last
    (a prefetch the kernel waits for).  The GEMM then runs with ``preloaded=tiles`` (:func:`gemm_ops`)."""
    reads = _tile_reads(plan, a, b, np.arange(tiles, dtype=np.int64))
    cols = _reader_ops(marker, reads, np.zeros(tiles, bool), np.zeros(tiles, np.int64))
    if settle:
        cols = [np.append(c, x) for c, x in zip(cols, (int(Op.WAIT), WAIT_ALL, 0, 0.0, 0, False))]
    return cols


def gemm_ops(plan: GemmPlan, marker: int, a: tuple[int, int], b: tuple[int, int], c: tuple[int, int],
             first: int | None = None, preloaded: int = 0, ready: np.ndarray | None = None) -> list:
    """The ops of the five helper agents of a GEMM (reader, fetcher, compute, storer, writer), to be appended
    in that order from op id ``first`` (default: right after ``marker``): per agent the columns (code,
    target, nbytes, arg, addr, async); :func:`gemm_ops_count` says how many.

    Op ids are known in advance, so every WAIT names its op.  Reader: WAIT marker, then per tile t
    (WAIT FETCH(t - D) from t = D) and its asynchronous reads (A, B, unless pinned).  Fetcher: WAIT marker,
    per tile (WAIT its last read) and FETCH.  Compute: per tile WAIT FETCH, GEMM, the k_tile epilogues and on
    the last k the output_tile epilogues.  Storer: per output tile WAIT its last compute op, STORE.  Writer:
    per output tile WAIT STORE, DMA_WRITE C.

    The first ``preloaded`` tiles were prefetched (:func:`prefetch_ops`): the reader skips them and the depth
    gate counts from the first tile it reads (tile t >= preloaded + D waits for FETCH(t - D)); their FETCHes
    wait for ``ready`` (per tile, the prefetch's last read of it), or for nothing when it is None (in TCM
    before the command starts).
    """
    T, nk, D, P = plan.n_tile_total, plan.k_tiles, plan.depth, preloaded
    assert 0 <= P <= T and (ready is None or len(ready) == P)
    t = np.arange(T, dtype=np.int64)
    k = t % nk
    reads = _tile_reads(plan, a, b, t[P:])
    r = len(reads)
    k_eps = [e for e in plan.epilogues if e.scope == "k_tile"]
    o_eps = [e for e in plan.epilogues if e.scope == "output_tile"]
    last = np.flatnonzero(k == nk - 1)
    # op id layout (see the docstring), from the reader's first op
    R0 = marker + 1 if first is None else first
    tr = t[P:] - P                                     # position among the tiles read
    gated = tr >= D                                    # tiles whose reads wait for FETCH(t - D)
    r_pos = 1 + tr * r + np.maximum(tr - D, 0)         # per tile read: its first reader op after the marker's WAIT
    size_r = (1 + (T - P) * r + max(T - P - D, 0)) if r else 0
    F0 = R0 + size_r
    waits = np.zeros(T, np.int64)                      # per tile: the op its FETCH waits for (-1: none)
    waits[:P] = ready if (ready is not None and r) else -1
    waits[P:] = R0 + r_pos + gated + r - 1 if r else -1
    f_end = np.cumsum(1 + (waits >= 0))                # fetcher ops up to each tile's FETCH, after the WAIT marker
    fetch_id = F0 + f_end
    C0 = F0 + 1 + int(f_end[-1])
    ci, n_o = 2 + len(k_eps), len(o_eps)
    c_pos = t * ci + (t // nk) * n_o
    S0 = C0 + T * ci + plan.n_out * n_o
    out = [_reader_ops(marker, reads, gated, fetch_id[np.maximum(t[P:] - D, 0)]),
           _fetcher_ops(plan, marker, waits),
           _compute_ops(plan, k_eps, o_eps, c_pos, fetch_id, last)]
    out += _store_write_ops(plan, C0 + c_pos[last] + ci + n_o - 1, S0, c)
    assert S0 + 4 * plan.n_out == R0 + sum(len(x[0]) for x in out) == \
        R0 + gemm_ops_count(plan, P, ready is not None)
    return out


def _cols(code, target, nbytes=0, arg=0.0, addr=0, is_async=False) -> list[np.ndarray]:
    """One agent's op columns (code, target, nbytes, arg, addr, async), each scalar broadcast to len(code)."""
    return [np.broadcast_to(np.asarray(x), len(code)).copy() for x in (code, target, nbytes, arg, addr, is_async)]


def _reader_ops(marker: int, reads: list, gated: np.ndarray, fetch_wait: np.ndarray) -> list[np.ndarray]:
    """Reader: WAIT ``marker``, then per tile (WAIT ``fetch_wait`` where ``gated``) and its asynchronous reads
    (``reads``: per operand ((node, base address), tile bytes, per-tile addresses)); no ops when nothing is read."""
    r, T = len(reads), len(gated)
    if not r:
        return _cols(np.zeros(0, np.int8), -1)
    per = np.full((T, 1 + r), -1, np.int64)      # per tile: [WAIT or -1, read...]
    code = np.full((T, 1 + r), int(Op.DMA_READ), np.int8)
    code[:, 0] = int(Op.WAIT)
    per[:, 0] = np.where(gated, fetch_wait, -1)
    nbytes = np.zeros((T, 1 + r), np.int64)
    addr = np.zeros((T, 1 + r), np.int64)
    for j, ((node, _), nb, ad) in enumerate(reads):
        per[:, 1 + j] = node
        nbytes[:, 1 + j] = nb
        addr[:, 1 + j] = ad
    keep = np.ones((T, 1 + r), bool)
    keep[:, 0] = gated
    code, target, nbytes, addr = (np.concatenate([[x0], x[keep]]) for x0, x in
                                  ((int(Op.WAIT), code), (marker, per), (0, nbytes), (0, addr)))
    return _cols(code, target, nbytes, 0.0, addr, code == int(Op.DMA_READ))


def _fetcher_ops(plan: GemmPlan, marker: int, waits: np.ndarray) -> list[np.ndarray]:
    """Fetcher: WAIT ``marker``, then per tile (WAIT ``waits[t]``, the tile's last read, unless -1) and FETCH."""
    T = len(waits)
    has = waits >= 0
    code = np.full((T, 2), int(Op.FETCH), np.int8)
    code[:, 0] = int(Op.WAIT)
    target = np.stack([waits, np.full(T, -1)], 1)
    arg = np.tile([0.0, plan.fetch_ns], (T, 1))
    nbytes = np.tile([0, plan.a_tile_bytes + plan.b_tile_bytes], (T, 1))
    keep = np.ones((T, 2), bool)
    keep[:, 0] = has
    return _cols(np.concatenate([[int(Op.WAIT)], code[keep]]), np.concatenate([[marker], target[keep]]),
                 np.concatenate([[0], nbytes[keep]]), np.concatenate([[0.0], arg[keep]]))


def _compute_ops(plan: GemmPlan, k_eps: list, o_eps: list, c_pos: np.ndarray, fetch_id: np.ndarray,
                 last: np.ndarray) -> list[np.ndarray]:
    """Compute: per tile (from its position ``c_pos``) WAIT its FETCH ``fetch_id``, GEMM, the k_tile epilogues
    ``k_eps``; the tiles of the last k (``last``) add the output_tile epilogues ``o_eps``."""
    T, ci, n_o = plan.n_tile_total, 2 + len(k_eps), len(o_eps)
    elems = plan.out_elems
    inner = [(int(Op.GEMM), plan.tile_macs, plan.gemm_ns)] + [(int(Op.MATH), elems, e.ns) for e in k_eps]
    tail = [(int(Op.MATH), elems, e.ns) for e in o_eps]
    size = T * ci + plan.n_out * n_o
    code = np.empty(size, np.int8)
    target = np.full(size, -1, np.int64)
    nbytes = np.zeros(size, np.int64)
    arg = np.zeros(size)
    base = c_pos
    code[base] = int(Op.WAIT)
    target[base] = fetch_id
    for j, (cd, nb, ns) in enumerate(inner):
        code[base + 1 + j], nbytes[base + 1 + j], arg[base + 1 + j] = cd, nb, ns
    for j, (cd, nb, ns) in enumerate(tail):
        code[base[last] + ci + j], nbytes[base[last] + ci + j], arg[base[last] + ci + j] = cd, nb, ns
    return _cols(code, target, nbytes, arg)


def _store_write_ops(plan: GemmPlan, comp_last: np.ndarray, S0: int, c: tuple[int, int]) -> list[list[np.ndarray]]:
    """Storer and writer, per output tile: WAIT its last compute op ``comp_last``, STORE (op ids from ``S0``);
    WAIT that STORE, DMA_WRITE the tile of C (``c``: (HBM controller node, base address))."""
    n_out = plan.n_out
    j = np.arange(n_out)
    store_id = S0 + 2 * j + 1
    storer = _cols(np.tile(np.array([int(Op.WAIT), int(Op.STORE)], np.int8), n_out),
                   np.stack([comp_last, np.full(n_out, -1)], 1).ravel(),
                   np.tile([0, plan.c_tile_bytes], n_out), np.tile([0.0, plan.store_ns], n_out))
    mo, no = np.divmod(j, plan.n_tiles)
    writer = _cols(np.tile(np.array([int(Op.WAIT), int(Op.DMA_WRITE)], np.int8), n_out),
                   np.stack([store_id, np.full(n_out, c[0])], 1).ravel(),
                   np.tile([0, plan.c_tile_bytes], n_out), 0.0,
                   np.stack([np.zeros(n_out, np.int64), plan.c_addr(c[1], mo, no)], 1).ravel())
    return [storer, writer]
