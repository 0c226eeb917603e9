"""The GEMM pipeline's max-plus recurrence (kbfast.fast.pipeline) against the naive one (tests/naive.py), and
its steady-state jumps against the full recurrence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kbfast.fast.pipeline import N_OUT, pipeline, pipeline_batch, pipeline_full
from naive import naive_pipeline

TIMES = st.one_of(st.sampled_from([0.0, 2.0, 4.0, 8.0, 16.0, 19.0, 20.0, 21.0, 29.0]),
                  st.floats(0.0, 40.0, allow_nan=False, width=32).map(float))


def args(n_mn, n_k, D, t0, a_hold, extra_a, b_hold, extra_b, fetch, comp_inner, extra_last, store, w_hold, extra_w):
    return (n_mn, n_k, D, t0, a_hold, a_hold + extra_a, b_hold, b_hold + extra_b, fetch, comp_inner,
            comp_inner + extra_last, store, w_hold, w_hold + extra_w)


CASES = st.tuples(st.integers(1, 40), st.integers(1, 70), st.integers(1, 4), st.sampled_from([0.0, 773.0]),
                  TIMES, TIMES, TIMES, TIMES, TIMES, TIMES, TIMES, TIMES, TIMES, TIMES)


def test_one_tile_by_hand() -> None:
    # A 0 -> free 19, data 21; B 19 -> data 40; FETCH 56; GEMM 72; STORE 76; write 76 + 21 = 97
    assert pipeline_full(1, 1, 2, 0.0, 19.0, 21.0, 19.0, 21.0, 16.0, 16.0, 16.0, 4.0, 21.0, 21.0) == (97.0, 97.0)


def test_depth_gate_by_hand() -> None:
    # B only, hold 19, done 21, FETCH 16, depth 1: tile t+1's read waits for tile t's FETCH end: reads at 0, 37;
    # FETCH 21 -> 37, 58 -> 74; GEMM 74 -> 90; STORE 94; write 115 (tests/test_gemm_pipeline.py, exact mode)
    assert pipeline_full(1, 2, 1, 0.0, 0.0, 0.0, 19.0, 21.0, 16.0, 16.0, 16.0, 4.0, 21.0, 21.0)[0] == 115.0


def test_reference_window() -> None:
    # load_ref 32x3072x32: 48 B tiles, start after the A load (773 ns): 773 + 971 (docs/gemm.md)
    out = pipeline(1, 48, 2, 773.0, 0.0, 0.0, 19.0, 21.0, 16.0, 16.0, 16.0, 4.0, 21.0, 21.0)
    assert out[0] == 1744.0 and out[3] == 48 * 19.0


@settings(max_examples=300, deadline=None)
@given(CASES)
def test_full_equals_naive(case) -> None:
    a = args(*case)
    assert pipeline_full(*a) == pytest.approx(naive_pipeline(*a), rel=0, abs=0)


@settings(max_examples=300, deadline=None)
@given(CASES)
def test_steady_state_equals_full(case) -> None:
    a = args(*case)
    end, first = pipeline_full(*a)
    out = pipeline(*a)
    assert out[0] == pytest.approx(end, rel=1e-9) and out[1] == pytest.approx(first, rel=1e-9)


def test_large_gemm_equals_full() -> None:
    """4096^3 at 32 x 64 x 32: 128 x 128 output tiles, 64 k tiles each (2^20 tiles)."""
    for a in [(16384, 64, 2, 0.0, 19.0, 21.0, 19.0, 21.0, 16.0, 16.0, 16.0, 4.0, 21.0, 21.0),
              (16384, 64, 2, 0.0, 0.0, 0.0, 19.0, 21.0, 16.0, 16.0, 19.5, 4.0, 21.0, 21.0),
              (16384, 64, 3, 5.0, 0.0, 0.0, 0.0, 0.0, 16.0, 7.25, 9.0, 4.0, 21.0, 29.0)]:
        end, first = pipeline_full(*a)
        out = pipeline(*a)
        assert out[0] == pytest.approx(end, rel=1e-9) and out[1] == first


def test_batch_equals_points() -> None:
    rng = np.random.default_rng(0)
    n = 200
    cols = [rng.integers(1, 30, n), rng.integers(1, 30, n), rng.integers(1, 4, n)] + \
        [rng.choice([0.0, 4.0, 16.0, 19.0, 21.0], n) for _ in range(11)]
    cols[4] = np.minimum(cols[4], cols[5])          # hold <= done
    cols[6] = np.minimum(cols[6], cols[7])
    cols[12] = np.minimum(cols[12], cols[13])
    out = pipeline_batch(*[np.asarray(c, np.int64) if i < 3 else np.asarray(c, np.float64)
                           for i, c in enumerate(cols)])
    assert out.shape == (n, N_OUT)
    for i in range(n):
        np.testing.assert_array_equal(out[i], pipeline(*[c[i] for c in cols]))


@pytest.mark.parametrize("n_mn, n_k", [(1, 32768), (3, 20000), (2, 16385)])
def test_more_k_tiles_than_the_buffer_equals_full(n_mn, n_k) -> None:
    """More k tiles than a stage stores (BUFFER): the compute slot's pattern (n_k - 1 inner tiles, one last) is
    longer than what it can watch for a period, so the rest runs tile by tile; the stages after it never read
    an unfinished sequence (32 x 32 x 2Mi divided by zero there)."""
    a = (n_mn, n_k, 2, 0.0, 0.0, 0.0, 19.0, 21.0, 16.0, 16.0, 16.0, 4.0, 21.0, 21.0)
    end, first = pipeline_full(*a)
    out = pipeline(*a)
    assert out[0] == end and out[1] == first
