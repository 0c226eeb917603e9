"""The one number format (kbfast.report.formats): times scaled to their value, fractions as percents."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from kbfast.report.formats import duration, in_unit, percent, time_unit


@pytest.mark.parametrize("ns, text", [
    (0, "0 ns"), (16, "16.00 ns"), (403.0, "403.0 ns"), (999.96, "1.000 µs"), (4213.4, "4.213 µs"),
    (20_054_080.0, "20.05 ms"), (1.2345e9, "1.234 s"), (4e12, "4,000 s"), (-3500, "-3.500 µs"),
    (float("nan"), "-"), (None, "-"),
])
def test_duration_scales_the_unit_to_the_value(ns, text):
    assert duration(ns) == text


def test_a_column_takes_one_unit_from_its_largest_value():
    assert time_unit([3385.0, 29_142.0]) == ("µs", 1e3)
    assert time_unit([16.0, 4e6]) == ("ms", 1e6)
    assert time_unit([]) == ("ns", 1.0)
    assert time_unit([float("nan"), 12.0]) == ("ns", 1.0)
    assert in_unit(3385.0, "µs") == "3.385"
    assert in_unit(403.0, "ns") == "403.0"
    assert in_unit(float("inf"), "ms") == "-"


def test_percent():
    assert percent(0.919) == "91.9 %"
    assert percent(0.5, 2) == "50.00 %"
    assert percent(None) == "-"


@given(st.floats(min_value=1e-3, max_value=1e15, allow_nan=False))
def test_duration_reads_back_within_its_digits(ns):
    text = duration(ns)
    value, unit = text.rsplit(" ", 1)
    scale = {"ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit]
    back = float(value.replace(",", "")) * scale
    assert math.isclose(back, ns, rel_tol=1e-3)
    assert unit == "s" or float(value.replace(",", "")) < 1000
