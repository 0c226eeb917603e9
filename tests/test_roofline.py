"""The roofline of a model step (kbfast.measure.roofline): hand-derived floors of a small Program, and no
result below its floors, in either mode, over decode, prefill, batches, layouts and the TP MLP."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.ir import Op, ProgramBuilder
from kbfast.ir.tiling import plan_gemm
from kbfast.measure.registry import WORKLOADS, measure
from kbfast.measure.roofline import piece_floors
from kbfast.topology.builder import build_tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.commands import GemmCommand

KiB, MiB = 1024, 1024 * 1024


@pytest.fixture(scope="module")
def system():
    t = build_tables(load_system())
    return t, Router(t)


def test_floors_of_a_hand_built_piece(system) -> None:
    """One PE: a 1 MiB DMA read and a 256 KiB DMA write of its own slice, one GEMM command (32 x 64 x 4096, B
    streamed, A pinned), one 64 KiB IPCQ send to a PE of the next cube.  By hand, with the default system
    (256 GB/s PE link and controller, 4096 MAC/ns, 32 x 64 x 32 tiles, f16):

    * reads 1 MiB + B (4096 x 64 x 2 = 512 KiB), writes 256 KiB + C (32 x 64 x 2 = 4 KiB): the controller
      serves (1536 + 260) KiB in 7,184 ns; the read path 1,536 KiB in 6,144 ns: the floor is 7,184 ns;
    * compute: 128 tiles of 65,536 MACs at 4096 MAC/ns: 2,048 ns (useful 8,388,608 MACs: the same);
    * collective: 64 KiB over the slowest link of its route (a 128 GB/s UCIe connection): 512 ns."""
    t, r = system
    b = ProgramBuilder(t, r, name="hand")
    src, dst = pe_block(t, 0, 0, 0), pe_block(t, 0, 1, 0)
    a, z = b.pe_agent(src), b.pe_agent(dst)
    b.start(a)
    b.start(z)
    b.dma(a, hbm_ctrl(t, 0, 0, 0), MiB, write=False)
    b.dma(a, hbm_ctrl(t, 0, 0, 0), 256 * KiB, write=True)
    b.compute(a, 100.0)                             # the GEMM command's stand-in
    ch = b.channel(a, z)
    b.send(a, ch, 64 * KiB)
    b.recv(z, ch, 64 * KiB)
    p = b.build()
    op = int(np.flatnonzero(p.op_code == Op.COMPUTE)[0])
    cmd = GemmCommand(plan_gemm(t.spec.pe, 32, 64, 4096, a_pinned=True), 0, 0, 0)
    f = piece_floors(t, p, [cmd], np.array([op]), np.array([0]))
    assert f.hbm_ns == pytest.approx((1536 + 260) * KiB / 256.0, rel=1e-12)
    assert f.hbm_bytes == (1536 + 260) * KiB
    assert f.compute_ns == f.useful_compute_ns == pytest.approx(2048.0, rel=1e-12)
    assert f.collective_ns == pytest.approx(64 * KiB / 128.0, rel=1e-12) and f.collective_bytes == 64 * KiB


CASES = [("llama32_1b", {"phase": "decode", "batch": 1, "kv_len": 512}),
         ("llama32_1b", {"phase": "decode", "batch": 8, "kv_len": 512, "layout": "tp_cubes"}),
         ("llama32_1b", {"phase": "prefill", "seq": 64}),
         ("tp_mlp", {})]


@pytest.mark.parametrize(("model", "fields"), CASES, ids=[f"{m}-{'-'.join(map(str, f.values()))}" for m, f in CASES])
@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_no_result_falls_below_its_floors(system, model: str, fields: dict, mode: str) -> None:
    """Every piece's latency and the step's are at least each of their floors; the roofline's ratio is >= 1."""
    t, r = system
    w = {**WORKLOADS["model"].fields, "kind": "model", "model": model, "layers": 1 if model != "tp_mlp" else None,
         **fields}
    step = measure(t, r, w, mode).result
    for res in step.results[mode]:
        f = res.floors
        assert min(res.latency_ns - x for x in (f.hbm_ns, f.compute_ns, f.collective_ns)) >= 0, (res.piece.name, f)
        assert 0 < f.useful_compute_ns <= f.compute_ns
    roof = step.roofline()
    assert roof["ratio"] >= 1.0 and roof["bound_ns"] == max(roof[f"{k}_floor_ns"] for k in ("hbm", "compute",
                                                                                               "collective"))


def test_floors_are_the_same_in_both_modes(system) -> None:
    """The floors come from the piece, not the evaluator: fast and exact give the same."""
    t, r = system
    w = {**WORKLOADS["model"].fields, "kind": "model", "model": "llama32_1b", "layers": 1, "kv_len": 512}
    fast, exact = (measure(t, r, w, m).result for m in ("fast", "exact"))
    assert fast.floors() == exact.floors()


def test_the_json_report_carries_the_roofline(system) -> None:
    from typer.testing import CliRunner

    from kbfast.cli.main import app
    res = CliRunner().invoke(app, ["run", "model", "llama32_1b", "--layers", "1", "--kv-len", "512", "--format",
                                   "json"], catch_exceptions=False)
    roof = json.loads(res.stdout)["roofline"]
    assert set(roof) >= {"hbm_floor_ns", "compute_floor_ns", "useful_compute_floor_ns", "collective_floor_ns",
                         "bound", "bound_ns", "ratio"}
    assert roof["ratio"] >= 1.0


def test_the_table_writes_each_ratio_as_the_other_ratios_are(system) -> None:
    """The roofline table and its caption write the step over a floor as every ratio kbfast prints (``1.7x``,
    as a bound ratio's ``1.3x``), not ``1.7`` in one place and ``1.7 x`` in another."""
    from typer.testing import CliRunner

    from kbfast.cli.main import app
    res = CliRunner().invoke(app, ["run", "model", "llama32_1b", "--layers", "1", "--kv-len", "512"],
                             catch_exceptions=False)
    text = res.stdout[res.stdout.index("roofline (floors"):]
    assert re.search(r"^HBM: each byte once\s+[\d,.]+\s+[\d,.]+x$", text, re.M), text
    assert re.search(r"the step takes [\d,.]+x its roofline", " ".join(text.split())), text
