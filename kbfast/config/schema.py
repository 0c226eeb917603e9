"""Typed schema of a system description (topology YAML).

Every parameter of spec_fabric §2–§3 and spec_memory §3.9 has a field here;
parameters the documents never valued are listed in the YAML's
``uncalibrated`` section (spec_fabric §10).  Units: GB/s with 1 GB/s = 1 B/ns,
nanoseconds, millimetres.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

SIP_TOPOLOGIES = ("ring_1d", "ring_1d_unidir", "torus_2d", "mesh_2d", "mesh_2d_no_wrap", "tree_binary")
GRID_TOPOLOGIES = ("torus_2d", "mesh_2d", "mesh_2d_no_wrap")


MAX_COUNT = 2**31 - 1   # the largest count a description may give (tables index nodes and ops with int32)


def _no_bool_int(value: object) -> object:
    """A count is a number: YAML ``true`` would otherwise pass as 1."""
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "must be a whole number, not true/false")
    return value


def _number(value: object, allow_inf: bool = False) -> object:
    """A quantity is a finite number: YAML ``true`` would otherwise pass as 1.0, NaN compares false with every
    bound, and infinity breaks the model except where it means "not serialised" (``allow_inf``: a link
    bandwidth).  A literal too large for a float (``1e400``) is refused rather than read as infinity."""
    if isinstance(value, bool):
        raise PydanticCustomError("float_type", "must be a number, not true/false")
    if isinstance(value, (str, int, float)):
        try:
            x = float(value)
        except OverflowError:   # an int beyond the float range
            x = math.inf
        except ValueError:      # not a number: pydantic says so
            return value
        if math.isnan(x):
            raise PydanticCustomError("finite_number", "must be a number, not NaN")
        if math.isinf(x):
            spelt = isinstance(value, float) or "inf" in str(value).lower()
            if not spelt:
                raise PydanticCustomError("finite_number", "too large for a number (it would become "
                                          "infinity)")
            if not allow_inf:
                raise PydanticCustomError("finite_number", "must be a finite number")
    return value


def _no_bool_float(value: object) -> object:
    """A quantity (:func:`_number`): finite."""
    return _number(value)


def _bandwidth(value: object) -> object:
    """A link bandwidth (:func:`_number`): ``inf`` = no serialization."""
    return _number(value, allow_inf=True)


# The numbers of a description.  Unlike pydantic's own types they refuse true/false, a float is finite (but a
# link bandwidth may be inf) and a count has an upper limit (a number >= 2**63 does not even fit the arrays).
Int = Annotated[int, BeforeValidator(_no_bool_int), Field(ge=-MAX_COUNT, le=MAX_COUNT)]
PositiveInt = Annotated[int, BeforeValidator(_no_bool_int), Field(gt=0, le=MAX_COUNT)]
Float = Annotated[float, BeforeValidator(_no_bool_float)]
PositiveFloat = Annotated[float, BeforeValidator(_no_bool_float), Field(gt=0)]
NonNegativeFloat = Annotated[float, BeforeValidator(_no_bool_float), Field(ge=0)]
Bandwidth = Annotated[float, BeforeValidator(_bandwidth), Field(gt=0)]   # GB/s; inf = no serialization


class Strict(BaseModel):
    """Base of every section: unknown keys are refused, and a validated spec is frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Link(Strict):
    """A link class whose length comes from the floor plan (or is 0 mm)."""

    bw_gbs: Bandwidth


class LongLink(Strict):
    """A link class with its own length (UCIe seam, PCIe)."""

    bw_gbs: Bandwidth
    distance_mm: NonNegativeFloat = 0.0


class Links(Strict):
    """Bandwidths of every data-link class (spec_fabric §3)."""

    pe_to_router: Link
    router_mesh: Link
    router_hbm: Link
    router_sram: Link
    ucie_conn: Link
    ucie_internal: Link
    ucie_mesh: LongLink
    pcie_ep_noc: Link
    io_noc_cpu: Link
    io_conn: Link
    io_to_cube: Link
    pcie: LongLink


class Overheads(Strict):
    """Per-transaction node overheads in ns (spec_fabric §2)."""

    switch: NonNegativeFloat
    pcie_ep: NonNegativeFloat
    io_cpu: NonNegativeFloat
    io_noc: NonNegativeFloat
    io_ucie: NonNegativeFloat
    io_conn: NonNegativeFloat
    router: NonNegativeFloat
    ucie: NonNegativeFloat
    ucie_conn: NonNegativeFloat
    m_cpu: NonNegativeFloat
    sram: NonNegativeFloat
    hbm_ctrl: NonNegativeFloat


