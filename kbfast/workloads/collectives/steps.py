"""Kernel steps the collective algorithms share: ring circulation, chain, converge and spread along a line.

Each is a generator over a kernel's ``tl`` (kbfast.workloads.kernels.Tl), used with ``yield from``; it
returns the rank's new value.
"""

from __future__ import annotations

from kbfast.workloads.kernels import Tl


def ring_circulate(tl: Tl, acc: int, out: str, inp: str, n: int):
    """n-1 rounds: send current, receive from the other side, accumulate (spec_ccl §5.2)."""
    current = acc
    for _ in range(n - 1):
        yield tl.send(out, current)
        r = yield tl.recv(inp)
        acc = tl.add(acc, r)
        yield tl.math()
        current = r
    return acc


def chain(tl: Tl, acc: int, pos: int, n: int, toward: str, away: str):
    """Chain reduce to position 0 (receive from ``away``, send ``toward``), then broadcast back."""
    if n == 1:
        return acc
    if pos < n - 1:
        r = yield tl.recv(away)
        acc = tl.add(acc, r)
        yield tl.math()
    if pos > 0:
        yield tl.send(toward, acc)
        acc = yield tl.recv(toward)
    if pos < n - 1:
        yield tl.send(away, acc)
    return acc


def converge(tl: Tl, acc: int, pos: int, root: int, n: int, lo_dir: str, hi_dir: str):
    """Bidirectional reduce along a line onto ``root`` (spec_ccl §5.7 P1/P2)."""
    if pos < root:
        if pos > 0:
            acc = tl.add(acc, (yield tl.recv(lo_dir)))
            yield tl.math()
        yield tl.send(hi_dir, acc)
    elif pos > root:
        if pos < n - 1:
            acc = tl.add(acc, (yield tl.recv(hi_dir)))
            yield tl.math()
        yield tl.send(lo_dir, acc)
    else:
        if root > 0:
            acc = tl.add(acc, (yield tl.recv(lo_dir)))
            yield tl.math()
        if root < n - 1:
            acc = tl.add(acc, (yield tl.recv(hi_dir)))
            yield tl.math()
    return acc


def spread(tl: Tl, acc: int, pos: int, root: int, n: int, lo_dir: str, hi_dir: str):
    """Broadcast from ``root`` outward along a line (spec_ccl §5.7 P4/P5)."""
    if pos == root:
        if root > 0:
            yield tl.send(lo_dir, acc)
        if root < n - 1:
            yield tl.send(hi_dir, acc)
    elif pos < root:
        acc = yield tl.recv(hi_dir)
        if pos > 0:
            yield tl.send(lo_dir, acc)
    else:
        acc = yield tl.recv(lo_dir)
        if pos < n - 1:
            yield tl.send(hi_dir, acc)
    return acc
