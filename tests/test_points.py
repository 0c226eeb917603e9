"""Batched collective points (kbfast.measure.collective, kbfast.fast.rescale) equal one-at-a-time fast evaluations."""

from __future__ import annotations

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.errors import KbfastError
from kbfast.fast.evaluate import run_fast
from kbfast.measure.collective import allreduce_points
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce


@pytest.fixture(scope="module")
def torus6():
    t = build_tables(load_system("torus6"))
    return t, Router(t)


def _one(preset: str, size: int, kind: str, n_slots: int, algorithm: str = "lrab",
         tile_io: bool = True) -> tuple[float, float, float]:
    t = build_tables(load_system(preset, {"ipcq.buffer_kind": kind, "ipcq.n_slots": n_slots}))
    c = allreduce(t, Router(t), size, algorithm, tile_io=tile_io)
    f = run_fast(c.program)
    return (float(f.agent_finish_ns.max() - c.launch_ns), float(f.agent_finish_lo_ns.max() - c.launch_ns),
            float(f.agent_finish_hi_ns.max() - c.launch_ns))


def test_points_equal_single_evaluations(torus6) -> None:
    t, router = torus6
    sizes = np.array([96 * 1024, 16, 4096, 65536, 4096])
    kinds = ["tcm", "sram", "hbm", "sram", "tcm"]
    slots = [4, 1, 2, 8, 4]
    df = allreduce_points(t, router, sizes, kinds, slots)
    assert list(df["size"]) == list(sizes) and list(df["buffer_kind"]) == kinds
    for row in df.itertuples():
        point, lo, hi = _one("torus6", int(row.size), row.buffer_kind, int(row.n_slots))
        assert row.latency_ns == pytest.approx(point, rel=1e-12)
        assert row.latency_lo_ns == pytest.approx(lo, rel=1e-12)
        # the batch keeps the first (window-free) upper bound: valid, never tighter than run_fast's
        assert row.latency_hi_ns >= hi * (1 - 1e-12)
        assert row.latency_lo_ns <= row.latency_ns <= row.latency_hi_ns
        assert row.busbw_gbps > 0


@pytest.mark.parametrize("tile_io", [True, False])
def test_points_tile_io(torus6, tile_io: bool) -> None:
    """The tile load and store scale with the size like the messages: every point equals its own Program."""
    t, router = torus6
    sizes = [16, 3000, 96 * 1024]
    df = allreduce_points(t, router, sizes, ["tcm", "hbm", "sram"], 4, tile_io=tile_io)
    assert df["tile_io"].tolist() == [tile_io] * 3
    for row in df.itertuples():
        point, lo, _ = _one("torus6", int(row.size), row.buffer_kind, 4, tile_io=tile_io)
        assert row.latency_ns == pytest.approx(point, rel=1e-12) and row.latency_lo_ns == pytest.approx(lo, rel=1e-12)


def test_points_other_algorithm(torus6) -> None:
    t, router = torus6
    df = allreduce_points(t, router, [2048, 8192], "tcm", 4, algorithm="lrab_corner")
    for row in df.itertuples():
        assert row.latency_ns == pytest.approx(_one("torus6", int(row.size), "tcm", 4, "lrab_corner")[0], rel=1e-12)


def test_points_reject_bad_sizes(torus6) -> None:
    t, router = torus6
    with pytest.raises(KbfastError, match="> 0"):
        allreduce_points(t, router, [0, 16], "tcm", 4)
    with pytest.raises(ValueError):
        allreduce_points(t, router, [16], "dram", 4)


@pytest.mark.parametrize("algorithm, ranks", [("lrab", None), ("ring", "cube_pe0")])
def test_points_reuse_unblocked_rings(torus6, algorithm: str, ranks: str | None) -> None:
    """A size and kind whose runs blocked no SEND are reused for every n_slots above the ring peak;
    the batch equals one point per call (no reuse) bit for bit, blocked points included."""
    t, router = torus6
    sizes, kinds, slots = (np.array(a).ravel() for a in np.meshgrid([16, 4096, 96 * 1024], [0, 2], [16, 8, 1, 4, 2],
                                                                   indexing="ij"))
    kinds = np.array(["tcm", "sram", "hbm"])[kinds]
    df = allreduce_points(t, router, sizes, kinds, slots, algorithm, ranks)
    cols = ["latency_ns", "latency_lo_ns", "latency_hi_ns", "contention", "ring_peak"]
    for row in df.itertuples(index=False):
        one = allreduce_points(t, router, [row.size], [row.buffer_kind], [row.n_slots], algorithm, ranks)
        assert tuple(one.iloc[0][cols]) == tuple(getattr(row, c) for c in cols)
    free = df[df.n_slots > df.ring_peak]
    widest = df[df.n_slots == 16].set_index(["size", "buffer_kind"])
    assert len(free) > len(widest)           # some points did reuse an unblocked run
    for row in free.itertuples(index=False):
        assert row.latency_ns == widest.loc[(row.size, row.buffer_kind), "latency_ns"]
    if algorithm == "ring":
        assert (df.n_slots <= df.ring_peak).sum() > 0      # and the blocked ones were run
