"""The interference bound (kbfast.fast.bounds) against the pairwise reference in tests/naive.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbfast.fast.bounds import BoundTables, interference, window_offsets
from kbfast.fast.plan import RUN_MAX_PAIRS, RUN_PARTNERS, plan_fast, run_partners
from kbfast.fast.runs import (_chain_lengths, _longest_first, _partners_and_runs, _server_users,
                              run_charges, run_coefficients, stable_order)
from kbfast.ir import Op
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce
import naive
from naive import pairwise_interference, pairwise_runs

FLIT = 64


def random_tables(rng: np.random.Generator, n_ops: int, n_cls: int, n_res: int) -> BoundTables:
    """Each class uses a random set of distinct resources; each op is in a random class or in none."""
    cls_res = [rng.choice(n_res, size=rng.integers(0, n_res + 1), replace=False) for _ in range(n_cls)]
    cls_ptr = np.concatenate([[0], np.cumsum([len(x) for x in cls_res])]).astype(np.int64)
    res = np.concatenate(cls_res).astype(np.int64)
    op_cls = rng.integers(-1, n_cls, n_ops)
    ops = np.concatenate([np.flatnonzero(op_cls == c) for c in range(n_cls)]).astype(np.int64)
    ops_ptr = np.concatenate([[0], np.cumsum([(op_cls == c).sum() for c in range(n_cls)])]).astype(np.int64)
    owner = np.repeat(np.arange(n_cls), np.diff(cls_ptr))
    order = np.lexsort((np.arange(len(res)), res))
    users_ptr = np.concatenate([[0], np.cumsum(np.bincount(res, minlength=n_res))]).astype(np.int64)
    users = np.stack([owner[order], order]).T.astype(np.int64).reshape(-1, 2)
    return BoundTables(cls_ptr=cls_ptr, res=res, kind=rng.integers(0, 3, len(res)).astype(np.int8),
                       base=rng.random(len(res)) * 10, ops_ptr=ops_ptr, ops=ops, users_ptr=users_ptr, users=users,
                       serial=rng.random(n_cls) < 0.5, seq_ptr=np.zeros(n_cls + 1, np.int64),
                       seq_res=np.empty(0, np.int64), seq_c=np.empty(0), seq_o=np.empty(0),
                       seq_solo=np.empty(0, np.bool_))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(1, 30), n_cls=st.integers(1, 10), n_res=st.integers(1, 8),
       windows=st.booleans(), ties=st.booleans(), narrowed=st.booleans())
def test_interference_matches_the_pairwise_reference(seed, n_ops, n_cls, n_res, windows, ties, narrowed) -> None:
    rng = np.random.default_rng(seed)
    B = random_tables(rng, n_ops, n_cls, n_res)
    nbytes = rng.integers(1, 1000, n_ops)
    begin = rng.integers(0, 20, n_ops).astype(float) if ties else rng.random(n_ops) * 1000
    end = begin + (rng.integers(0, 10, n_ops).astype(float) if ties else rng.random(n_ops) * 300)
    own = rng.random(n_ops)
    posted = rng.random(n_ops) < 0.3
    # per-server windows: random offsets, some larger than a window (it then shrinks to its begin)
    # (as window_offsets gives them: none on a serial class's entries, whose own co-users are taken back by
    # whole windows, nor on a controller)
    pre, post = (rng.random((2, len(B.res))) * 200) if narrowed else np.zeros((2, len(B.res)))
    whole = (B.kind == 2) | np.repeat(B.serial, np.diff(B.cls_ptr))
    pre[whole] = post[whole] = 0.0
    got = interference(B, nbytes, FLIT, begin, end, windows, own, posted, np.zeros(n_cls, np.bool_), pre, post)
    want = pairwise_interference(B, nbytes, begin, end, windows, own, FLIT, posted, pre=pre, post=post)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


# ------------------------------------------------------------------------------------- runs (pay bursts once)
@pytest.fixture(scope="module")
def bound_programs(tables, router, torus6_tables):
    """Real bound tables: congestion probes (long shared routes, funnels) and an lrab all-reduce on 6 SIPs."""
    from kbfast.workloads.probe_catalogue import build_catalogue

    cat = build_catalogue(tables, router)
    progs = [cat[case].program(tables, router, n) for case, n in
             (("ctrl_hot_3", 4096), ("ucie_eastbound_8pe", 1000), ("all_pe_cube0_to_pe0", 16384))]
    progs.append(allreduce(torus6_tables, Router(torus6_tables), 4096).program)
    return [(p, plan_fast(p)) for p in progs]


def test_window_offsets_match_the_reference(bound_programs) -> None:
    narrowed = 0
    for p, plan in bound_programs:
        for flit in (FLIT, plan.lowered.hbm.flit_bytes):
            got = window_offsets(plan.bounds, p.op_nbytes, flit, p.op_code == Op.SEND)
            want = naive.window_offsets(plan.bounds, p.op_nbytes, flit, p.op_code == Op.SEND)
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            narrowed += int(got[0].any() and got[1].any())
    assert narrowed >= 2          # only messages are narrowed: the probes have none, the all-reduce has


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), windows=st.booleans(), partners=st.sampled_from([2, 8, 64]),
       narrowed=st.booleans())
def test_runs_match_the_pairwise_reference(bound_programs, seed, windows, partners, narrowed) -> None:
    rng = np.random.default_rng(seed)
    for p, plan in bound_programs:
        begin = rng.random(p.n_ops) * 2000
        end = begin + rng.random(p.n_ops) * 500
        runs = run_coefficients(plan.bounds, partners)
        _, _, seq_pre, seq_post = window_offsets(plan.bounds, p.op_nbytes, FLIT, p.op_code == Op.SEND)
        if not narrowed:
            seq_pre, seq_post = np.zeros_like(seq_pre), np.zeros_like(seq_post)
        got = run_charges(plan.bounds, runs, p.op_nbytes, FLIT, begin, end, windows, seq_pre, seq_post)
        want, want_done = pairwise_runs(plan.bounds, p.op_nbytes, begin, end, windows, FLIT, partners,
                                        seq_pre, seq_post)
        np.testing.assert_array_equal(runs.done, want_done)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


@settings(deadline=None)
@given(key=st.lists(st.integers(-50, 50), max_size=300))
def test_run_order_is_a_stable_sort(key) -> None:
    """The runs are cut longest first, ties in key order: the merge sort is numpy's stable sort."""
    key = np.array(key, np.int64)
    np.testing.assert_array_equal(stable_order(key), np.argsort(key, kind="stable"))


