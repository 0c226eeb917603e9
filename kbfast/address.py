"""51-bit physical address layout, ADR-0001 rev 2 (spec_fabric §6, spec_memory §6.1-6.2).

Top level (spec_fabric §6.1)::

    [50:47] sip_id (4)   [46:42] die_id (5)   [41:0] local_offset (42)

    die_id 0..15  AHBM die (cube index == die_id)
    die_id 16..20 IO chiplet
    die_id 21..31 reserved (decode raises AddressError)

AHBM die (spec_fabric §6.2)::

    [41:38] MBZ   [37] addr_space (1 = HBM, 0 = local resource)
    HBM:       [36:0] hbm_offset (128 GiB decode window)
    resource:  [36:34] resource_kind (0 PE_LOCAL, 1 MCPU_LOCAL, 2 CUBE_SRAM)
               [33:0]  kind_local
      PE_LOCAL:   [33] MBZ, [32:29] pe_id, [28:25] pe_sub_unit, [24:0] sub_offset
      MCPU_LOCAL: [33:30] MBZ, [29:25] mcpu_sub_unit, [24:0] sub_offset
      CUBE_SRAM:  [33:25] MBZ, [24:0] sram_offset

IO chiplet die (spec_fabric §6.3)::

    [41:40] MBZ   [39:0] chiplet_offset
    chiplet_offset <  2 GiB: IOCPU, [30:27] iocpu_sub_unit, [26:0] sub_offset
    chiplet_offset >= 2 GiB: UAL (sub-layout TBD; the offset is kept whole)

Decoding is purely positional (ADR-0001 D3): it checks MBZ bits, reserved codes
and sub-unit budgets, never topology capacity.  Capacity against the configured
HBM size is checked only by :func:`decode_hbm_target` (``n_slices``) and
:func:`encode_pe_hbm`, which take topology parameters (D4).

Every validation failure raises :class:`AddressError` (a ``ValueError``) whose
message starts with ``<field>=<value>``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Optional

import numpy as np

from kbfast.errors import KbfastError

__all__ = [
    "AddressError",
    "Domain",
    "ResourceKind",
    "PeSubUnit",
    "McpuSubUnit",
    "IocpuSubUnit",
    "PE_SUB_UNIT_BUDGET",
    "MCPU_SUB_UNIT_BUDGET",
    "IOCPU_SUB_UNIT_BUDGET",
    "DecodedAddress",
    "HbmTarget",
    "encode_hbm",
    "encode_pe_hbm",
    "encode_pe_local",
    "encode_mcpu_local",
    "encode_cube_sram",
    "encode_iocpu",
    "encode_ual",
    "decode",
    "decode_hbm_target",
    "pc_of_offset",
    "pc_of_offsets",
    "hbm_ctrl_name",
    "PA_BITS",
    "N_SIPS",
    "N_AHBM_DIES",
    "IO_DIE_FIRST",
    "IO_DIE_LAST",
    "HBM_WINDOW_BYTES",
    "CUBE_SRAM_BYTES",
    "IOCPU_REGION_BYTES",
    "IO_CHIPLET_BYTES",
    "DEFAULT_HBM_TOTAL_BYTES",
    "DEFAULT_N_SLICES",
    "DEFAULT_SLICE_BYTES",
    "DEFAULT_BURST_BYTES",
    "DEFAULT_N_PCS",
]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40


class AddressError(KbfastError, ValueError):
    """Invalid physical address or address field; the message starts ``<field>=<value>``.

    A ``ValueError`` and a user-facing ``KbfastError`` (CLI exit code 2).
    """


# --------------------------------------------------------------------------
# Bit layout constants (spec_fabric §6.1-6.3)
# --------------------------------------------------------------------------

PA_BITS = 51

SIP_SHIFT, SIP_BITS = 47, 4            # [50:47]
DIE_SHIFT, DIE_BITS = 42, 5            # [46:42]
LOCAL_BITS = 42                        # [41:0]

N_SIPS = 1 << SIP_BITS                 # 16
N_AHBM_DIES = 16                       # die 0..15 are AHBM cubes
IO_DIE_FIRST, IO_DIE_LAST = 16, 20     # IO chiplets; 21..31 reserved

# AHBM die
AHBM_MBZ_SHIFT, AHBM_MBZ_BITS = 38, 4  # [41:38]
ADDR_SPACE_SHIFT = 37                  # [37]
HBM_OFFSET_BITS = 37                   # [36:0]
HBM_WINDOW_BYTES = 1 << HBM_OFFSET_BITS  # 128 GiB decode window
RESOURCE_KIND_SHIFT, RESOURCE_KIND_BITS = 34, 3  # [36:34]
KIND_LOCAL_BITS = 34                   # [33:0]

# PE_LOCAL
PE_MBZ_SHIFT, PE_MBZ_BITS = 33, 1      # [33]
PE_ID_SHIFT, PE_ID_BITS = 29, 4        # [32:29]
PE_SUB_SHIFT, PE_SUB_BITS = 25, 4      # [28:25]
SUB_OFFSET_BITS = 25                   # [24:0], 32 MiB slot

# MCPU_LOCAL
MCPU_MBZ_SHIFT, MCPU_MBZ_BITS = 30, 4  # [33:30]
MCPU_SUB_SHIFT, MCPU_SUB_BITS = 25, 5  # [29:25]

# CUBE_SRAM
SRAM_MBZ_SHIFT, SRAM_MBZ_BITS = 25, 9  # [33:25]
CUBE_SRAM_BYTES = 1 << SUB_OFFSET_BITS  # flat 32 MiB

# IO chiplet die
IO_MBZ_SHIFT, IO_MBZ_BITS = 40, 2      # [41:40]
CHIPLET_OFFSET_BITS = 40               # [39:0]
IO_CHIPLET_BYTES = 1 << CHIPLET_OFFSET_BITS  # 1 TiB used
IOCPU_REGION_BYTES = 0x8000_0000       # 2 GiB; >= this is UAL
IOCPU_SUB_SHIFT, IOCPU_SUB_BITS = 27, 4  # [30:27]
IOCPU_SUB_OFFSET_BITS = 27             # [26:0], 128 MiB slot

# HBM topology defaults (spec_fabric §3.4 / §6.4; spec_memory §6.2)
DEFAULT_HBM_TOTAL_BYTES = 48 * GiB     # hbm_total_gb_per_cube
DEFAULT_N_SLICES = 8                   # hbm_slices_per_cube (one per PE)
DEFAULT_SLICE_BYTES = DEFAULT_HBM_TOTAL_BYTES // DEFAULT_N_SLICES  # 6 GiB
DEFAULT_BURST_BYTES = 256              # burst_bytes (== flit_bytes)
DEFAULT_N_PCS = 8                      # hbm_channels_per_pe


def _mask(bits: int) -> int:
    return (1 << bits) - 1


# --------------------------------------------------------------------------
# Domains, resource kinds, sub-units and budgets (spec_fabric §6.2-6.3)
# --------------------------------------------------------------------------


class Domain(str, Enum):
    """Decoded address domain (compares equal to its string value)."""

    HBM = "hbm"
    PE_LOCAL = "pe_local"
    MCPU_LOCAL = "mcpu_local"
    CUBE_SRAM = "cube_sram"
    IOCPU = "iocpu"
    UAL = "ual"

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return self.value


class ResourceKind(IntEnum):
    """AHBM resource window ``resource_kind`` [36:34]; 3..7 reserved (spec_fabric §6.2)."""

    PE_LOCAL = 0
    MCPU_LOCAL = 1
    CUBE_SRAM = 2


class PeSubUnit(IntEnum):
    """PE_LOCAL ``pe_sub_unit`` [28:25]; 7..15 reserved (spec_fabric §6.2)."""

    PE_CPU_DTCM = 0
    MATH_ENGINE_DTCM = 1
    IPCQ = 2
    PE_CPU_SFR = 3
    MATH_ENGINE_SFR = 4
    DMA_ENGINE_SFR = 5
    PE_TCM = 6


class McpuSubUnit(IntEnum):
    """MCPU_LOCAL ``mcpu_sub_unit`` [29:25]; 6..31 reserved (spec_fabric §6.2)."""

    MCPU_ITCM = 0
    MCPU_DTCM = 1
    IPCQ = 2
    MCPU_SFR = 3
    MCPU_DMA_SFR = 4
    MCPU_SRAM = 5


class IocpuSubUnit(IntEnum):
    """IOCPU ``iocpu_sub_unit`` [30:27]; 6..15 reserved (spec_fabric §6.3)."""

    IOCPU_ITCM = 0
    IOCPU_DTCM = 1
    IPCQ = 2
    IOCPU_SFR = 3
    IO_DMA_SFR = 4
    IO_SRAM = 5


PE_SUB_UNIT_BUDGET: dict[PeSubUnit, int] = {
    PeSubUnit.PE_CPU_DTCM: 8 * KiB,
    PeSubUnit.MATH_ENGINE_DTCM: 8 * KiB,
    PeSubUnit.IPCQ: 256 * KiB,
    PeSubUnit.PE_CPU_SFR: 16 * KiB,
    PeSubUnit.MATH_ENGINE_SFR: 16 * KiB,
    PeSubUnit.DMA_ENGINE_SFR: 192 * KiB,
    PeSubUnit.PE_TCM: 2 * MiB,
}

MCPU_SUB_UNIT_BUDGET: dict[McpuSubUnit, int] = {
    McpuSubUnit.MCPU_ITCM: 512 * KiB,
    McpuSubUnit.MCPU_DTCM: 512 * KiB,
    McpuSubUnit.IPCQ: 256 * KiB,
    McpuSubUnit.MCPU_SFR: 8 * KiB,
    McpuSubUnit.MCPU_DMA_SFR: 16 * KiB,
    McpuSubUnit.MCPU_SRAM: 10 * MiB,
}

IOCPU_SUB_UNIT_BUDGET: dict[IocpuSubUnit, int] = {
    IocpuSubUnit.IOCPU_ITCM: 512 * KiB,
    IocpuSubUnit.IOCPU_DTCM: 512 * KiB,
    IocpuSubUnit.IPCQ: 2 * MiB,
    IocpuSubUnit.IOCPU_SFR: 8 * KiB,
    IocpuSubUnit.IO_DMA_SFR: 16 * KiB,
    IocpuSubUnit.IO_SRAM: 64 * MiB,
}


# --------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------


def _as_int(name: str, value) -> int:
    if isinstance(value, bool):
        raise AddressError(f"{name}={value!r} must be an integer, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise AddressError(f"{name}={value!r} must be an integer") from None


def _check_range(name: str, value, lo: int, hi: int) -> int:
    """Return ``value`` as int, requiring ``lo <= value <= hi`` (inclusive)."""
    v = _as_int(name, value)
    if not lo <= v <= hi:
        if hi < 4096:
            raise AddressError(f"{name}={v} out of range [{lo}, {hi}]")
        raise AddressError(f"{name}={v:#x} ({v}) out of range [{lo:#x}, {hi:#x}]")
    return v


def _check_mbz(value: int, shift: int, bits: int, where: str) -> None:
    field = (value >> shift) & _mask(bits)
    if field:
        hi = shift + bits - 1
        rng = f"[{hi}:{shift}]" if bits > 1 else f"[{shift}]"
        raise AddressError(
            f"mbz{rng}={field:#x} must be zero ({where}, bits {rng} of local_offset)"
        )


def _sub_unit(enum_cls, budgets: dict, name: str, value) -> IntEnum:
    v = _as_int(name, value)
    try:
        unit = enum_cls(v)
    except ValueError:
        hi = max(budgets)
        raise AddressError(
            f"{name}={v} is reserved or out of range (valid 0..{int(hi)})"
        ) from None
    return unit


def _check_budget(name: str, value, unit: IntEnum, budget: int) -> int:
    v = _as_int(name, value)
    if v < 0:
        raise AddressError(f"{name}={v} must be non-negative")
    if v >= budget:
        raise AddressError(
            f"{name}={v:#x} exceeds {unit.name} budget {budget:#x} ({budget} B)"
        )
    return v


def _log2_pow2(name: str, value) -> int:
    v = _as_int(name, value)
    if v <= 0 or v & (v - 1):
        raise AddressError(f"{name}={v} must be a positive power of two")
    return v.bit_length() - 1


def _ahbm_die(die) -> int:
    return _check_range("die_id", die, 0, N_AHBM_DIES - 1)


def _io_die(die) -> int:
    return _check_range("die_id", die, IO_DIE_FIRST, IO_DIE_LAST)


def _top(sip, die: int, local_offset: int) -> int:
    s = _check_range("sip_id", sip, 0, N_SIPS - 1)
    return (s << SIP_SHIFT) | (die << DIE_SHIFT) | local_offset


# --------------------------------------------------------------------------
# Encoders
# --------------------------------------------------------------------------


def encode_hbm(sip: int, die: int, hbm_offset: int) -> int:
    """HBM PA: ``(sip<<47)|(die<<42)|(1<<37)|hbm_offset`` (spec_fabric §6.2).

    ``hbm_offset`` must lie in the 128 GiB decode window [36:0]; capacity
    against the configured HBM size is not checked here (ADR-0001 D4).
    """
    d = _ahbm_die(die)
    off = _check_range("hbm_offset", hbm_offset, 0, HBM_WINDOW_BYTES - 1)
    return _top(sip, d, (1 << ADDR_SPACE_SHIFT) | off)


def encode_pe_hbm(
    sip: int,
    die: int,
    pe_id: int,
    local_offset: int,
    *,
    slice_bytes: int = DEFAULT_SLICE_BYTES,
    n_slices: int = DEFAULT_N_SLICES,
) -> int:
    """HBM PA of PE ``pe_id``'s slice: ``hbm_offset = pe_id*slice_bytes + local_offset``.

    spec_memory §6.2 (ADR-0048 D3 inverse).  Checks ``pe_id < n_slices`` and
    ``local_offset < slice_bytes`` (topology capacity, ADR-0001 D4).
    """
    sb = _as_int("slice_bytes", slice_bytes)
    if sb <= 0:
        raise AddressError(f"slice_bytes={sb} must be positive")
    ns = _as_int("n_slices", n_slices)
    if ns <= 0:
        raise AddressError(f"n_slices={ns} must be positive")
    p = _check_range("pe_id", pe_id, 0, ns - 1)
    lo = _check_range("local_offset", local_offset, 0, sb - 1)
    return encode_hbm(sip, die, p * sb + lo)


def encode_pe_local(
    sip: int, die: int, pe_id: int, sub_unit: int, sub_offset: int
) -> int:
    """PE_LOCAL PA (spec_fabric §6.2).

    local_offset = ``(0<<37)|(0<<34)|(pe_id<<29)|(sub_unit<<25)|sub_offset``;
    ``sub_offset`` must be below the sub-unit budget (PE_TCM 2 MiB, ...).
    """
    d = _ahbm_die(die)
    p = _check_range("pe_id", pe_id, 0, _mask(PE_ID_BITS))
    u = _sub_unit(PeSubUnit, PE_SUB_UNIT_BUDGET, "pe_sub_unit", sub_unit)
    off = _check_budget("sub_offset", sub_offset, u, PE_SUB_UNIT_BUDGET[u])
    local = (
        (ResourceKind.PE_LOCAL << RESOURCE_KIND_SHIFT)
        | (p << PE_ID_SHIFT)
        | (int(u) << PE_SUB_SHIFT)
        | off
    )
    return _top(sip, d, local)


def encode_mcpu_local(sip: int, die: int, sub_unit: int, sub_offset: int) -> int:
    """MCPU_LOCAL PA (spec_fabric §6.2).

    local_offset = ``(1<<34)|(sub_unit<<25)|sub_offset``, bits [33:30] zero;
    ``sub_offset`` below the sub-unit budget (MCPU_SRAM 10 MiB, ...).
    """
    d = _ahbm_die(die)
    u = _sub_unit(McpuSubUnit, MCPU_SUB_UNIT_BUDGET, "mcpu_sub_unit", sub_unit)
    off = _check_budget("sub_offset", sub_offset, u, MCPU_SUB_UNIT_BUDGET[u])
    local = (
        (ResourceKind.MCPU_LOCAL << RESOURCE_KIND_SHIFT)
        | (int(u) << MCPU_SUB_SHIFT)
        | off
    )
    return _top(sip, d, local)


def encode_cube_sram(sip: int, die: int, sram_offset: int) -> int:
    """CUBE_SRAM PA (spec_fabric §6.2): local_offset = ``(2<<34)|sram_offset`` (flat 32 MiB)."""
    d = _ahbm_die(die)
    off = _check_range("sram_offset", sram_offset, 0, CUBE_SRAM_BYTES - 1)
    return _top(sip, d, (ResourceKind.CUBE_SRAM << RESOURCE_KIND_SHIFT) | off)


def encode_iocpu(sip: int, die: int, sub_unit: int, sub_offset: int) -> int:
    """IOCPU PA on an IO chiplet die 16..20 (spec_fabric §6.3).

    chiplet_offset = ``(sub_unit<<27)|sub_offset`` (< 2 GiB); ``sub_offset``
    below the sub-unit budget (IPCQ 2 MiB, IO_SRAM 64 MiB, ...).
    """
    d = _io_die(die)
    u = _sub_unit(IocpuSubUnit, IOCPU_SUB_UNIT_BUDGET, "iocpu_sub_unit", sub_unit)
    off = _check_budget("sub_offset", sub_offset, u, IOCPU_SUB_UNIT_BUDGET[u])
    return _top(sip, d, (int(u) << IOCPU_SUB_SHIFT) | off)


def encode_ual(sip: int, die: int, chiplet_offset: int) -> int:
    """UAL PA on an IO chiplet die (spec_fabric §6.3): chiplet_offset in [2 GiB, 1 TiB).

    The UAL sub-layout is TBD, so the whole ``chiplet_offset`` is kept.
    """
    d = _io_die(die)
    off = _check_range(
        "chiplet_offset", chiplet_offset, IOCPU_REGION_BYTES, IO_CHIPLET_BYTES - 1
    )
    return _top(sip, d, off)


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodedAddress:
    """Positional decode of a 51-bit PA (spec_fabric §6.1-6.3).

    ``offset`` is the domain-local byte offset: ``hbm_offset`` (hbm),
    ``sub_offset`` (pe_local / mcpu_local / iocpu), ``sram_offset``
    (cube_sram) or the whole ``chiplet_offset`` (ual).  ``pe_id`` is set only
    for pe_local; ``sub_unit`` (a PeSubUnit / McpuSubUnit / IocpuSubUnit) only
    for pe_local, mcpu_local and iocpu.
    """

    pa: int
    domain: Domain
    sip: int
    die: int
    offset: int
    pe_id: Optional[int] = None
    sub_unit: Optional[IntEnum] = None

    @property
    def is_ahbm(self) -> bool:
        """True for AHBM-die domains (die 0..15; cube index == die)."""
        return self.die < N_AHBM_DIES

    @property
    def cube(self) -> int:
        """Cube index (== die_id) of an AHBM-die address (spec_fabric §6.4)."""
        if not self.is_ahbm:
            raise AddressError(f"die_id={self.die} is an IO chiplet, not a cube")
        return self.die

    @property
    def hbm_offset(self) -> int:
        """HBM byte offset [36:0]; only for domain hbm."""
        if self.domain is not Domain.HBM:
            raise AddressError(f"domain={self.domain.value} has no hbm_offset")
        return self.offset

    @property
    def sub_unit_name(self) -> Optional[str]:
        return None if self.sub_unit is None else self.sub_unit.name

    def encode(self) -> int:
        """Re-encode the fields through the domain's encoder (== ``pa``)."""
        dom = self.domain
        if dom is Domain.HBM:
            return encode_hbm(self.sip, self.die, self.offset)
        if dom is Domain.PE_LOCAL:
            return encode_pe_local(self.sip, self.die, self.pe_id, self.sub_unit, self.offset)
        if dom is Domain.MCPU_LOCAL:
            return encode_mcpu_local(self.sip, self.die, self.sub_unit, self.offset)
        if dom is Domain.CUBE_SRAM:
            return encode_cube_sram(self.sip, self.die, self.offset)
        if dom is Domain.IOCPU:
            return encode_iocpu(self.sip, self.die, self.sub_unit, self.offset)
        return encode_ual(self.sip, self.die, self.offset)


