"""IPCQ install: neighbour tables, reverse directions and the install invariants (spec_ccl §1.4, §3, §5.10).

Kernels see only direction labels; an install maps every (rank, direction) to a
peer and decides on which direction the peer receives: the opposite direction
when it points back (E<->W, N<->S, global_*, intra_*), else the first direction
of the peer that points back (ADR-0025), else a receive-only opposite label.
At install it checks I3 (every send direction has a receiving side) and I3.1
(no two senders share a receiver's rx range); failures raise F4.  An
uninstalled direction at run time raises F1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbfast.errors import KbfastError

OPPOSITE = {"E": "W", "W": "E", "N": "S", "S": "N"}
for _p in ("global_", "intra_", "pe_", "mesh_", "sip_", "ring_", "pipe_"):
    OPPOSITE.update({_p + a: _p + b for a, b in list(OPPOSITE.items())[:4]})


def opposite(d: str) -> str | None:
    """The label opposite ``d`` (ADR-0025): E and W, N and S (bare or behind a prefix of :data:`OPPOSITE`), and
    an all-to-all's ``a2a+k`` (to rank + k) and ``a2a-k`` beside other directions (kbfast.workloads.moe)."""
    if d.startswith(("a2a+", "a2a-")):
        return ("a2a-" if d[3] == "+" else "a2a+") + d[4:]
    return OPPOSITE.get(d)

Table = dict[str, int]
NeighborFn = Callable[[int, int], Table]


class IpcqInvalidDirection(KbfastError):
    """F1: a kernel used a direction the install did not wire."""


class IpcqInitError(KbfastError):
    """F4: the install violates an invariant (I3, I3.1) or names an unknown topology."""


def ring_1d(rank: int, n: int) -> Table:
    """Bidirectional ring: E to the next rank, W to the previous (none below two ranks)."""
    return {} if n < 2 else {"E": (rank + 1) % n, "W": (rank - 1) % n}


def ring_1d_unidir(rank: int, n: int) -> Table:
    """Unidirectional ring: E to the next rank only (the previous receives on the opposite label)."""
    return {} if n < 2 else {"E": (rank + 1) % n}


def grid(w: int, h: int, wrap: bool, prefix: str = "") -> NeighborFn:
    """2-D neighbours on a w x h row-major grid (row = rank // w); ``wrap`` makes it a torus."""

    def table(rank: int, n: int) -> Table:
        row, col = divmod(rank, w)
        out: Table = {}
        for d, (dr, dc) in (("E", (0, 1)), ("W", (0, -1)), ("S", (1, 0)), ("N", (-1, 0))):
            r, c = row + dr, col + dc
            if wrap:
                r, c = r % h, c % w
            if 0 <= r < h and 0 <= c < w and (r, c) != (row, col):
                out[prefix + d] = r * w + c
        return out

    return table


def tree_binary(rank: int, n: int) -> Table:
    """Binary tree in heap order: ``parent`` (r - 1) // 2, ``child_left`` 2r + 1, ``child_right`` 2r + 2."""
    out: Table = {}
    if rank > 0:
        out["parent"] = (rank - 1) // 2
    for d, child in (("child_left", 2 * rank + 1), ("child_right", 2 * rank + 2)):
        if child < n:
            out[d] = child
    return out


def _labelled(base: NeighborFn) -> Callable[[str, int, int, int, str], NeighborFn]:
    """A fixed-shape topology's table maker: ``base``'s directions behind ``prefix``."""
    return lambda kind, n, w, h, prefix: (lambda r, m: {prefix + d: p for d, p in base(r, m).items()})


def _grid_of(wrap: bool) -> Callable[[str, int, int, int, str], NeighborFn]:
    """A w x h grid topology's table maker (a torus when ``wrap``); refuses ``w * h != n``."""

    def make(kind: str, n: int, w: int, h: int, prefix: str) -> NeighborFn:
        if w * h != n:
            raise IpcqInitError(f"{kind} needs w*h == {n} ranks (got {w}x{h})")
        return grid(w, h, wrap=wrap, prefix=prefix)

    return make


