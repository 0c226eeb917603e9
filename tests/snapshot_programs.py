"""Snapshot the Programs of many collectives, and compare two snapshots array by array (bit for bit).

    python tests/snapshot_programs.py save DIR      # every case's Program arrays -> DIR/<case>.npz
    python tests/snapshot_programs.py compare A B   # identical arrays, names, phases and errors?

Used to check that a faster Program builder emits exactly the Programs of the original one.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import numpy as np

from kbfast.config import load_system
from kbfast.errors import KbfastError
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import ALGORITHMS, HOPS, allreduce, pe2pe

IO_ONE_CUBE = [{"id": "io0", "n_connections": 4,
                "cube_ports": [{"cube": [0, 0], "side": "N", "phy": "P0", "distance_mm": 2.0}]}]
SYSTEMS = {
    "ahbm_2sip": ("ahbm_2sip", None), "ring6": ("ring6", None), "torus6": ("torus6", None),
    "mesh6": ("mesh6", None), "torus16": ("torus16", None), "whatif_256": ("whatif_256", None),
    "mesh4_2x2": (None, {"sips.count": 4, "sips.topology": "mesh_2d_no_wrap", "sips.w": 2, "sips.h": 2,
                         "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2}),
    "torus6_3x2": (None, {"sips.count": 6, "sips.topology": "torus_2d", "sips.w": 3, "sips.h": 2,
                          "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 1}),
    "single_cube_ring3": (None, {"sips.count": 3, "sip.cube_mesh.w": 1, "sip.cube_mesh.h": 1,
                                 "sip.io_chiplets": IO_ONE_CUBE}),
    "single_cube_torus4": (None, {"sips.count": 4, "sips.topology": "torus_2d", "sip.cube_mesh.w": 1,
                                  "sip.cube_mesh.h": 1, "sip.io_chiplets": IO_ONE_CUBE}),
    "ring1_3x2": (None, {"sips.count": 1, "sip.cube_mesh.w": 3, "sip.cube_mesh.h": 2}),
    "sram_poll": ("torus6", {"ipcq.buffer_kind": "sram", "ipcq.backpressure": "poll"}),
}
BIG = {"whatif_256"}
SIZES = (2048, 3000, 96 * 1024)


def cases():
    """(system, label, thunk) for every case."""
    for sysname in SYSTEMS:
        for alg in ALGORITHMS:
            for ranks in (None, "cube_pe0", "all_pes"):
                if sysname in BIG and (alg in ("ring", "rs_ag") and ranks != "cube_pe0" or ranks == "all_pes"
                                       or (alg == "ring" and ranks == "cube_pe0")):
                    continue   # tens of millions of ops
                if sysname == "torus16" and alg == "ring" and ranks != "cube_pe0":
                    continue
                for nbytes in (SIZES if sysname not in BIG else SIZES[:1]):
                    yield sysname, f"{alg}-{ranks}-{nbytes}", (
                        lambda t, r, a=alg, k=ranks, n=nbytes: allreduce(t, r, n, a, ranks=k))
        yield sysname, "lrab-nolaunch", lambda t, r: allreduce(t, r, 4096, "lrab", launch=False)
        yield sysname, "bad-alg", lambda t, r: allreduce(t, r, 4096, "lrap")
        yield sysname, "bad-size", lambda t, r: allreduce(t, r, 0)
        for hop in list(HOPS) + ["h9"]:
            for raw in (False, True):
                yield sysname, f"pe2pe-{hop}-{raw}", lambda t, r, h=hop, d=raw: pe2pe(t, r, h, 4096, raw_dma=d)
        yield sysname, "pe2pe-noconsume", lambda t, r: pe2pe(t, r, "h1", 4096, consume=False)


def arrays(p) -> dict[str, np.ndarray]:
    out = {}
    for f in dataclasses.fields(p):
        v = getattr(p, f.name)
        if f.name == "tables":
            continue
        if f.name == "channels":
            for g in dataclasses.fields(v):
                out["ch." + g.name] = np.asarray(getattr(v, g.name))
        elif isinstance(v, np.ndarray):
            out[f.name] = v
        else:
            out[f.name] = np.asarray(repr(v))
    return out


def save(dest: str, only: str | None = None) -> None:
    os.makedirs(dest, exist_ok=True)
    tables = {}
    for sysname, label, fn in cases():
        if only and only not in f"{sysname}.{label}":
            continue
        if sysname not in tables:
            preset, over = SYSTEMS[sysname]
            t = build_tables(load_system(preset, overrides=over) if preset else load_system(overrides=over))
            tables = {sysname: (t, Router(t))}
        t, r = tables[sysname]
        t0 = time.perf_counter()
        try:
            c = fn(t, r)
            data = arrays(c.program)
            data["meta"] = np.asarray(repr((c.algorithm, c.n_ranks, c.nbytes, c.launch_ns)))
        except KbfastError as e:
            data = {"error": np.asarray(f"{type(e).__name__}: {e}")}
        np.savez(os.path.join(dest, f"{sysname}.{label}.npz"), **data)
        print(f"{sysname}.{label}: {time.perf_counter() - t0:.3f} s", flush=True)


def compare(a: str, b: str) -> int:
    bad = 0
    names = sorted(os.listdir(a))
    for name in names:
        x, y = np.load(os.path.join(a, name)), np.load(os.path.join(b, name))
        if set(x.files) != set(y.files):
            print(f"{name}: fields differ {sorted(set(x.files) ^ set(y.files))}")
            bad += 1
            continue
        for k in x.files:
            if x[k].dtype != y[k].dtype or x[k].shape != y[k].shape or x[k].tobytes() != y[k].tobytes():
                print(f"{name}: {k} differs")
                bad += 1
                break
    print(f"{len(names)} cases, {bad} differ")
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