def decode(pa: int) -> DecodedAddress:
    """Decode a 51-bit PA into its domain and fields (spec_fabric §6.1-6.3).

    Raises AddressError for a PA outside [0, 2**51), a reserved die_id
    (21..31), non-zero MBZ bits, a reserved resource_kind or sub-unit, or a
    sub_offset beyond its sub-unit budget.  Topology capacity is not checked.
    """
    p = _check_range("pa", pa, 0, (1 << PA_BITS) - 1)
    sip = (p >> SIP_SHIFT) & _mask(SIP_BITS)
    die = (p >> DIE_SHIFT) & _mask(DIE_BITS)
    local = p & _mask(LOCAL_BITS)

    if die < N_AHBM_DIES:
        return _decode_ahbm(p, sip, die, local)
    if die <= IO_DIE_LAST:
        return _decode_io(p, sip, die, local)
    raise AddressError(
        f"die_id={die} is reserved (valid 0..{N_AHBM_DIES - 1} AHBM, "
        f"{IO_DIE_FIRST}..{IO_DIE_LAST} IO chiplet)"
    )


def _decode_ahbm(pa: int, sip: int, die: int, local: int) -> DecodedAddress:
    _check_mbz(local, AHBM_MBZ_SHIFT, AHBM_MBZ_BITS, "AHBM die")
    if (local >> ADDR_SPACE_SHIFT) & 1:
        off = local & _mask(HBM_OFFSET_BITS)
        return DecodedAddress(pa, Domain.HBM, sip, die, off)

    kind_code = (local >> RESOURCE_KIND_SHIFT) & _mask(RESOURCE_KIND_BITS)
    kl = local & _mask(KIND_LOCAL_BITS)
    try:
        kind = ResourceKind(kind_code)
    except ValueError:
        raise AddressError(
            f"resource_kind={kind_code} is reserved (valid 0 PE_LOCAL, "
            "1 MCPU_LOCAL, 2 CUBE_SRAM)"
        ) from None

    sub_off = kl & _mask(SUB_OFFSET_BITS)
    if kind is ResourceKind.PE_LOCAL:
        _check_mbz(kl, PE_MBZ_SHIFT, PE_MBZ_BITS, "PE_LOCAL")
        pe_id = (kl >> PE_ID_SHIFT) & _mask(PE_ID_BITS)
        u = _sub_unit(
            PeSubUnit, PE_SUB_UNIT_BUDGET, "pe_sub_unit",
            (kl >> PE_SUB_SHIFT) & _mask(PE_SUB_BITS),
        )
        _check_budget("sub_offset", sub_off, u, PE_SUB_UNIT_BUDGET[u])
        return DecodedAddress(pa, Domain.PE_LOCAL, sip, die, sub_off, pe_id, u)
    if kind is ResourceKind.MCPU_LOCAL:
        _check_mbz(kl, MCPU_MBZ_SHIFT, MCPU_MBZ_BITS, "MCPU_LOCAL")
        u = _sub_unit(
            McpuSubUnit, MCPU_SUB_UNIT_BUDGET, "mcpu_sub_unit",
            (kl >> MCPU_SUB_SHIFT) & _mask(MCPU_SUB_BITS),
        )
        _check_budget("sub_offset", sub_off, u, MCPU_SUB_UNIT_BUDGET[u])
        return DecodedAddress(pa, Domain.MCPU_LOCAL, sip, die, sub_off, None, u)
    # CUBE_SRAM
    _check_mbz(kl, SRAM_MBZ_SHIFT, SRAM_MBZ_BITS, "CUBE_SRAM")
    return DecodedAddress(pa, Domain.CUBE_SRAM, sip, die, sub_off)


