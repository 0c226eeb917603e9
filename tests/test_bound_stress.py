"""The bounds' stress check: ``lower <= exact <= upper`` for every op end and every agent finish, on a few hundred
Programs (docs/fast_path.md §4, "Result"; the check is ``conftest.assert_bounds``: 1e-9 relative slack, for float
rounding only).

The cases, by family:

* ``probe``: every case of the probe catalogue on the default system, at four sizes (the launch probe once: its
  Program does not depend on the size);
* ``pe2pe``: every hop class over IPCQ (tcm, sram and hbm slots; a recv that does not consume), as raw DMA (load
  then store) and as the store alone, at three sizes;
* ``allreduce-<algorithm>``: every all-reduce algorithm on ahbm_2sip, ring6, torus6 and mesh6, under six IPCQ
  settings (``IPCQ``), with the tile I/O and without.  The size turns with the topology and the setting (a Latin
  square over ``SIZES``): each topology meets all six sizes, each setting four.  The ranks are pe0 of every cube
  (``cube_pe0``), but every PE for hier3 (it runs nowhere else) and hier2d (on the cube pe0s of a 6-SIP system
  the fast path takes 30-45 s to schedule it: tests/test_collective_ops.py).

The default run takes a fixed sample: ``SAMPLE`` cases of each family, none of the ``HEAVY`` ones, drawn with
``SEED``.  ``-m slow`` runs every case::

    python -m pytest -q -n 2 -m slow tests/test_bound_stress.py

Every case is marked ``slow``, the sample ``sampled`` too; the default run deselects ``slow and not sampled``
(pyproject.toml).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import pytest

from kbfast.config import DEFAULT_TOPOLOGY
from kbfast.ir import Program
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import ALGORITHMS, HOPS, TABLE, allreduce, pe2pe
from kbfast.workloads.probe_catalogue import ProbeCase, build_catalogue
from conftest import assert_bounds, topo  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
PROBE_SIZES = (16, 4 * KiB, 64 * KiB, MiB)
PE2PE_SIZES = (16, 4 * KiB, 96 * KiB)
# pe2pe transports: (IPCQ buffer kind or None, pe2pe's keywords)
PE2PE_MODES = {"ipcq_tcm": ("tcm", {}), "ipcq_sram": ("sram", {}), "ipcq_hbm": ("hbm", {}),
               "ipcq_no_consume": ("tcm", {"consume": False}), "dma": (None, {"raw_dma": True}),
               "store": (None, {"raw_dma": True, "load": False})}
SEEDS = ("ring6", "torus6", "mesh6")   # 6 SIPs on one switch, their collectives on a ring, a torus, a mesh
TOPOLOGIES = ("ahbm_2sip", *SEEDS)
# IPCQ settings over the topology's own (tcm slots, 4 per ring, blocking credits, sleeping backpressure);
# "shallow": the fewest slots per ring the algorithm runs on (1, or its Algorithm.min_slots)
IPCQ: dict[str, Callable[[str], dict]] = {
    "own": lambda alg: {},
    "sram": lambda alg: {"ipcq.buffer_kind": "sram"},
    "hbm": lambda alg: {"ipcq.buffer_kind": "hbm"},
    "shallow": lambda alg: {"ipcq.n_slots": TABLE[alg].min_slots},
    "poll": lambda alg: {"ipcq.backpressure": "poll"},
    "forked": lambda alg: {"ipcq.credit_mode": "forked"},
}
# one flit, a partial slot, an odd size, one slot, a slot grown to fit, a large message
SIZES = (16, 1 * KiB, 3000, 4 * KiB, 16 * KiB, 96 * KiB)
EVERY_PE = {"hier3", "hier2d"}
# Left out of the sample: on the SEEDS a flat ring of 96 cube pe0s takes 9-33 s a case and hier2d on 768
# PEs 7-24 s (measured, 2 busy cores); every other case takes under 7 s, most under 1 s.
HEAVY = {"ring", "hier2d"}
SEED = 646
SAMPLE = {"probe": 10, "pe2pe": 10}   # cases drawn per family; 2 of each all-reduce algorithm


@dataclass(frozen=True)
class Case:
    """One Program of the stress set: its family, id, system (a preset and overrides) and builder."""

    family: str
    id: str
    preset: str
    overrides: dict
    build: Callable[[Tables, Router], Program]
    heavy: bool = False             # never in the default run's sample


@cache
def _catalogue() -> dict[str, ProbeCase]:
    """The probe catalogue of the default system."""
    return build_catalogue(*topo({}))


def _cases() -> list[Case]:
    out = []
    for name, probe in _catalogue().items():
        for n in PROBE_SIZES[-1:] if probe.kind == "launch" else PROBE_SIZES:
            out.append(Case("probe", f"probe-{name}-{n}B", DEFAULT_TOPOLOGY, {},
                            lambda t, r, name=name, n=n: _catalogue()[name].program(t, r, n)))
    for hop in HOPS:
        for mode, (kind, kw) in PE2PE_MODES.items():
            for n in PE2PE_SIZES:
                out.append(Case("pe2pe", f"pe2pe-{hop}-{mode}-{n}B", DEFAULT_TOPOLOGY,
                                {"ipcq.buffer_kind": kind} if kind else {},
                                lambda t, r, hop=hop, n=n, kw=kw: pe2pe(t, r, hop, n, **kw).program))
    for alg in ALGORITHMS:
        ranks = "all_pes" if alg in EVERY_PE else "cube_pe0"
        for i, preset in enumerate(TOPOLOGIES):
            for j, (setting, over) in enumerate(IPCQ.items()):
                n = SIZES[(i + j) % len(SIZES)]
                for tile_io in (True, False):
                    out.append(Case(f"allreduce-{alg}",
                                    f"allreduce-{alg}-{preset}-{setting}-{'tile_io' if tile_io else 'no_tile_io'}-{n}B",
                                    preset, over(alg),
                                    lambda t, r, alg=alg, n=n, ranks=ranks, io=tile_io:
                                    allreduce(t, r, n, alg, ranks=ranks, tile_io=io).program,
                                    heavy=alg in HEAVY and preset in SEEDS))
    return out


def _sample(cases: list[Case]) -> set[str]:
    """The ids of ``SAMPLE[family]`` cases (2 by default) of each family, none heavy, drawn with ``SEED``: the
    same on every run."""
    rng = random.Random(SEED)
    families: dict[str, list[str]] = {}
    for c in cases:
        if not c.heavy:
            families.setdefault(c.family, []).append(c.id)
    return {i for f, ids in families.items() for i in rng.sample(ids, min(SAMPLE.get(f, 2), len(ids)))}


CASES = _cases()
SAMPLED = _sample(CASES)


def _params():
    for c in CASES:
        marks = [pytest.mark.slow] + ([pytest.mark.sampled] if c.id in SAMPLED else [])
        yield pytest.param(c, marks=marks, id=c.id)


@pytest.mark.parametrize("case", list(_params()))
def test_exact_lies_within_the_bounds(case: Case) -> None:
    t, r = topo(case.overrides, case.preset)
    assert_bounds(case.build(t, r))


def test_the_sample_covers_every_family() -> None:
    """The default run meets every family: the probes, pe2pe and each all-reduce algorithm."""
    families = {c.family for c in CASES}
    assert families == {"probe", "pe2pe", *(f"allreduce-{a}" for a in ALGORITHMS)}
    assert {c.family for c in CASES if c.id in SAMPLED} == families
    assert len({c.id for c in CASES}) == len(CASES)
