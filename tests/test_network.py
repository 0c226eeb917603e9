"""The queueing network kernel (kbfast.fast.network) against its slow reference (tests/naive_queueing.py): the same
model in flat arrays, so the same times to rounding, on the Programs where the network matters."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.evaluate import NetworkBudgetExceeded, network_schedule
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce
from kbfast.workloads.gemm import gemm_case
from kbfast.workloads.probe_catalogue import build_catalogue
from naive_queueing import queueing_schedule

KiB = 1024


@cache
def _system(preset: str = "ahbm_2sip"):
    t = build_tables(load_system(preset))
    return t, Router(t)


def _program(kind: str, *args):
    t, r = _system(args[0] if kind == "allreduce" else "ahbm_2sip")
    if kind == "probe":
        case, nbytes = args
        return build_catalogue(t, r)[case].program(t, r, nbytes)
    if kind == "allreduce":
        _, alg, ranks, nbytes = args
        return allreduce(t, r, nbytes, alg, ranks).program
    return gemm_case(t, r, 256, 256, 1024, "ref_ref", b_from="sip0.cube1.pe0").program


CASES = [("probe", "ucie_eastbound_8pe", 4 * KiB), ("probe", "sip_hotspot_pe0", 256),
         ("probe", "all_pe_cube0_to_pe0", 256), ("probe", "ctrl_hot_3", 16 * KiB),
         ("allreduce", "ahbm_2sip", "tree", "all_pes", 4 * KiB), ("allreduce", "ahbm_2sip", "lrab", None, 16),
         ("allreduce", "torus6", "tree", "cube_pe0", 96 * KiB), ("gemm",)]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_the_kernel_is_its_reference(case) -> None:
    """Every op's end and every agent's finish agree to 1e-9 (the two sum the same terms in other orders)."""
    p = _program(*case)
    ref, _ = queueing_schedule(p)
    got, events = network_schedule(p)
    assert events > 0
    np.testing.assert_allclose(got.op_end, ref.op_end, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.a_finish, ref.a_finish, rtol=1e-9, atol=1e-9)


def test_a_point_without_contention_is_exact() -> None:
    """No flow meets another: none is in the network, and every op keeps its isolated latency (parity P1)."""
    p = _program("probe", "SAME_CUBE_PE_LOCAL", 4 * KiB)
    got, events = network_schedule(p)
    assert events == 0
    np.testing.assert_array_equal(got.op_end, run_exact(p).op_end_ns)


def test_the_budget_stops_the_network_and_its_pools_grow() -> None:
    """sip_hotspot_pe0 at 1 MiB outgrows the first pools three times (2.4 M events): the last rerun finishes
    within 1e-5 of exact mode (6 ns of 983 us), and a budget below its events stops it."""
    p = _program("probe", "sip_hotspot_pe0", 1 << 20)
    got, events = network_schedule(p)
    assert got.a_finish.max() == pytest.approx(run_exact(p).agent_finish_ns.max(), rel=1e-5)
    with pytest.raises(NetworkBudgetExceeded, match="budget of"):
        network_schedule(p, max_events=events // 2)