class Fabric(Strict):
    """The wire: flit size in bytes and propagation delay in ns per mm (spec_fabric §3)."""

    flit_bytes: PositiveInt
    ns_per_mm: NonNegativeFloat


class Sips(Strict):
    """How many SIPs and how they connect (``ring_1d``, a 2-D grid of ``w`` x ``h``, ...; spec_fabric §1.3)."""

    count: PositiveInt
    topology: Literal[SIP_TOPOLOGIES]  # type: ignore[valid-type]
    w: PositiveInt | None = None
    h: PositiveInt | None = None


class MeshSize(Strict):
    """A ``w`` x ``h`` mesh (the cubes of a SIP)."""

    w: PositiveInt
    h: PositiveInt


class CubePort(Strict):
    """Where an IO-chiplet UCIe PHY attaches to a cube's shoreline port."""

    cube: tuple[Int, Int]
    side: Literal["N", "S", "E", "W"]
    phy: str = Field(pattern=r"^P[0-9]+$")
    distance_mm: NonNegativeFloat


class IoChiplet(Strict):
    """An IO chiplet of a SIP: its id, UCIe connections and the cube ports its PHYs attach to."""

    id: str = Field(pattern=r"^io[0-9]+$")
    n_connections: PositiveInt
    cube_ports: list[CubePort] = Field(min_length=1)


class SipLayout(Strict):
    """One SIP: its cube mesh and IO chiplet (spec_fabric §1.2)."""

    cube_mesh: MeshSize
    io_chiplets: list[IoChiplet] = Field(min_length=1, max_length=1)


class Geometry(Strict):
    """A cube's outline in mm."""

    w_mm: PositiveFloat
    h_mm: PositiveFloat


class PeLayout(Strict):
    """Where a cube's PEs sit: PEs per corner, inset from the corner and pitch, in mm (spec_fabric §1.4)."""

    pe_per_corner: PositiveInt
    corner_inset_mm: NonNegativeFloat
    pe_pitch_mm: PositiveFloat


class NocLayout(Strict):
    """The cube's router grid: the largest router spacing and the gap beside the HBM, in mm (spec_fabric §1.4)."""

    max_spacing_mm: PositiveFloat
    hbm_gap_mm: PositiveFloat


class Ucie(Strict):
    """A cube's UCIe ports: connections per port."""

    n_connections: PositiveInt


class Placement(Strict):
    """Where the M_CPU and the cube SRAM attach, as (x, y) in mm."""

    m_cpu_mm: tuple[Float, Float]
    sram_mm: tuple[Float, Float]


class CubeLayout(Strict):
    """One cube's floor plan: outline, PEs, router grid, UCIe and attachments (spec_fabric §1.4)."""

    geometry: Geometry
    pe_layout: PeLayout
    noc: NocLayout
    ucie: Ucie
    placement: Placement


class Hbm(Strict):
    """Per-PE HBM controller (spec_memory §3.9)."""

    slices_per_cube: PositiveInt
    total_gib_per_cube: PositiveInt
    pcs_per_pe: PositiveInt
    burst_bytes: PositiveInt
    efficiency: Float = Field(gt=0.0, le=1.0)
    switch_penalty_ns: NonNegativeFloat
    mapping_mode: Literal["n_to_one"]
    # When a PE DMA read's response leaves the controller (docs/gemm.md "Pipeline DMA"): ``accepted``, once the
    # controller has taken the read's last flit (its bursts still occupy the PCs); ``committed``, after the
    # last burst's PC commit, as a write.
    read_response: Literal["accepted", "committed"]


class SlotTier(Strict):
    """IPCQ slot memory tier: ``SLOT(n) = setup_ns + n / bw_gbs`` (spec_ccl §2.7)."""

    bw_gbs: PositiveFloat
    setup_ns: NonNegativeFloat


class SlotTiers(Strict):
    """The IPCQ slot tier of each buffer kind."""

    tcm: SlotTier
    sram: SlotTier
    hbm: SlotTier


class Ipcq(Strict):
    """IPCQ ring buffers and credit flow (spec_ccl §1.7, §2; README decisions)."""

    buffer_kind: Literal["tcm", "sram", "hbm"]
    n_slots: PositiveInt
    slot_size: PositiveInt
    credit_bytes: PositiveInt
    credit_mode: Literal["blocking", "forked"]
    backpressure: Literal["sleep", "poll"]
    poll_interval_ns: PositiveFloat
    tiers: SlotTiers


class VcWeights(Strict):
    """Weighted round robin of PE_DMA's two virtual channels on the PE's egress link, in flits
    (= ``vc_chunk_size``, 256 B; spec_ccl §2.8, ADR-0023 D8)."""

    compute: PositiveInt
    comm: PositiveInt


