"""direct: the all-to-all as direct sends: every rank sends chunk ``d`` of its buffer (``size / n`` bytes) to
rank ``d`` over a channel of its own, all at once, then receives the n - 1 chunks meant for it.

The IPCQ install gives each rank one direction per other rank (``o1`` .. ``o{n-1}``: the rank ``k`` places on
in rank order); each channel carries one message, so no ring depth can block a send.  α–β cost
(docs/collectives.md): ``α + (n-1) C / β_inject`` when nothing but the PE's own link limits it; the fabric's
shared links usually do.  Every rank holds ``n - 1`` channels, so it is limited to :data:`MAX_RANKS` ranks.
"""

from __future__ import annotations

from kbfast.errors import KbfastError
from kbfast.workloads.collectives.algorithm import Algorithm
from kbfast.workloads.install import Install, install
from kbfast.workloads.kernels import ScheduleError, Tl

MAX_RANKS = 256              # n (n - 1) channels: 65,280 at 256 ranks


def direct(tl: Tl):
    """Send chunk ``(r + k) % n`` on direction ``o{k}``, then receive chunk ``r`` from every other rank.  A
    payload is ``(1 << sender) << tb | destination``: a chunk delivered to the wrong rank is caught.  Returns
    the ranks whose chunk for this rank arrived (its own included)."""
    n, r = tl.n_ranks, tl.rank
    chunk = max(tl.nbytes // n, 1)
    tb = n.bit_length()
    yield tl.phase("all-to-all")
    got = tl.contribution()
    for k in range(1, n):
        yield tl.send(f"o{k}", tl.contribution() << tb | (r + k) % n, chunk)
        msg = yield tl.recv(f"o{n - k}", chunk)
        if msg & ((1 << tb) - 1) != r:
            raise ScheduleError(f"rank {r} receives the chunk meant for rank {msg & ((1 << tb) - 1)}")
        got = tl.add(got, msg >> tb)
    return got


def check_ranks(n: int) -> None:
    """Refuse more than :data:`MAX_RANKS` ranks: n (n - 1) channels."""
    if n > MAX_RANKS:
        raise KbfastError(f"the direct all-to-all opens n (n-1) = {n * (n - 1):,} IPCQ channels on {n} ranks; it is "
                          f"limited to {MAX_RANKS} ranks: use ranks=cube_pe0, sip_pe0 or a list")


def _wiring(t, n: int, info: dict) -> Install:
    """Direction ``o{k}`` of rank ``r`` reaches rank ``(r + k) % n``; ``r`` receives its messages on ``o{n-k}``
    (the peer's direction back to it)."""
    return install(n, lambda rank, n: {f"o{k}": (rank + k) % n for k in range(1, n)})


DIRECT = Algorithm(direct, _wiring, None, ranks="cube_pe0", check=check_ranks)