# the built-in IPCQ topologies (spec_ccl §1.4): name -> maker(kind, n, w, h, prefix) of the neighbour table
TOPOLOGIES = {"ring_1d": _labelled(ring_1d), "ring_1d_unidir": _labelled(ring_1d_unidir), "mesh_2d": _grid_of(True),
              "torus_2d": _grid_of(True), "mesh_2d_no_wrap": _grid_of(False), "tree_binary": _labelled(tree_binary)}


def neighbor_fn(kind: str, n: int, w: int = 0, h: int = 0, prefix: str = "") -> NeighborFn:
    """The neighbour table of a built-in topology (spec_ccl §1.4, §5.2–§5.4, §5.9)."""
    if kind not in TOPOLOGIES:
        raise IpcqInitError(f"unknown IPCQ topology {kind!r}; use {', '.join(TOPOLOGIES)} "
                            "or a custom neighbors() function")
    return TOPOLOGIES[kind](kind, n, w, h, prefix)


@dataclass(frozen=True)
class Install:
    """Directions of every rank: ``send[(rank, d)] = peer`` and ``recv_dir[(rank, d)] = peer's receiving label``."""

    n_ranks: int
    tables: tuple[Table, ...]
    recv_dir: dict[tuple[int, str], str]
    sender_of: dict[tuple[int, str], tuple[int, str]]   # (receiver, label) -> (sender, its direction)

    def peer(self, rank: int, d: str) -> int:
        """The rank that ``rank``'s direction ``d`` reaches; F1 when ``d`` is not installed."""
        try:
            return self.tables[rank][d]
        except KeyError:
            raise IpcqInvalidDirection(f"rank {rank} has no IPCQ direction {d!r} installed "
                                       f"(installed: {', '.join(sorted(self.tables[rank])) or 'none'})") from None

    def inbound(self, rank: int, label: str) -> tuple[int, str]:
        """The (sender, send direction) whose messages rank ``rank`` receives on ``label``."""
        try:
            return self.sender_of[(rank, label)]
        except KeyError:
            raise IpcqInvalidDirection(f"rank {rank} receives on no IPCQ direction {label!r}") from None


def reverse_direction(tables: list[Table], me: int, peer: int, d: str,
                      back: dict[int, str] | None = None) -> str | None:
    """The peer's label for messages from ``me`` sent on ``d`` (ADR-0025 opposite preference): the opposite
    label when it points back, else the peer's first label that points back (``back``: the peer's rank ->
    its first label to that rank, when the caller has it), else a receive-only opposite."""
    opp = opposite(d)
    if opp is not None and tables[peer].get(opp) == me:
        return opp
    if back is not None:
        if me in back:
            return back[me]
    else:
        for d2, p2 in tables[peer].items():
            if p2 == me:
                return d2
    if opp is not None and opp not in tables[peer]:
        return opp   # receive-only label (e.g. a unidirectional ring)
    return None


def install(n_ranks: int, *fns: NeighborFn) -> Install:
    """Merge neighbour functions into one table per rank and check I3 / I3.1."""
    tables: list[Table] = []
    for r in range(n_ranks):
        merged: Table = {}
        for fn in fns:
            for d, p in fn(r, n_ranks).items():
                if not 0 <= p < n_ranks:
                    raise IpcqInitError(f"rank {r} direction {d!r} points to rank {p}, outside 0..{n_ranks - 1}")
                merged[d] = p
        tables.append(merged)
    backs: list[dict[int, str]] = []       # per rank: peer -> its first label to that peer
    for table in tables:
        back: dict[int, str] = {}
        for d, p in table.items():
            back.setdefault(p, d)
        backs.append(back)
    recv_dir: dict[tuple[int, str], str] = {}
    sender_of: dict[tuple[int, str], tuple[int, str]] = {}
    for r, table in enumerate(tables):
        for d, p in table.items():
            label = reverse_direction(tables, r, p, d, backs[p])
            if label is None:
                raise IpcqInitError(f"I3 violated: rank {r} sends {d!r} to rank {p}, which has no direction back")
            if (p, label) in sender_of:
                other = sender_of[(p, label)]
                raise IpcqInitError(f"I3.1 violated: rank {p} would receive both from rank {other[0]} ({other[1]!r}) "
                                    f"and from rank {r} ({d!r}) on {label!r}; their rx ranges would overlap")
            recv_dir[(r, d)] = label
            sender_of[(p, label)] = (r, d)
    return Install(n_ranks=n_ranks, tables=tuple(tables), recv_dir=recv_dir, sender_of=sender_of)