class Tile(Strict):
    """The GEMM hardware tile, in elements (spec_pe §5.1: 32 (M) x 64 (K) x 32 (N))."""

    m: PositiveInt
    k: PositiveInt
    n: PositiveInt


class Pe(Strict):
    """PE compute costs the sources never valued (spec_pe §0.2): MATH = max(overhead, n_elem * ns_per_elem);
    the PE_DMA virtual-channel arbitration and read channel; the GEMM tile pipeline (spec_pe §4–§5)."""

    elem_bytes: PositiveInt
    math_ns_per_elem: NonNegativeFloat   # the add (the collectives' reduce), ns per element
    math_overhead_ns: NonNegativeFloat
    # ns per element of every other PE_MATH op (kbfast.ir.tiling.math_ns): mul, exp, softmax, reductions, the
    # epilogues (relu, bias, scale, dequant, ...)
    math_ops: dict[str, NonNegativeFloat]
    vc_weights: VcWeights
    # When a DMA read frees the PE's read channel (docs/gemm.md "Pipeline DMA"): ``accepted``, once the
    # controller has taken its last flit (the response returns while the next read streams); ``response``,
    # when the response is back at the PE (spec_pe §4.3, the full round trip).
    dma_read_release: Literal["accepted", "response"]
    tile: Tile
    gemm_macs_per_ns: PositiveFloat      # MACs per ns of PE_GEMM: one tile takes m*k*n / rate ns
    tile_buffers: PositiveInt            # tile t+D's reads wait until tile t has left FETCH
    tcm_kib: PositiveInt                 # PE_TCM capacity: pinned operands and tile buffers (spec_memory M14)
    tcm_read_gbs: PositiveFloat          # PE_TCM read channel (FETCH), ADR-0040
    tcm_write_gbs: PositiveFloat         # PE_TCM write channel (STORE), ADR-0040


# The kinds of edge in the system graph, in the order of their integer ids (spec_fabric §2–§3): the keys
# ``routing.weight_mm`` accepts.  kbfast.topology.kinds.EdgeKind is built from this tuple.
EDGE_KINDS = ("pe_to_router", "router_to_pe", "command", "router_mesh", "router_to_hbm", "hbm_to_router",
              "router_to_sram", "sram_to_router", "router_to_ucie_conn", "ucie_conn_to_router", "ucie_internal",
              "ucie_mesh", "io_internal", "io_to_cube", "cube_to_io", "pcie", "pe_internal")


class Routing(Strict):
    """Route choice (spec_fabric §4.2; docs/routing.md).

    ``kernbench``: the original PathRouter, Dijkstra on millimetres with (distance, name) ties;
    ``balanced``: Dijkstra on millimetres with fenced UCIe endpoints, fewest edges then smallest
    edge id on ties; ``hops``: fewest edges.  ``weight_mm`` overrides the routing weight of whole
    edge kinds (the original's ``routing_weight_mm``, spec_fabric §3, §10); propagation still uses
    the physical length.
    """

    policy: Literal["kernbench", "balanced", "hops"]
    weight_mm: dict[str, NonNegativeFloat] = Field(default_factory=dict)


class SystemSpec(Strict):
    """A whole validated system description."""

    name: str
    description: str = ""
    param_set: str
    fabric: Fabric
    sips: Sips
    sip: SipLayout
    cube: CubeLayout
    hbm: Hbm
    link: Links
    overhead_ns: Overheads
    routing: Routing
    ipcq: Ipcq
    pe: Pe
    uncalibrated: list[str] = Field(default_factory=list)

    @property
    def n_sips(self) -> int:
        """Number of SIPs."""
        return self.sips.count

    @property
    def n_cubes_per_sip(self) -> int:
        """Cubes per SIP (the cube mesh's w x h)."""
        return self.sip.cube_mesh.w * self.sip.cube_mesh.h

    @property
    def pc_bw_gbs(self) -> float:
        """Per-PC bandwidth, derived: router↔HBM bw × efficiency / PCs (spec_fabric §3.4)."""
        return self.link.router_hbm.bw_gbs * self.hbm.efficiency / self.hbm.pcs_per_pe

    @property
    def hbm_slice_bytes(self) -> int:
        """Bytes of one PE's HBM slice: the cube's HBM shared by its slices."""
        return self.hbm.total_gib_per_cube * (1 << 30) // self.hbm.slices_per_cube

    def sip_grid(self) -> tuple[int, int]:
        """(w, h) of the logical SIP grid; (0, 0) for non-grid topologies (spec_fabric §1.3)."""
        if self.sips.topology not in GRID_TOPOLOGIES:
            return (0, 0)
        if self.sips.w is not None and self.sips.h is not None:
            return (self.sips.w, self.sips.h)
        side = round(self.sips.count**0.5)
        return (side, side)
