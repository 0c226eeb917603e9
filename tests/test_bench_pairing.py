"""``kbfast bench``: each figure against its design target (docs/bench.md), and ``--vs REV`` pairing (kbfast.bench)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from kbfast.bench import BENCHMARKS, pairing
from kbfast.bench.benchmarks import TARGETS, NO_TARGET, row
from kbfast.cli.main import app

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "bench.md"


def test_a_row_meets_its_target_by_its_direction():
    fast = row("one all-reduce", 0.2, "s", "allreduce_1024")
    slow = row("one all-reduce", 0.3, "s", "allreduce_1024")
    rate = row("grid", 2e6, "points/min", "mixed_grid")
    assert fast.ok and not slow.ok and rate.ok and rate.higher_is_better and not fast.higher_is_better
    assert fast.target == TARGETS["allreduce_1024"].text
    none = row("overhead", 7.0, "%")
    assert none.ok is None and none.target == NO_TARGET and not none.higher_is_better
    cut = row("model sweep", 30.0, "s", "model_sweep", scale=0.5)         # 5,000 of the 10^4 points: 30 s
    assert cut.ok is True and "x 0.5" in cut.target
    with pytest.raises(AssertionError):                                    # a rate's target on a time
        row("grid", 1.0, "s", "mixed_grid")


def test_every_target_is_in_the_docs():
    """docs/bench.md lists the design targets as kbfast prints them."""
    text = DESIGN.read_text()
    for key, target in TARGETS.items():
        assert f"| {target.text} |" in text, key


def test_the_comparison_is_a_slowdown_for_times_and_rates():
    runs = pd.DataFrame([
        {"name": "step", "value": v, "unit": "s", "side": side, "round": r, "higher_is_better": False}
        for side, vals in (("base", (1.0, 1.2)), ("this", (1.3, 1.3))) for r, v in zip((1, 2), vals)] + [
        {"name": "grid", "value": v, "unit": "points/min", "side": side, "round": 1, "higher_is_better": True}
        for side, v in (("base", 100.0), ("this", 125.0))] + [
        {"name": "gone", "value": 1.0, "unit": "s", "side": "base", "round": 1, "higher_is_better": False}])
    out = pairing.compare(runs).set_index("name")
    assert out.loc["step", "slowdown"] == pytest.approx(1.3 / 1.1) and out.loc["step", "regression"]
    assert out.loc["grid", "slowdown"] == pytest.approx(0.8) and not out.loc["grid", "regression"]
    assert "gone" not in out.index                                         # one side only: nothing to pair


def test_each_side_goes_first_in_every_other_round(monkeypatch):
    """The second run of a round measured about 4 % slower whichever side it was, so the sides take turns
    going first: base, this, then this, base."""
    ran = []

    def run_side(side, names, out):
        ran.append(side)
        return pd.DataFrame([{"name": "step", "value": 1.0, "unit": "s"}])

    monkeypatch.setattr(pairing, "run_side", run_side)
    base, this = (SimpleNamespace(label=label) for label in ("base tree", "this tree"))
    runs = pairing.paired_runs(base, this, ["model"], 3)
    assert ran == [base, this, this, base, base, this]
    assert runs[["side", "round"]].values.tolist() == [["base", 1], ["this", 1], ["this", 2], ["base", 2],
                                                       ["base", 3], ["this", 3]]


def test_vs_refuses_what_is_no_revision():
    res = CliRunner().invoke(app, ["bench", "--vs", "no-such-revision-xyz", "--only", "routes",
                                   "--out", "/tmp/kbfast_vs_test.csv"])
    assert res.exit_code == 2 and "not a revision" in res.output and "hint" in res.output


def test_the_base_worktree_is_kept_in_the_git_directory():
    try:
        this = pairing.this_tree()
    except Exception as err:            # an installed copy, or a checkout without git
        pytest.skip(f"not a git checkout: {err}")
    base = pairing.base_tree("HEAD", this)
    try:
        assert (base.root / "kbfast" / "bench").is_dir() and "kbfast-bench" in str(base.root)
        assert base.numba_cache is not None and base.commit == this.commit
        assert pairing.base_tree("HEAD", this).root == base.root                  # reused
        assert set(pairing.benchmarks_of(base)) >= set(BENCHMARKS) - {"model_point", "gemm_sweep"}
        # the base reads its own topologies and models, not the editable install's
        code = "import kbfast, kbfast.topologies as t, kbfast.models as m; print(kbfast.__file__, t.__file__, m.__file__)"
        for cmd in (pairing._command(base, "-c", code), [sys.executable, "-c", code]):   # and a child's child
            done = subprocess.run(cmd, env=pairing._env(base), capture_output=True, text=True, check=True)
            assert all(path.startswith(str(base.root)) for path in done.stdout.split()), done.stdout
    finally:                                             # a checkout of the commit under test: not kept
        subprocess.run(["git", "-C", str(this.root), "worktree", "remove", "--force", str(base.root)], check=True)
        shutil.rmtree(base.numba_cache, ignore_errors=True)      # nor its cache