def _decode_io(pa: int, sip: int, die: int, local: int) -> DecodedAddress:
    _check_mbz(local, IO_MBZ_SHIFT, IO_MBZ_BITS, "IO chiplet die")
    chiplet = local & _mask(CHIPLET_OFFSET_BITS)
    if chiplet >= IOCPU_REGION_BYTES:
        return DecodedAddress(pa, Domain.UAL, sip, die, chiplet)
    u = _sub_unit(
        IocpuSubUnit, IOCPU_SUB_UNIT_BUDGET, "iocpu_sub_unit",
        (chiplet >> IOCPU_SUB_SHIFT) & _mask(IOCPU_SUB_BITS),
    )
    sub_off = chiplet & _mask(IOCPU_SUB_OFFSET_BITS)
    _check_budget("sub_offset", sub_off, u, IOCPU_SUB_UNIT_BUDGET[u])
    return DecodedAddress(pa, Domain.IOCPU, sip, die, sub_off, None, u)


# --------------------------------------------------------------------------
# HBM target: sip / cube / PE slice / PC (spec_memory §6.2, §3.3)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class HbmTarget:
    """HBM destination of a PA: controller ``sip{sip}.cube{cube}.hbm_ctrl.pe{pe_slice}``, PC ``pc``.

    ``slice_offset`` = hbm_offset - pe_slice * slice_bytes (spec_memory §6.2).
    """

    sip: int
    cube: int
    pe_slice: int
    pc: int
    slice_offset: int


