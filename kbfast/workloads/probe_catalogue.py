"""The probe catalogue: named traffic scenarios (spec_pe §10, §11.6; spec_memory §10).

Each case is a set of flows (issuer -> HBM controller) that start together.
PE cases issue PE DMA writes; H2D/D2H cases are host writes/reads injected at
``sip0``'s ``pcie_ep``; LAUNCH is a no-op kernel launched on every PE of
``sip0``.  Scenario endpoints that the sources leave open are fixed here, by
rules that depend only on the topology (documented in ``docs/probes.md``):

* "best"/"worst" remote slices are the nearest/farthest by routing weight from
  ``sip0.cube0.pe0``;
* the far cube is the last cube of the mesh (``cube w*h-1``, cube 15 on 4x4);
* REMOTE_SIP writes from ``sip0.cube0.pe0`` to ``sip1.cube0.hbm_ctrl.pe0``, the issuer's own slice
  position on the peer SIP (the source states neither cube nor PE; the never-valued switch link is fitted
  to this row, so the endpoint is fixed by rule, not by fit: docs/calibration.md);
* H2D/D2H target the column-0 cubes ``0, w, 2w, ...`` (1, 2, 3, 4 cube hops
  from the IO chiplet on the north edge), slice of pe0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbfast.errors import KbfastError, closest
from kbfast.ir import Program, ProgramBuilder
from kbfast.topology.builder import Tables
from kbfast.topology.names import hbm_ctrl, node_id, pe_block
from kbfast.topology.routing import Router, edge_weights
from kbfast.workloads.launch import launch_timing

DEFAULT_PROBE_BYTES = 16 * 1024
SWEEP_SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)


@dataclass(frozen=True)
class Flow:
    """One DMA of a probe: its issuer, the HBM controller it targets and the byte offset there."""

    issuer: int        # pe_dma node, or the pcie_ep node for a host flow
    dst: int           # HBM controller node
    addr: int          # HBM byte offset of the first byte


@dataclass(frozen=True)
class ProbeCase:
    """A catalogue probe: its name, kind (pe_dma, h2d, d2h or launch), description and flows."""

    name: str
    kind: str          # "pe_dma", "h2d", "d2h" or "launch"
    description: str
    flows: tuple[Flow, ...]
    group: str         # "no_congestion", "congestion", "host", "launch"

    @property
    def n_issuers(self) -> int:
        """How many flows (issuers) the probe has."""
        return len(self.flows)

    def program(self, t: Tables, router: Router, nbytes: int) -> Program:
        """The probe's Program at ``nbytes`` per flow: every flow's DMA (a launch probe: the START barrier)."""
        b = ProgramBuilder(t, router, name=f"{self.name}@{nbytes}B")
        if self.kind == "launch":
            pes = np.array([f.issuer for f in self.flows], np.int64)
            timing = launch_timing(t, router, pes)
            for f in self.flows:
                b.start(b.pe_agent(f.issuer))
            return b.build(launch_ns=timing.target_start_ns)
        for f in self.flows:
            a = b.host_agent(0) if self.kind in ("h2d", "d2h") else b.pe_agent(f.issuer)
            b.dma(a, f.dst, nbytes, f.addr, write=self.kind != "d2h")
        return b.build()


def _route_weight(t: Tables, router: Router, src: int, dst: int) -> int:
    edges = router.route(src, dst, "pe_dma")
    w = edge_weights(t.edge_mm, t.edge_kind, router.policy, t.spec.routing.weight_mm, t.plan.units_per_mm)
    return int(w[edges].sum())


def _by_distance(t: Tables, router: Router, src: int, cube: int, exclude: int = -1) -> list[int]:
    """PE slices of ``sip0.cube{cube}`` from nearest to farthest by routing weight from ``src``.

    Equal weights keep the lower PE first at both ends: the nearest is the lowest PE of the least
    weight, the farthest (``[-1]``) the lowest PE of the greatest weight.
    """
    n_pe = len(t.plan.pe_router)
    weight = {p: _route_weight(t, router, src, hbm_ctrl(t, 0, cube, p)) for p in range(n_pe) if p != exclude}
    near = sorted(weight, key=lambda p: (weight[p], p))
    far = min((p for p in weight if weight[p] == weight[near[-1]]))
    return [p for p in near if p != far] + [far]


def build_catalogue(t: Tables, router: Router) -> dict[str, ProbeCase]:
    """Every probe case for this topology, by name.

    >>> from kbfast import Router, build_tables, load_system
    >>> t = build_tables(load_system())
    >>> router = Router(t)
    >>> p = build_catalogue(t, router)["REMOTE_SIP"].program(t, router, 4096)
    >>> p.n_ops > 0
    True
    """
    lay = t.layout
    n_pe = len(t.plan.pe_router)
    last_cube = lay.n_cubes_per_sip - 1
    pe0 = pe_block(t, 0, 0, 0)
    cases: list[ProbeCase] = []

    def pe_case(name: str, desc: str, group: str, flows: list[tuple[int, int]], stride: int = 0) -> None:
        cases.append(ProbeCase(name, "pe_dma", desc, tuple(Flow(s, d, i * stride) for i, (s, d) in enumerate(flows)),
                               group))

    same = _by_distance(t, router, pe0, 0, exclude=0)
    pe_case("SAME_CUBE_PE_LOCAL", "sip0.cube0.pe0 to its own slice", "no_congestion", [(pe0, hbm_ctrl(t, 0, 0, 0))])
    pe_case("SAME_CUBE_PE_REMOTE_BEST", f"pe0 to the nearest other slice of cube0 (pe{same[0]})", "no_congestion",
            [(pe0, hbm_ctrl(t, 0, 0, same[0]))])
    pe_case("SAME_CUBE_PE_REMOTE_WORST", f"pe0 to the farthest slice of cube0 (pe{same[-1]})", "no_congestion",
            [(pe0, hbm_ctrl(t, 0, 0, same[-1]))])
    if lay.n_cubes_per_sip > 1:
        near = _by_distance(t, router, pe0, 1)
        far = _by_distance(t, router, pe0, last_cube)
        pe_case("REMOTE_CUBE_PE_REMOTE_BEST", f"pe0 to the nearest slice of cube1 (pe{near[0]})", "no_congestion",
                [(pe0, hbm_ctrl(t, 0, 1, near[0]))])
        pe_case("REMOTE_CUBE_PE_REMOTE_WORST", f"pe0 to the farthest slice of cube{last_cube} (pe{far[-1]})",
                "no_congestion", [(pe0, hbm_ctrl(t, 0, last_cube, far[-1]))])
    if lay.n_sips > 1:
        pe_case("REMOTE_SIP", "sip0.cube0.pe0 to sip1.cube0 pe0's slice via pcie_ep and the switch",
                "no_congestion", [(pe0, hbm_ctrl(t, 1, 0, 0))])
    if n_pe > 4:
        pe_case("PROBE_PE_SAME_HALF", "pe0 to pe1's slice (same half)", "probe", [(pe0, hbm_ctrl(t, 0, 0, 1))])
        pe_case("PROBE_PE_CROSS_HALF", "pe0 to pe4's slice (cross half)", "probe", [(pe0, hbm_ctrl(t, 0, 0, 4))])

    hot = hbm_ctrl(t, 0, 0, 0)
    nb_stride = 1 << 20  # each issuer writes its own 1 MiB region of the target slice
    for k in (1, 2, 3):
        if k < n_pe:
            pe_case(f"ctrl_hot_{k}", f"{'pe1' if k == 1 else f'pe1..pe{k}'} of cube0 to pe0's slice", "congestion",
                    [(pe_block(t, 0, 0, p), hot) for p in range(1, k + 1)], nb_stride)
    pe_case("all_pe_cube0_to_pe0", "all PEs of cube0 to pe0's slice", "congestion",
            [(pe_block(t, 0, 0, p), hot) for p in range(n_pe)], nb_stride)
    if lay.n_cubes_per_sip > 1:
        pe_case("ucie_eastbound_8pe", "every PE of cube0 to the same PE's slice in cube1", "congestion",
                [(pe_block(t, 0, 0, p), hbm_ctrl(t, 0, 1, p)) for p in range(n_pe)])
    all_pes = [(c, p) for c in range(lay.n_cubes_per_sip) for p in range(n_pe)]
    pe_case("sip_local_all", "every PE of sip0 to its own slice", "congestion",
            [(pe_block(t, 0, c, p), hbm_ctrl(t, 0, c, p)) for c, p in all_pes])
    pe_case("sip_hotspot_pe0", "every PE of sip0 to sip0.cube0.pe0's slice", "congestion",
            [(pe_block(t, 0, c, p), hot) for c, p in all_pes], nb_stride)

    pcie = node_id(t, f"sip0.{t.spec.sip.io_chiplets[0].id}.pcie_ep")
    for hop in range(min(lay.cube_h, 4)):
        cube = hop * lay.cube_w
        for kind in ("h2d", "d2h"):
            cases.append(ProbeCase(f"{kind.upper()}_CUBE{cube}", kind,
                                   f"host {'write' if kind == 'h2d' else 'read'} to cube{cube} pe0's slice "
                                   f"({hop + 1} cube hop{'s' if hop else ''})",
                                   (Flow(pcie, hbm_ctrl(t, 0, cube, 0), 0),), "host"))
    cases.append(ProbeCase("LAUNCH_NOOP", "launch", "no-op kernel launched on every PE of sip0",
                           tuple(Flow(pe_block(t, 0, c, p), -1, 0) for c, p in all_pes), "launch"))
    return {c.name: c for c in cases}


def select(catalogue: dict[str, ProbeCase], names: list[str] | None) -> list[ProbeCase]:
    """The named cases (all when ``names`` is empty); unknown names get a did-you-mean error."""
    if not names:
        return list(catalogue.values())
    out = []
    for n in names:
        if n not in catalogue:
            raise KbfastError(f"unknown probe case {n!r}\n  hint: "
                              + (closest(n, catalogue) or "kbfast probe --list lists the cases"))
        out.append(catalogue[n])
    return out


def random_pe_flows(t: Tables, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random (pe_dma, HBM controller) node pairs anywhere in the system."""
    lay = t.layout
    rng = np.random.default_rng(seed)
    n_pe = len(t.plan.pe_router)
    stride = len(t.cube_names[t.cube_names.index("pe0.pe_dma"):t.cube_names.index("pe1.pe_dma")])

    def nodes(name: str, step: int) -> np.ndarray:
        sips, cubes = rng.integers(0, lay.n_sips, n), rng.integers(0, lay.n_cubes_per_sip, n)
        return (1 + sips * lay.nodes_per_sip + lay.io_nodes + cubes * lay.nodes_per_cube
                + t.cube_names.index(name) + step * rng.integers(0, n_pe, n))

    return nodes("pe0.pe_dma", stride), nodes("hbm_ctrl.pe0", 1)


def random_traffic(t: Tables, n_flows: int, seed: int = 0) -> ProbeCase:
    """A DMA traffic pattern: ``n_flows`` PEs anywhere each write to a random HBM slice, all at once.

    Issuers and targets are drawn independently with replacement, so flows may share a DMA engine or a
    controller; each flow uses its own 1 MiB region of its target slice.
    """
    if n_flows <= 0:
        raise KbfastError(f"traffic needs n_flows > 0 (got {n_flows})")
    src, dst = random_pe_flows(t, n_flows, seed)
    flows = tuple(Flow(int(s), int(d), i << 20) for i, (s, d) in enumerate(zip(src, dst)))
    return ProbeCase(f"traffic_random_{n_flows}", "pe_dma", f"{n_flows} random PE DMA writes (seed {seed})", flows,
                     "traffic")
