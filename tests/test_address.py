"""Tests for kbfast.address (ADR-0001 rev 2; spec_fabric §6, spec_memory §6.1-6.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.address import (
    DEFAULT_SLICE_BYTES,
    IOCPU_SUB_UNIT_BUDGET,
    MCPU_SUB_UNIT_BUDGET,
    PE_SUB_UNIT_BUDGET,
    AddressError,
    DecodedAddress,
    Domain,
    HbmTarget,
    IocpuSubUnit,
    McpuSubUnit,
    PeSubUnit,
    decode,
    decode_hbm_target,
    encode_cube_sram,
    encode_hbm,
    encode_iocpu,
    encode_mcpu_local,
    encode_pe_hbm,
    encode_pe_local,
    encode_ual,
    hbm_ctrl_name,
    pc_of_offset,
    pc_of_offsets,
)
from kbfast.errors import KbfastError

GiB = 1 << 30
FAST = settings(max_examples=200, deadline=None)

sips = st.integers(0, 15)
ahbm_dies = st.integers(0, 15)
io_dies = st.integers(16, 20)


def _top(sip: int, die: int) -> int:
    return (sip << 47) | (die << 42)


# ---------------------------------------------------------------------------
# Appendix A worked encodings (spec_fabric §6.3, spec_memory §6.1)
# ---------------------------------------------------------------------------


def test_appendix_a_hbm():
    pa = encode_hbm(2, 5, 0x1000)
    assert pa == (2 << 47) | (5 << 42) | (1 << 37) | 0x1000
    d = decode(pa)
    assert (d.domain, d.sip, d.die, d.offset, d.hbm_offset) == (Domain.HBM, 2, 5, 0x1000, 0x1000)
    assert d.domain == "hbm"
    assert d.cube == 5


def test_appendix_a_pe3_pe_tcm():
    pa = encode_pe_local(0, 0, 3, PeSubUnit.PE_TCM, 0x400)
    assert pa == (0 << 34) | (3 << 29) | (6 << 25) | 0x400
    d = decode(pa)
    assert d.domain is Domain.PE_LOCAL
    assert (d.pe_id, d.sub_unit, d.offset) == (3, PeSubUnit.PE_TCM, 0x400)
    assert d.sub_unit_name == "PE_TCM"
    # same local_offset on another sip / die
    assert encode_pe_local(1, 7, 3, 6, 0x400) == _top(1, 7) | (3 << 29) | (6 << 25) | 0x400


def test_appendix_a_mcpu_sram():
    pa = encode_mcpu_local(1, 3, McpuSubUnit.MCPU_SRAM, 0)
    assert pa == _top(1, 3) | (1 << 34) | (5 << 25)
    d = decode(pa)
    assert (d.domain, d.sip, d.die, d.sub_unit, d.offset) == (
        Domain.MCPU_LOCAL, 1, 3, McpuSubUnit.MCPU_SRAM, 0)
    assert d.pe_id is None


def test_appendix_a_iocpu_ipcq():
    pa = encode_iocpu(0, 17, IocpuSubUnit.IPCQ, 0x20000)
    assert pa == _top(0, 17) | (2 << 27) | 0x20000
    d = decode(pa)
    assert (d.domain, d.die, d.sub_unit, d.offset) == (Domain.IOCPU, 17, IocpuSubUnit.IPCQ, 0x20000)
    assert not d.is_ahbm


def test_appendix_a_ual():
    pa = encode_ual(0, 16, 4 * GiB)
    assert pa == _top(0, 16) | (4 * GiB)
    d = decode(pa)
    assert (d.domain, d.die, d.offset) == (Domain.UAL, 16, 4 * GiB)


def test_cube_sram_encoding():
    pa = encode_cube_sram(3, 9, 0x1234)
    assert pa == _top(3, 9) | (2 << 34) | 0x1234
    d = decode(pa)
    assert (d.domain, d.offset) == (Domain.CUBE_SRAM, 0x1234)


def test_iocpu_ual_boundary():
    assert decode(_top(0, 16) | (5 << 27) | ((64 << 20) - 1)).domain is Domain.IOCPU
    assert decode(_top(0, 16) | 0x8000_0000).domain is Domain.UAL
    with pytest.raises(AddressError, match="iocpu_sub_unit=15"):
        decode(_top(0, 16) | 0x7FFF_FFFF)


# ---------------------------------------------------------------------------
# Round trips, every domain
# ---------------------------------------------------------------------------


def _roundtrip(pa: int) -> DecodedAddress:
    assert 0 <= pa < 1 << 51
    d = decode(pa)
    assert d.pa == pa
    assert d.encode() == pa
    return d


@FAST
@given(sips, ahbm_dies, st.integers(0, (1 << 37) - 1))
def test_roundtrip_hbm(sip, die, off):
    d = _roundtrip(encode_hbm(sip, die, off))
    assert (d.domain, d.sip, d.die, d.offset) == (Domain.HBM, sip, die, off)


@FAST
@given(sips, ahbm_dies, st.integers(0, 7), st.integers(0, DEFAULT_SLICE_BYTES - 1))
def test_roundtrip_pe_hbm(sip, die, pe, local):
    pa = encode_pe_hbm(sip, die, pe, local)
    t = decode_hbm_target(pa)
    assert (t.sip, t.cube, t.pe_slice, t.slice_offset) == (sip, die, pe, local)
    # slice is a multiple of 2 KiB: global and PE-local PC bits agree (spec_memory §3.3)
    assert t.pc == (local >> 8) & 7


@st.composite
def pe_fields(draw):
    unit = draw(st.sampled_from(list(PeSubUnit)))
    off = draw(st.integers(0, PE_SUB_UNIT_BUDGET[unit] - 1))
    return draw(st.integers(0, 15)), unit, off


@FAST
@given(sips, ahbm_dies, pe_fields())
def test_roundtrip_pe_local(sip, die, fields):
    pe, unit, off = fields
    d = _roundtrip(encode_pe_local(sip, die, pe, unit, off))
    assert (d.domain, d.sip, d.die, d.pe_id, d.sub_unit, d.offset) == (
        Domain.PE_LOCAL, sip, die, pe, unit, off)


@st.composite
def mcpu_fields(draw):
    unit = draw(st.sampled_from(list(McpuSubUnit)))
    return unit, draw(st.integers(0, MCPU_SUB_UNIT_BUDGET[unit] - 1))


@FAST
@given(sips, ahbm_dies, mcpu_fields())
def test_roundtrip_mcpu_local(sip, die, fields):
    unit, off = fields
    d = _roundtrip(encode_mcpu_local(sip, die, unit, off))
    assert (d.domain, d.sip, d.die, d.sub_unit, d.offset) == (
        Domain.MCPU_LOCAL, sip, die, unit, off)


@FAST
@given(sips, ahbm_dies, st.integers(0, (32 << 20) - 1))
def test_roundtrip_cube_sram(sip, die, off):
    d = _roundtrip(encode_cube_sram(sip, die, off))
    assert (d.domain, d.sip, d.die, d.offset) == (Domain.CUBE_SRAM, sip, die, off)


@st.composite
def iocpu_fields(draw):
    unit = draw(st.sampled_from(list(IocpuSubUnit)))
    return unit, draw(st.integers(0, IOCPU_SUB_UNIT_BUDGET[unit] - 1))


@FAST
@given(sips, io_dies, iocpu_fields())
def test_roundtrip_iocpu(sip, die, fields):
    unit, off = fields
    d = _roundtrip(encode_iocpu(sip, die, unit, off))
    assert (d.domain, d.sip, d.die, d.sub_unit, d.offset) == (Domain.IOCPU, sip, die, unit, off)


@FAST
@given(sips, io_dies, st.integers(2 * GiB, (1 << 40) - 1))
def test_roundtrip_ual(sip, die, off):
    d = _roundtrip(encode_ual(sip, die, off))
    assert (d.domain, d.sip, d.die, d.offset) == (Domain.UAL, sip, die, off)


@FAST
@given(st.integers(0, (1 << 51) - 1))
def test_decode_any_pa_is_valid_or_address_error(pa):
    """Any 51-bit value either decodes and re-encodes exactly, or raises AddressError."""
    try:
        d = decode(pa)
    except AddressError:
        return
    assert d.encode() == pa


# ---------------------------------------------------------------------------
# HBM target and PC selection (spec_memory §3.3, §6.2)
# ---------------------------------------------------------------------------


def test_hbm_target_and_node_name():
    off = 3 * DEFAULT_SLICE_BYTES + 0x700
    t = decode_hbm_target(encode_hbm(2, 5, off))
    assert t == HbmTarget(sip=2, cube=5, pe_slice=3, pc=7, slice_offset=0x700)
    assert hbm_ctrl_name(t) == "sip2.cube5.hbm_ctrl.pe3"
    assert DEFAULT_SLICE_BYTES == 6 * GiB


def test_hbm_target_pc_bits_10_8():
    for pc in range(8):
        off = (pc << 8) | 0xFF | (0x5A << 11)
        assert decode_hbm_target(encode_hbm(0, 0, off)).pc == pc


def test_hbm_target_custom_params():
    off = 5 * 1024 + 3 * 128
    t = decode_hbm_target(encode_hbm(0, 1, off), slice_bytes=4096, burst_bytes=128,
                          n_pcs=4, n_slices=None)
    assert (t.pe_slice, t.slice_offset, t.pc) == (1, off - 4096, (off >> 7) & 3)


@FAST
@given(st.integers(0, (1 << 37) - 2048 * 64), st.integers(1, 64))
def test_consecutive_bursts_cycle_all_pcs(base, n):
    base -= base % 2048  # 2 KiB aligned block
    offs = base + 256 * np.arange(8 * n, dtype=np.int64)
    pcs = pc_of_offsets(offs)
    assert pcs.dtype == np.int64
    assert np.array_equal(pcs, np.tile(np.arange(8), n))
    # any 8 consecutive bursts (aligned or not) cover every PC exactly once
    start = base + 256 * (n % 8)
    assert sorted(pc_of_offsets(start + 256 * np.arange(8, dtype=np.int64))) == list(range(8))


@FAST
@given(st.integers(0, (1 << 36)), st.integers(1, 256))
def test_2kib_stride_hits_one_pc(base, k):
    offs = base + 2048 * k * np.arange(64, dtype=np.int64)
    pcs = pc_of_offsets(offs)
    assert np.all(pcs == pc_of_offset(base))
    assert len(np.unique(pcs)) == 1


@FAST
@given(st.lists(st.integers(0, (1 << 37) - 1), min_size=1, max_size=32),
       st.sampled_from([32, 64, 256, 1024]), st.sampled_from([1, 2, 4, 8, 16]))
def test_pc_of_offsets_matches_scalar(offs, burst, n_pcs):
    arr = np.array(offs, dtype=np.int64)
    vec = pc_of_offsets(arr, burst, n_pcs)
    assert vec.dtype == np.int64 and vec.shape == arr.shape
    assert vec.tolist() == [pc_of_offset(o, burst, n_pcs) for o in offs]


# ---------------------------------------------------------------------------
# Error cases: message must name the field
# ---------------------------------------------------------------------------


def _raises(field: str, fn, *args, **kwargs):
    with pytest.raises(AddressError, match=field) as ei:
        fn(*args, **kwargs)
    assert isinstance(ei.value, ValueError)
    assert isinstance(ei.value, KbfastError)
    return str(ei.value)


@pytest.mark.parametrize(
    "pa, field",
    [
        (_top(0, 0) | (1 << 38) | (1 << 37), r"mbz\[41:38\]"),       # AHBM MBZ
        (_top(0, 3) | (1 << 41), r"mbz\[41:38\]"),
        (_top(0, 0) | (1 << 33), r"mbz\[33\]"),                      # PE_LOCAL MBZ
        (_top(0, 0) | (1 << 34) | (1 << 30), r"mbz\[33:30\]"),       # MCPU MBZ
        (_top(0, 0) | (2 << 34) | (1 << 25), r"mbz\[33:25\]"),       # SRAM MBZ
        (_top(0, 16) | (1 << 40), r"mbz\[41:40\]"),                  # IO MBZ
    ],
)
def test_mbz_set(pa, field):
    _raises(field, decode, pa)


@pytest.mark.parametrize(
    "pa, field",
    [
        (_top(0, 21), "die_id=21"),
        (_top(15, 31), "die_id=31"),
        (_top(0, 0) | (3 << 34), "resource_kind=3"),
        (_top(0, 0) | (7 << 34), "resource_kind=7"),
        (_top(0, 0) | (7 << 25), "pe_sub_unit=7"),
        (_top(0, 0) | (15 << 25), "pe_sub_unit=15"),
        (_top(0, 0) | (1 << 34) | (6 << 25), "mcpu_sub_unit=6"),
        (_top(0, 16) | (6 << 27), "iocpu_sub_unit=6"),
        (1 << 51, "pa="),
        (-1, "pa="),
    ],
)
def test_decode_reserved_or_out_of_range(pa, field):
    _raises(field, decode, pa)


@pytest.mark.parametrize(
    "pa, unit",
    [
        (_top(0, 0) | (0 << 25) | 0x2000, "PE_CPU_DTCM"),            # 8 KiB budget
        (_top(0, 0) | (6 << 25) | (2 << 20), "PE_TCM"),              # 2 MiB budget
        (_top(0, 0) | (1 << 34) | (5 << 25) | (10 << 20), "MCPU_SRAM"),
        (_top(0, 17) | (3 << 27) | 0x2000, "IOCPU_SFR"),
    ],
)
def test_decode_budget_overflow(pa, unit):
    msg = _raises("sub_offset", decode, pa)
    assert unit in msg


def test_encode_errors_name_field():
    _raises("sip_id=16", encode_hbm, 16, 0, 0)
    _raises("sip_id", encode_hbm, -1, 0, 0)
    _raises("die_id=16", encode_hbm, 0, 16, 0)
    _raises("die_id=15", encode_iocpu, 0, 15, 0, 0)
    _raises("die_id=21", encode_ual, 0, 21, 4 * GiB)
    _raises("hbm_offset", encode_hbm, 0, 0, 1 << 37)
    _raises("hbm_offset", encode_hbm, 0, 0, -1)
    _raises("pe_id=16", encode_pe_local, 0, 0, 16, 6, 0)
    _raises("pe_sub_unit=7", encode_pe_local, 0, 0, 0, 7, 0)
    _raises("mcpu_sub_unit=6", encode_mcpu_local, 0, 0, 6, 0)
    _raises("iocpu_sub_unit=6", encode_iocpu, 0, 16, 6, 0)
    _raises("sram_offset", encode_cube_sram, 0, 0, 32 << 20)
    _raises("chiplet_offset", encode_ual, 0, 16, 2 * GiB - 1)
    _raises("chiplet_offset", encode_ual, 0, 16, 1 << 40)
    _raises("pe_id", encode_pe_hbm, 0, 0, 8, 0)
    _raises("local_offset", encode_pe_hbm, 0, 0, 0, DEFAULT_SLICE_BYTES)
    _raises("sip_id", encode_hbm, 1.0, 0, 0)
    _raises("sip_id", encode_hbm, True, 0, 0)


def test_encode_budget_overflow():
    msg = _raises("sub_offset", encode_pe_local, 0, 0, 0, PeSubUnit.PE_TCM, 2 << 20)
    assert "PE_TCM" in msg and "0x200000" in msg
    _raises("sub_offset", encode_pe_local, 0, 0, 0, PeSubUnit.IPCQ, 256 * 1024)
    _raises("sub_offset", encode_mcpu_local, 0, 0, McpuSubUnit.MCPU_SFR, 8 * 1024)
    _raises("sub_offset", encode_iocpu, 0, 16, IocpuSubUnit.IO_SRAM, 64 << 20)
    _raises("sub_offset", encode_iocpu, 0, 16, IocpuSubUnit.IPCQ, -1)
    # last byte of each budget is fine
    encode_pe_local(0, 0, 0, PeSubUnit.PE_TCM, (2 << 20) - 1)
    encode_iocpu(0, 16, IocpuSubUnit.IO_SRAM, (64 << 20) - 1)


@pytest.mark.parametrize("bad", [0, 3, 6, 100, -256])
def test_non_power_of_two(bad):
    pa = encode_hbm(0, 0, 0x1000)
    _raises(f"burst_bytes={bad}", decode_hbm_target, pa, burst_bytes=bad)
    _raises(f"n_pcs={bad}", decode_hbm_target, pa, n_pcs=bad)
    _raises(f"burst_bytes={bad}", pc_of_offsets, np.arange(4, dtype=np.int64), bad, 8)
    _raises(f"n_pcs={bad}", pc_of_offsets, np.arange(4, dtype=np.int64), 256, bad)
    _raises("burst_bytes", pc_of_offset, 0, bad, 8)


def test_hbm_target_errors():
    _raises("addr_space", decode_hbm_target, encode_cube_sram(0, 0, 0))
    _raises("slice_bytes", decode_hbm_target, encode_hbm(0, 0, 0), slice_bytes=0)
    # beyond the configured 48 GiB (8 slices) but inside the 128 GiB window
    pa = encode_hbm(0, 0, 48 * GiB)
    msg = _raises("hbm_offset", decode_hbm_target, pa)
    assert "n_slices=8" in msg
    assert decode_hbm_target(pa, n_slices=None).pe_slice == 8
    assert decode(pa).domain is Domain.HBM  # plain decode never checks capacity


def test_pc_of_offsets_input_checks():
    _raises("offsets", pc_of_offsets, np.array([0.0, 256.0]))
    _raises("offsets", pc_of_offsets, np.array([-256], dtype=np.int64))
    out = pc_of_offsets(np.array([], dtype=np.int64))
    assert out.dtype == np.int64 and out.size == 0


def test_decoded_is_frozen():
    d = decode(encode_hbm(0, 0, 0))
    with pytest.raises(Exception):
        d.sip = 1  # type: ignore[misc]
    t = decode_hbm_target(encode_hbm(0, 0, 0))
    with pytest.raises(Exception):
        t.pc = 1  # type: ignore[misc]


def test_domain_accessors_reject_wrong_domain():
    d = decode(encode_iocpu(0, 16, 0, 0))
    _raises("die_id=16", lambda: d.cube)
    _raises("domain=iocpu", lambda: d.hbm_offset)