# ------------------------------------------------------------------------------------------------------------
# Array form (the collective generators): the same install rules, vectorised over ranks.
@dataclass(frozen=True)
class Wiring:
    """An install as arrays over direction labels ``labels`` (send labels, then receive-only ones).

    ``peer[r, k]``: rank that ``r``'s direction ``k`` reaches (-1: not installed);
    ``inbound[r, k]``: link ``s * L + d`` of the sender whose messages ``r`` receives on label ``k``
    (-1: none), where ``L = len(labels)``.
    """

    labels: tuple[str, ...]
    peer: np.ndarray
    inbound: np.ndarray

    def fail(self, rank: int, d: str, send: bool) -> None:
        """F1 for rank ``rank`` lacking direction ``d`` (on the send side, or as a receive label)."""
        if not send:
            raise IpcqInvalidDirection(f"rank {rank} receives on no IPCQ direction {d!r}")
        have = sorted(self.labels[k] for k in np.flatnonzero(self.peer[rank] >= 0))
        raise IpcqInvalidDirection(f"rank {rank} has no IPCQ direction {d!r} installed "
                                   f"(installed: {', '.join(have) or 'none'})")

    def to_install(self) -> Install:
        """The dict form (as :func:`install` builds it)."""
        n, L = self.peer.shape
        tables = tuple({self.labels[k]: int(self.peer[r, k]) for k in range(L) if self.peer[r, k] >= 0}
                       for r in range(n))
        sender_of = {(r, self.labels[k]): (int(s) // L, self.labels[int(s) % L])
                     for r in range(n) for k in range(L) if (s := self.inbound[r, k]) >= 0}
        recv_dir = {snd: label for (_, label), snd in sender_of.items()}
        recv_dir = {(r, d): recv_dir[(r, d)] for r in range(n) for d in tables[r]}
        return Install(n_ranks=n, tables=tables, recv_dir=recv_dir, sender_of=sender_of)


def install_peers(labels: list[str], peer: np.ndarray) -> Install:
    """:func:`install` of a neighbour table in array form (``peer[r, k]``: rank ``r``'s peer on ``labels[k]``,
    -1: none)."""
    rows = peer.tolist()
    return install(len(rows), lambda r, n: {d: p for d, p in zip(labels, rows[r]) if p >= 0})


def wire(labels: list[str], peer: np.ndarray) -> Wiring:
    """:func:`install` over a neighbour table in array form: ``peer[r, k]`` is rank ``r``'s peer on
    ``labels[k]`` (-1: none), each rank's directions in ``labels`` order.  Same rules (opposite
    label, else the peer's first direction pointing back, else a receive-only opposite, ADR-0025)
    and the same I3 / I3.1 errors, first in (rank, direction) order."""
    n = len(peer)
    labels = list(labels)
    for d in list(labels):
        if opposite(d) is not None and opposite(d) not in labels:
            labels.append(opposite(d))          # a receive-only label
    L = len(labels)
    peer = np.concatenate([peer, np.full((n, L - peer.shape[1]), -1, np.int64)], axis=1).astype(np.int64)
    me = np.arange(n)[:, None]
    valid = peer >= 0
    p = np.where(valid, peer, 0)
    index = {d: k for k, d in enumerate(labels)}
    opp = np.array([index[opposite(d)] if opposite(d) is not None else -1 for d in labels], np.int64)
    has_opp = opp >= 0
    opp_i = np.where(has_opp, opp, 0)
    at_opp = peer[p, opp_i[None, :]]                   # the peer's peer on the opposite label
    opp_back = has_opp & (at_opp == me)
    opp_free = has_opp & (at_opp < 0)
    label = np.where(opp_back, opp, -1)
    # the peer's first label pointing back, searched only where the opposite does not point back: [r, k, d2]
    # over every label would be n x L x L (an all-to-all's 2 (n - 1) labels: 550 MB on 256 PEs)
    cols = np.flatnonzero((valid & ~opp_back).any(axis=0))
    if len(cols):
        back = peer[p[:, cols]] == me[:, :, None]
        found = np.where(back.any(axis=2), back.argmax(axis=2), np.where(opp_free[:, cols], opp[cols], -1))
        label[:, cols] = np.where(opp_back[:, cols], opp[cols], found)
    label = np.where(valid, label, -2)
    # I3 / I3.1, the first violation in (rank, direction) order
    flat = np.flatnonzero(valid.ravel())
    key = peer.ravel()[flat] * L + label.ravel()[flat]
    i3 = label.ravel()[flat] == -1
    _, first = np.unique(key, return_index=True)
    dup = np.ones(len(flat), bool)
    dup[first] = False
    bad = np.flatnonzero(i3 | dup)
    if len(bad):
        i = bad[0]
        r, k = divmod(int(flat[i]), L)
        pr = int(peer[r, k])
        if i3[i]:
            raise IpcqInitError(f"I3 violated: rank {r} sends {labels[k]!r} to rank {pr}, which has no direction back")
        o_r, o_k = divmod(int(flat[np.flatnonzero(key == key[i])[0]]), L)
        raise IpcqInitError(f"I3.1 violated: rank {pr} would receive both from rank {o_r} ({labels[o_k]!r}) "
                            f"and from rank {r} ({labels[k]!r}) on {labels[int(label[r, k])]!r}; "
                            "their rx ranges would overlap")
    inbound = np.full(n * L, -1, np.int64)
    inbound[key] = flat
    return Wiring(labels=tuple(labels), peer=peer, inbound=inbound.reshape(n, L))


def ring_peers(n: int, prefix: str = "") -> tuple[list[str], np.ndarray]:
    """:func:`ring_1d` as arrays: labels and ``peer[r, k]``."""
    r = np.arange(n)
    peer = np.stack([(r + 1) % n, (r - 1) % n], axis=1) if n >= 2 else np.zeros((n, 0), np.int64)
    return [prefix + "E", prefix + "W"][:peer.shape[1]], peer


def grid_peers(w: int, h: int, wrap: bool, prefix: str = "") -> tuple[list[str], np.ndarray]:
    """:func:`grid` as arrays (E, W, S, N; row = rank // w)."""
    row, col = np.divmod(np.arange(w * h), w)
    cols = []
    for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        r, c = row + dr, col + dc
        if wrap:
            r, c = r % h, c % w
        ok = (r >= 0) & (r < h) & (c >= 0) & (c < w) & ((r != row) | (c != col))
        cols.append(np.where(ok, r * w + c, -1))
    return [prefix + d for d in ("E", "W", "S", "N")], np.stack(cols, axis=1)


def tree_peers(n: int) -> tuple[list[str], np.ndarray]:
    """:func:`tree_binary` as arrays."""
    r = np.arange(n)
    kids = [np.where(c < n, c, -1) for c in (2 * r + 1, 2 * r + 2)]
    return ["parent", "child_left", "child_right"], np.stack([np.where(r > 0, (r - 1) // 2, -1)] + kids, axis=1)
