"""First-run compiling (kbfast/measure/warmup.py, cli.common.first_run): a cached kernel is seen as cached, an empty
cache as empty, and a run with everything cached says nothing and starts no process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kbfast.measure import warmup
from kbfast.cli import common


def test_a_compiled_kernel_is_cached_and_a_warm_first_run_is_silent(capsys, monkeypatch) -> None:
    warmup.warm("exact")
    assert warmup.cached("exact")
    assert warmup.missing("exact", "exact") == []
    monkeypatch.setattr(warmup, "start", lambda kernels: (_ for _ in ()).throw(AssertionError("started")))
    common.first_run("exact")
    assert capsys.readouterr().err == ""


def test_an_empty_cache_is_seen_as_empty(tmp_path) -> None:
    code = "from kbfast.measure import warmup; print(','.join(warmup.missing(*warmup.KERNELS)))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out.split(",") == list(warmup.KERNELS)


def test_the_fast_group_compiles_in_the_second_process_when_there_is_more() -> None:
    assert warmup.split(["fast", "points", "exact"]) == (["exact"], ["fast", "points"])
    assert warmup.split(["fast", "points"]) == (["fast", "points"], [])
    assert warmup.split(["exact", "collectives"]) == (["exact", "collectives"], [])


def test_the_second_process_takes_what_shortens_the_longer_group() -> None:
    """The README main job's groups: the collectives follow the points kernel, the run bound and the replay stay."""
    from kbfast.cli.sweep import _kernels
    from kbfast.sweep.spec import load_spec

    k = {name: warmup.KERNELS[name][2] for name in warmup.KERNELS}
    here, there = warmup.split(_kernels(load_spec("seed36"), exact=False, check=True))
    assert (here, there) == (["runs", "exact"], ["points", "collectives"])
    assert max(k["runs"] + k["exact"], k["points"] + k["collectives"]) < k["runs"] + k["exact"] + k["collectives"]
    assert warmup.split(["exact", "fast"]) == (["exact"], ["fast"])     # moving it would only swap the sides


def test_a_sweep_of_points_measured_one_by_one_warms_the_unbatched_fast_path() -> None:
    """An all-reduce sweep batches its fluid points (the points kernel); its hybrid and network points run
    run_fast one by one, and a hybrid one may replay: their first run compiles those kernels, and says so."""
    from kbfast.cli.sweep import _kernels
    from kbfast.sweep.spec import parse_spec

    def kernels(**workload) -> set[str]:
        axes = workload.pop("axes", [{"grid": {"workload.size": ["16B", "4KiB"]}}])
        spec = parse_spec({"topology": "ahbm_2sip", "workload": {"kind": "allreduce", **workload}, "axes": axes})
        return set(_kernels(spec, exact=False, check=False))

    assert kernels(method="fluid") == {"runs", "points", "collectives"}
    assert kernels(method="network") == {"runs", "points", "collectives", "tight", "fast"}
    assert kernels(method="hybrid") == {"runs", "points", "collectives", "tight", "fast", "exact"}
    assert kernels(method="fluid", axes=[{"grid": {"workload.method": ["fluid", "hybrid"]}}]) == kernels(
        method="hybrid")


def test_the_stored_inputs_have_the_numba_types_of_todays_calls() -> None:
    """The fast group compiles from warm_inputs.pkl: stale inputs would compile a signature no run uses, and a
    first run would then compile the kernels twice."""
    from numba import typeof

    stored, fresh = warmup.load_inputs(), warmup.record_inputs()
    assert stored.keys() == fresh.keys() == warmup.CALL_SITES.keys()
    for kernel, args in fresh.items():
        assert [typeof(a) for a in stored[kernel]] == [typeof(a) for a in args], (
            f"{warmup.INPUTS.name} is stale for {kernel}: run python -m kbfast.measure.warmup --save-inputs")


def test_missing_inputs_fall_back_to_building_the_program(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(warmup, "INPUTS", tmp_path / "none.pkl")
    assert not warmup._warm_from_inputs("fast")
    called = []
    monkeypatch.setattr(warmup, "_warm_by_program", called.append)
    warmup.warm("points")
    assert called == ["points"]


def test_the_docs_state_the_first_run_estimate_the_command_prints() -> None:
    """README.md and docs/README.md give the README main job's first-run compile time; it is the estimate that
    the command prints, computed from warmup.KERNELS, so the three cannot drift apart."""
    import re
    from pathlib import Path

    from kbfast.cli.sweep import _kernels
    from kbfast.sweep.spec import load_spec

    secs = warmup.estimate_s(_kernels(load_spec("seed36"), exact=False, check=True))
    root = Path(__file__).resolve().parents[1]
    for doc in ("README.md", "docs/README.md"):
        text = " ".join((root / doc).read_text(encoding="utf-8").split())
        found = re.findall(r"about (\d+) s on 2 cores", text)
        assert found and set(found) == {str(secs)}, (doc, found)


def test_the_estimate_is_the_longer_of_the_two_groups() -> None:
    k = {name: warmup.KERNELS[name][2] for name in warmup.KERNELS}
    assert warmup.estimate_s(["fast", "points", "exact"]) == max(k["fast"] + k["points"] - warmup.LOOP_S, k["exact"])
    assert warmup.estimate_s(["fast", "points"]) == k["fast"] + k["points"] - warmup.LOOP_S   # one event loop
    assert warmup.estimate_s(["exact", "exact", "collectives"]) == k["exact"] + k["collectives"]


def test_kernels_compile_at_o1_unless_the_user_sets_numba_opt(tmp_path) -> None:
    """Importing kbfast makes LLVM's -O1 the process's default (kbfast/__init__.py); a NUMBA_OPT of the user's
    own, in the environment or in Numba's config file in the working directory, wins; ``bench --vs`` gives
    each revision its own default."""
    from kbfast.bench import pairing

    code = "import os, kbfast, numba; print(os.environ.get('KBFAST_DEFAULT_NUMBA_OPT'), int(numba.config.OPT))"

    def opt(env_opt: str | None, cwd) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_OPT", "KBFAST_DEFAULT_NUMBA_OPT")}
        env |= {} if env_opt is None else {"NUMBA_OPT": env_opt}
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                              check=True).stdout.split()

    assert opt(None, tmp_path) == ["1", "1"]
    assert opt("3", tmp_path) == ["None", "3"]
    (tmp_path / ".numba_config.yaml").write_text("opt: '2'\n")     # Numba reads its values as strings
    assert opt(None, tmp_path) == ["None", "2"]
    side = pairing.Side("base", tmp_path, "0" * 40, tmp_path / "cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NUMBA_OPT", "1")
        mp.setenv("KBFAST_DEFAULT_NUMBA_OPT", "1")
        env = pairing._env(side)
        assert "NUMBA_OPT" not in env and "KBFAST_DEFAULT_NUMBA_OPT" not in env
        mp.delenv("KBFAST_DEFAULT_NUMBA_OPT")
        assert pairing._env(side)["NUMBA_OPT"] == "1"                  # the user's own