@settings(deadline=None)                 # the first example compiles the kernel
@given(runs=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 30), st.integers(0, 30)), max_size=200))
def test_runs_are_cut_longest_first_then_by_partner_then_start(runs) -> None:
    """The counting sorts give the order of a stable sort on (-length, partner, start); the runs come in
    order of start, as the scan finds them."""
    runs = sorted(runs, key=lambda r: r[1])
    d = np.array([r[0] for r in runs], np.int64)
    a = np.array([r[1] for r in runs], np.int64)
    b = a + np.array([r[2] for r in runs], np.int64)
    want = np.lexsort((np.arange(len(d)), a, d, -(b - a)))
    np.testing.assert_array_equal(_longest_first(d, a, b, len(d), 10, 31), want)


def test_a_chain_is_visited_once_with_the_same_partners_and_runs(bound_programs) -> None:
    """Visiting a chain of servers once finds the partners, spans, solo sums and runs that visiting each
    server finds; the probes' long shared routes have chains of up to 8 servers."""
    longest = 0
    for _, plan in bound_programs:
        B = plan.bounds
        n_cls, m = len(B.cls_ptr) - 1, len(B.seq_res)
        su_ptr, su_cls, su_idx = _server_users(B)
        chain = _chain_lengths(B.seq_ptr, B.seq_res, B.seq_solo, su_ptr, su_cls)
        longest = max(longest, chain.max())
        for c in range(n_cls):
            out = []
            for ch in (chain, np.ones(m, np.int64)):
                state = [np.full(n_cls, -1, np.int64)] + [np.zeros(n_cls, np.int64) for _ in range(4)]
                found, solo, span = np.empty(n_cls, np.int64), np.zeros((n_cls, 2)), np.zeros((n_cls, 4), np.int64)
                run = [np.empty(4 * m, np.int64) for _ in range(3)]
                n_p, n_run, over = _partners_and_runs(B, c, n_cls, su_ptr, su_cls, su_idx, ch, *state, found, solo,
                                                      span, *run)
                out.append((n_p, n_run, over, found[:n_p], solo[:n_p], span[:n_p], *(x[:n_run] for x in run)))
            for x, y in zip(*out):
                np.testing.assert_array_equal(x, y)
    assert longest == 8


