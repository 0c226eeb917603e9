"""A schedule's state and scratch put back at their start (kbfast.sim.agents.reset_state,
kbfast.fast.schedule.reset_scratch, kbfast.sim.heap.heap_reset) are new ones: after a run, every array the
constructors set holds its starting values again, and a schedule run in a reused scratch is the schedule run in
a fresh one, bit for bit, whatever ran in it before (the batched points kernel and kbfast.fast.evaluate reuse
them)."""

from __future__ import annotations

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.fast.plan import plan_fast
from kbfast.fast.schedule import LOWER, POINT, UPPER, _run, reset_scratch, schedule, scratch
from kbfast.sim.agents import new_state, reset_state
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce, pe2pe
from kbfast.workloads.probe_catalogue import build_catalogue

# Scratch fields that hold no starting value: each run writes them before it reads them.
UNSET = {"active", "pend", "mr", "mw", "m_ptr", "k_bn", "k_rate", "k_frozen", "route_iso", "uf", "order", "c_ptr"}
HEAP_TABLE, HEAP_FREE = 8, 9   # the event queue's hash table and free lists, whose tail holds its counters


def _programs():
    t = build_tables(load_system())
    router = Router(t)
    cat = build_catalogue(t, router)
    t6 = build_tables(load_system("torus6"))
    return [("pe2pe h3 4 KiB", pe2pe(t, router, "h3", 4096).program),
            ("ctrl_hot_3 64 KiB", cat["ctrl_hot_3"].program(t, router, 65536)),
            ("lrab torus6 16 KiB", allreduce(t6, Router(t6), 16384).program)]


PROGRAMS = _programs()


def _same(a, b, where: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, where
    assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where


@pytest.mark.parametrize("name,p", PROGRAMS, ids=[n for n, _ in PROGRAMS])
def test_reset_state_and_scratch_are_the_constructors_start(name: str, p) -> None:
    plan = plan_fast(p)
    fabric, hbm, P, routes, sharing = plan.kernel_inputs
    S, W = new_state(P), scratch(P, fabric, hbm, sharing)
    head = plan.head_offsets(p.op_nbytes)
    iso = np.full((p.n_ops, 1 + hbm.n_pcs), np.nan)
    _run(POINT, np.zeros(p.n_ops), plan.share, head, iso, fabric, hbm, P, S, W, routes, sharing)
    fresh_S, fresh_W = new_state(P), scratch(P, fabric, hbm, sharing)
    assert not np.array_equal(S.op_end, fresh_S.op_end) and not np.array_equal(W.lat, fresh_W.lat)   # a run's marks
    reset_state(S, P)
    reset_scratch(W)
    for f in S._fields:
        _same(getattr(S, f), getattr(fresh_S, f), f"State.{f}")
    for f in W._fields:
        if f in UNSET:
            continue
        a, b = getattr(W, f), getattr(fresh_W, f)
        if f == "heap":
            capacity = len(a[0])
            _same(a[HEAP_FREE][2 * capacity:], b[HEAP_FREE][2 * capacity:], "the queue's counters")
            _same(a[HEAP_TABLE], b[HEAP_TABLE], "the queue's hash table")
            continue
        _same(a, b, f"Scratch.{f}")


@pytest.mark.parametrize("name,p", PROGRAMS, ids=[n for n, _ in PROGRAMS])
def test_a_reused_scratch_schedules_as_a_fresh_one(name: str, p) -> None:
    plan = plan_fast(p)
    fabric, hbm, P, routes, sharing = plan.kernel_inputs
    head = plan.head_offsets(p.op_nbytes)
    extra = np.linspace(0.0, 50.0, p.n_ops)
    W = scratch(P, fabric, hbm, sharing)
    for mode in (POINT, LOWER, UPPER, POINT):        # each run in the scratch the one before used
        iso = np.full((p.n_ops, 1 + hbm.n_pcs), np.nan)
        reused = schedule(mode, extra, plan.share, head, iso, *plan.kernel_inputs, W)
        iso = np.full((p.n_ops, 1 + hbm.n_pcs), np.nan)
        fresh = schedule(mode, extra, plan.share, head, iso, *plan.kernel_inputs, scratch(P, fabric, hbm, sharing))
        for f in reused[0]._fields:
            _same(getattr(reused[0], f), getattr(fresh[0], f), f"mode {mode}: State.{f}")
        _same(reused[1], fresh[1], f"mode {mode}: op contended")
        _same(reused[2], fresh[2], f"mode {mode}: resource contended")
    assert not np.shares_memory(reused[1], W.o_contended) and not np.shares_memory(reused[2], W.r_contended)
