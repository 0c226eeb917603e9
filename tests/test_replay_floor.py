"""The exact replay's event floor (kbfast.sim.lowering.replay_events_floor): no replay takes fewer events, so a
budget below it is refused before the replay runs, with the same exception the replay would raise at the budget."""

from __future__ import annotations

import pytest

from kbfast.exact import run_exact
from kbfast.sim.diagnostics import ReplayBudgetExceeded
from kbfast.sim.lowering import replay_events_floor
from kbfast.workloads.collectives import allreduce
from kbfast.workloads.gemm import gemm_case
from kbfast.workloads.probe_catalogue import build_catalogue

# PE DMAs near and far (a store-and-forward pcie_ep on the way), hot spots, host writes and reads
PROBES = ("SAME_CUBE_PE_LOCAL", "REMOTE_CUBE_PE_REMOTE_WORST", "REMOTE_SIP", "ctrl_hot_3", "sip_hotspot_pe0",
          "H2D_CUBE4", "D2H_CUBE12")


@pytest.fixture(scope="module")
def catalogue(tables, router):
    return build_catalogue(tables, router)


def _programs(tables, router, catalogue):
    for name in PROBES:
        for nbytes in (16, 4096, 65_536):
            yield f"{name} {nbytes} B", catalogue[name].program(tables, router, nbytes)
    for nbytes in (16, 96 * 1024):
        yield f"all-reduce {nbytes} B", allreduce(tables, router, nbytes).program
    yield "GEMM 64x128x256 ref_ref", gemm_case(tables, router, 64, 128, 256, "ref_ref").program


def test_no_replay_takes_fewer_events_than_the_floor(tables, router, catalogue) -> None:
    for name, p in _programs(tables, router, catalogue):
        floor, events = replay_events_floor(p), run_exact(p).n_events
        assert 0 < floor <= events, (name, floor, events)


def test_a_budget_below_the_floor_is_refused_before_the_replay(tables, router, catalogue) -> None:
    """Refused at ``floor - 1`` (the replay would have stopped there too: it takes at least ``floor``); at the
    replay's own count the result is the unbudgeted one."""
    p = catalogue["sip_hotspot_pe0"].program(tables, router, 4096)
    floor = replay_events_floor(p)
    with pytest.raises(ReplayBudgetExceeded, match=f"needs at least {floor:,} events"):
        run_exact(p, max_events=floor - 1)
    full = run_exact(p)
    assert run_exact(p, max_events=full.n_events).makespan_ns == full.makespan_ns
