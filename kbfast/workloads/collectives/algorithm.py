"""What an all-reduce algorithm module declares: its kernel, its IPCQ install, its rank roles and its ranks.

An algorithm is one module of ``kbfast.workloads.collectives`` that builds an :class:`Algorithm`, plus one
line in ``kbfast.workloads.collectives.table.TABLE``; ``allreduce`` reads nothing else of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbfast.errors import KbfastError
from kbfast.topology.builder import Tables
from kbfast.workloads.install import Install, Wiring
from kbfast.workloads.kernels import Kernel


@dataclass(frozen=True)
class Algorithm:
    """One all-reduce algorithm as :func:`~kbfast.workloads.collectives.generate.allreduce` runs it.

    * ``kernel``: the rank program (a ``tl`` generator, kbfast.workloads.kernels);
    * ``wiring(t, n, info)``: the IPCQ install of ``n`` ranks (``info``: :func:`placement.kernel_info`), a
      :class:`Wiring` when traced, an :class:`Install` when ``roles`` is None;
    * ``roles(n, info)``: per rank, the features its control flow depends on (ranks with equal rows run the
      same ops, so the kernel is traced once per distinct row and its template run per rank); None runs one generator per
      rank (``run_kernels``), for kernels whose payloads steer them;
    * ``ranks``: the default rank set (``cube_pe0`` or ``all_pes``); ``only_ranks``: the refusal when another
      rank set is asked for ("" accepts either);
    * ``corner_root``: lrab's root cube in the SE corner instead of the centre;
    * ``check(n)``: refuses a rank count the algorithm cannot run (None: any);
    * ``min_slots``: the IPCQ ring depth (``ipcq.n_slots``) its schedule needs to be free of deadlock (a
      pipelined kernel sends ahead of its receives);
    * ``expect(n, info)``: rank -> the contributor set the rank's kernel must end with (None: every rank, as
      in an all-reduce); the symbolic check compares (kbfast.workloads.kernels.run_kernels).
    """

    kernel: Kernel
    wiring: Callable[[Tables, int, dict], Wiring | Install]
    roles: Callable[[int, dict], np.ndarray] | None
    ranks: str = "all_pes"
    only_ranks: str = ""
    corner_root: bool = False
    check: Callable[[int], None] | None = None
    min_slots: int = 1
    expect: Callable[[int, dict], Callable[[int], int]] | None = None


def role_rows(features: list) -> np.ndarray:
    """Stack per-rank feature columns into the int64 role rows :attr:`Algorithm.roles` returns."""
    return np.stack([np.asarray(f, np.int64) for f in features], axis=1)


def same_role(n: int, info: dict) -> np.ndarray:
    """Roles of an algorithm whose ranks all run the same ops (a ring)."""
    return role_rows([np.zeros(n, bool)])


def check_slots(algorithm: str, alg: Algorithm, n_slots: int) -> None:
    """Refuse a ring depth below what ``alg``'s schedule needs (:attr:`Algorithm.min_slots`)."""
    if n_slots < alg.min_slots:
        raise KbfastError(f"ipcq.n_slots={n_slots}: {algorithm} sends {alg.min_slots} messages ahead of its "
                          f"receives and needs at least {alg.min_slots} slots per ring; set ipcq.n_slots >= "
                          f"{alg.min_slots}, or use rs_ag")
