"""rs_ag: chunked ring reduce-scatter then all-gather (bandwidth optimal).

Its payloads carry chunk tags (bit arithmetic), so it runs one generator per rank (``run_kernels``), not
the traced templates; it is limited to :data:`MAX_RANKS` ranks.
"""

from __future__ import annotations

from kbfast.errors import KbfastError
from kbfast.workloads.install import install, neighbor_fn
from kbfast.workloads.kernels import ScheduleError, Tl
from kbfast.workloads.collectives.algorithm import Algorithm

MAX_RANKS = 1024


def kernel(tl: Tl):
    """Chunked ring reduce-scatter then all-gather.  A payload is ``(contributors << cb) | chunk``: the
    contributor set of one chunk (n bits) tagged with the chunk's index, so a chunk received into the wrong
    slot is caught as well as a contribution counted twice."""
    n, r = tl.n_ranks, tl.rank
    chunk = max(tl.nbytes // n, 1)
    elem = max(tl.n_elem // n, 1)
    cb = n.bit_length()
    have = [(1 << r) << cb | c for c in range(n)]

    def same_chunk(c: int, got: int) -> int:
        if got & ((1 << cb) - 1) != c:
            raise ScheduleError(f"rank {r} receives chunk {got & ((1 << cb) - 1)} into the slot of chunk {c}")
        return got

    yield tl.phase("reduce-scatter")
    for step in range(n - 1):
        send_c, recv_c = (r - step) % n, (r - step - 1) % n
        yield tl.send("E", have[send_c], chunk)
        got = same_chunk(recv_c, (yield tl.recv("W", chunk)))
        have[recv_c] = tl.add(have[recv_c] >> cb, got >> cb) << cb | recv_c
        yield tl.math(elem)
    yield tl.phase("all-gather")
    for step in range(n - 1):
        send_c, recv_c = (r + 1 - step) % n, (r - step) % n
        yield tl.send("E", have[send_c], chunk)
        have[recv_c] = same_chunk(recv_c, (yield tl.recv("W", chunk)))
    out = (1 << n) - 1
    for c in range(n):
        out &= have[c] >> cb        # the ranks present in every chunk
    return out


def check_ranks(n: int) -> None:
    """Refuse more than :data:`MAX_RANKS` ranks: 2(n-1) messages per rank, one generator each."""
    if n > MAX_RANKS:
        raise KbfastError(f"rs_ag sends 2(n-1) chunks per rank, {2 * n * (n - 1):,} messages on {n} ranks; it is "
                          f"limited to {MAX_RANKS} ranks: use ranks=cube_pe0, ring or lrab")


RS_AG = Algorithm(kernel, lambda t, n, info: install(n, neighbor_fn("ring_1d", n)), None, check=check_ranks)