def pc_of_offset(
    hbm_offset: int,
    burst_bytes: int = DEFAULT_BURST_BYTES,
    n_pcs: int = DEFAULT_N_PCS,
) -> int:
    """PC index ``(hbm_offset >> log2(burst_bytes)) & (n_pcs-1)`` (spec_memory §3.3).

    Bits [10:8] for the 256 B / 8 PC default; both parameters must be powers of two.
    """
    shift = _log2_pow2("burst_bytes", burst_bytes)
    _log2_pow2("n_pcs", n_pcs)
    off = _as_int("hbm_offset", hbm_offset)
    if off < 0:
        raise AddressError(f"hbm_offset={off} must be non-negative")
    return (off >> shift) & (int(n_pcs) - 1)


def pc_of_offsets(
    offsets: np.ndarray,
    burst_bytes: int = DEFAULT_BURST_BYTES,
    n_pcs: int = DEFAULT_N_PCS,
) -> np.ndarray:
    """Vectorised :func:`pc_of_offset`: int64 HBM byte offsets -> int64 PC indices.

    spec_memory §3.3: ``pc = (offset >> log2(burst_bytes)) & (n_pcs - 1)``.
    """
    shift = _log2_pow2("burst_bytes", burst_bytes)
    mask = (1 << _log2_pow2("n_pcs", n_pcs)) - 1
    arr = np.asarray(offsets)
    if arr.dtype.kind not in "iu":
        raise AddressError(f"offsets dtype={arr.dtype} must be an integer dtype")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and int(arr.min()) < 0:
        raise AddressError(f"offsets min={int(arr.min())} must be non-negative")
    return (arr >> np.int64(shift)) & np.int64(mask)