def test_partners_a_class_may_have() -> None:
    """RUN_MAX_PAIRS / classes partners a class, within 64 .. 1024."""
    assert run_partners(1) == run_partners(1022) == 1024
    assert run_partners(3070) == RUN_MAX_PAIRS // 3070 == 651
    assert run_partners(10**6) == 64


def test_every_class_of_a_tree_over_every_pe_is_charged_by_runs(tables, router) -> None:
    """The tree's leaves funnel into the links above them: 524 of its classes have more than 64 partner
    classes (up to 445), all within run_partners, so no class keeps the per-server charge (docs/fast_path.md
    §4, "Partners")."""
    plan = plan_fast(allreduce(tables, router, 4096, "tree", "all_pes").program)
    B = plan.bounds
    assert plan.runs.done.all() and len(B.cls_ptr) - 1 == 1022
    assert np.sum(np.diff(plan.runs.p_ptr) > RUN_PARTNERS) == 524


def test_runs_never_charge_more_than_each_server(bound_programs) -> None:
    """Paid once per run, a co-user's train costs at most what it costs paid at every server it shares."""
    for p, plan in bound_programs:
        B, flit = plan.bounds, plan.lowered.hbm.flit_bytes
        zero, posted = np.zeros(p.n_ops), np.zeros(p.n_ops, np.bool_)
        no_k, no_s = np.zeros(len(B.res)), np.zeros(len(B.seq_res))
        per_server = interference(B, p.op_nbytes, flit, zero, zero, False, zero, posted,
                                  np.zeros(len(B.cls_ptr) - 1, np.bool_), no_k, no_k)
        R = run_coefficients(B, 64)
        mixed = (interference(B, p.op_nbytes, flit, zero, zero, False, zero, posted, R.done, no_k, no_k)
                 + run_charges(B, R, p.op_nbytes, flit, zero, zero, False, no_s, no_s))
        assert R.done.any()
        assert np.all(mixed <= per_server * (1 + 1e-12) + 1e-9)
        assert mixed.sum() < per_server.sum()


def test_plans_with_times_share_the_window_free_interference_and_keep_the_bounds(tables, router) -> None:
    """The window-free interference and the flows' isolated latencies read no time, so the plans ``with_times``
    makes remember them for each other (a model layer's points at every KV length): bounds of a Program whose
    MATH times changed, after another Program's bounds warmed the shared memo, are those of its own fresh plan,
    bit for bit."""
    from kbfast.fast.evaluate import finish_bounds

    p = allreduce(tables, router, 4096).program
    math = p.op_code == Op.MATH
    assert math.any()
    q_arg = p.op_arg.copy()
    q_arg[math] *= 3.0
    q = dataclasses.replace(p, op_arg=q_arg)
    plan = plan_fast(p)
    finish_bounds(p, p, 1, plan)
    assert {k[0] for k in plan.memo if isinstance(k, tuple)} == {"window_free", "iso"}
    warm = finish_bounds(q, q, 1, plan.with_times(q))
    fresh = finish_bounds(q, q, 1, plan_fast(q))
    for a, b in zip(warm, fresh):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