def decode_hbm_target(
    pa: int,
    *,
    slice_bytes: int = DEFAULT_SLICE_BYTES,
    burst_bytes: int = DEFAULT_BURST_BYTES,
    n_pcs: int = DEFAULT_N_PCS,
    n_slices: Optional[int] = DEFAULT_N_SLICES,
) -> HbmTarget:
    """Decode an HBM PA to (sip, cube, PE slice, PC) (spec_memory §6.2, spec_fabric §6.4).

    ``pe_slice = hbm_offset // slice_bytes`` (contiguous slices, 6 GiB default);
    ``pc = (hbm_offset >> log2(burst_bytes)) & (n_pcs-1)`` (bits [10:8] by default).
    ``n_slices`` (hbm_slices_per_cube) bounds pe_slice, i.e. the configured
    capacity; pass ``None`` to skip that check.
    """
    shift = _log2_pow2("burst_bytes", burst_bytes)
    mask = (1 << _log2_pow2("n_pcs", n_pcs)) - 1
    sb = _as_int("slice_bytes", slice_bytes)
    if sb <= 0:
        raise AddressError(f"slice_bytes={sb} must be positive")
    d = decode(pa)
    if d.domain is not Domain.HBM:
        raise AddressError(f"addr_space: pa={d.pa:#x} decodes to domain={d.domain.value}, not hbm")
    off = d.offset
    pe_slice, slice_offset = divmod(off, sb)
    if n_slices is not None:
        ns = _as_int("n_slices", n_slices)
        if pe_slice >= ns:
            raise AddressError(
                f"hbm_offset={off:#x} beyond configured capacity: pe_slice={pe_slice} "
                f">= n_slices={ns} (slice_bytes={sb:#x})"
            )
    return HbmTarget(d.sip, d.die, pe_slice, (off >> shift) & mask, slice_offset)


def hbm_ctrl_name(target: HbmTarget) -> str:
    """Node name of the owning HBM controller: ``sip{s}.cube{c}.hbm_ctrl.pe{x}`` (spec_fabric §6.4)."""
    return f"sip{target.sip}.cube{target.cube}.hbm_ctrl.pe{target.pe_slice}"
