"""Floor plan of one cube: router grid, HBM hole, PE, M_CPU, SRAM and UCIe attachments.

Implements the mesh-generator rules of spec_fabric §1.4 (ADR-0053 D3):

* PE centres sit per corner at ``corner_inset`` from the cube edges, the
  ``pe_per_corner`` PEs of a corner ``pe_pitch`` apart along x, inward;
* router columns are the union of PE x positions, with ``ceil(gap/max_spacing) - 1``
  evenly spaced relay columns in every gap wider than ``max_spacing``;
* rows: ``rows_per_half = ceil(max(n_conn, 2) / 2)`` PE rows per half (from the
  corner inset to ``hbm_gap`` above the HBM rows), two HBM rows at
  ``h/2 -+ 1.5`` and the mirrored bottom half;
* the HBM hole removes the routers at the HBM rows x columns ``n_cols//2 - 1 .. n_cols//2``;
* NW PEs attach to row 0, NE to row 1, SW to the first row below the HBM rows,
  SE to the last; each PE to the router of its row with the nearest column;
* M_CPU and SRAM attach to the router nearest (Euclidean) to their position;
* UCIe-E/W get one connection per PE row on the last/first column, UCIe-N/S one
  per PE column on the first/last row.

With the defaults (14 x 14 mm, pitch 2 mm) this gives the 6 x 6 grid minus the
2 x 2 hole: 32 routers, PE0 on r0c0, PE2 on r1c4, M_CPU on r2c0, SRAM on r3c0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kbfast.config.schema import CubeLayout

CORNERS = ("NW", "NE", "SW", "SE")
PORTS = ("N", "E", "S", "W")


@dataclass(frozen=True)
class FloorPlan:
    """One cube's router grid and what attaches where (spec_fabric §1.4); lengths in mm."""

    col_x: tuple[float, ...]
    row_y: tuple[float, ...]
    routers: tuple[tuple[int, int], ...]          # (row, col), row-major, hole excluded
    pe_xy: tuple[tuple[float, float], ...]        # PE centre per PE index
    pe_router: tuple[int, ...]                    # router index per PE
    m_cpu_router: int
    sram_router: int
    conn_router: dict[str, tuple[int, ...]]      # port -> router index per connection
    pe_rows: tuple[int, ...]
    pe_cols: tuple[int, ...]
    units_per_mm: int = 1000  # exact length unit for routing: 1 µm / every interval count used to place rows and columns

    @property
    def n_routers(self) -> int:
        """Routers of the cube."""
        return len(self.routers)

    def router_index(self, row: int, col: int) -> int:
        """Index of the router at grid position (``row``, ``col``)."""
        return self.routers.index((row, col))

    def router_xy(self, r: int) -> tuple[float, float]:
        """(x, y) in mm of router ``r``."""
        row, col = self.routers[r]
        return self.col_x[col], self.row_y[row]


def _columns(pe_x: list[float], max_spacing: float, divisions: list[int]) -> list[float]:
    xs = sorted(set(pe_x))
    cols = [xs[0]]
    for a, b in zip(xs, xs[1:]):
        gap = b - a
        n_relay = math.ceil(gap / max_spacing - 1e-9) - 1 if gap > max_spacing else 0
        cols += [a + gap * (i + 1) / (n_relay + 1) for i in range(n_relay)]
        cols.append(b)
        divisions.append(n_relay + 1)
    return cols


def build_floorplan(cube: CubeLayout) -> FloorPlan:
    """Compute the router grid and every attachment of one cube (spec_fabric §1.4)."""
    w, h = cube.geometry.w_mm, cube.geometry.h_mm
    lay = cube.pe_layout
    inset, pitch, k = lay.corner_inset_mm, lay.pe_pitch_mm, lay.pe_per_corner
    west = [inset + i * pitch for i in range(k)]
    east = [w - inset - (k - 1 - i) * pitch for i in range(k)]
    corner_xy = {"NW": [(x, inset) for x in west], "NE": [(x, inset) for x in east],
                 "SW": [(x, h - inset) for x in west], "SE": [(x, h - inset) for x in east]}
    pe_xy = [xy for c in CORNERS for xy in corner_xy[c]]
    divisions: list[int] = []
    col_x = _columns([x for x, _ in pe_xy], cube.noc.max_spacing_mm, divisions)

    n_conn = max(cube.ucie.n_connections, 2)
    rows_per_half = math.ceil(n_conn / 2)
    hbm_top, hbm_bot = h / 2 - 1.5, h / 2 + 1.5
    gap = cube.noc.hbm_gap_mm
    top = _spread(inset, hbm_top - gap, rows_per_half)
    bottom = _spread(hbm_bot + gap, h - inset, rows_per_half)
    row_y = top + [hbm_top, hbm_bot] + bottom
    divisions.append(max(rows_per_half - 1, 1))
    hbm_rows = (rows_per_half, rows_per_half + 1)
    hole_cols = (len(col_x) // 2 - 1, len(col_x) // 2)
    routers = tuple((r, c) for r in range(len(row_y)) for c in range(len(col_x))
                    if not (r in hbm_rows and c in hole_cols))

    second = 1 if rows_per_half > 1 else 0
    corner_row = {"NW": 0, "NE": second, "SW": hbm_rows[1] + 1, "SE": hbm_rows[1] + 1 + second}
    pe_router = []
    for c in CORNERS:
        row = corner_row[c]
        for x, _ in corner_xy[c]:
            col = min(range(len(col_x)), key=lambda j: (abs(col_x[j] - x), j))
            pe_router.append(routers.index((row, col)))

    def nearest(pos: tuple[float, float]) -> int:
        return min(range(len(routers)), key=lambda r: (math.dist(pos, (col_x[routers[r][1]], row_y[routers[r][0]])), r))

    pe_rows = tuple(sorted({routers[r][0] for r in pe_router}))
    pe_cols = tuple(sorted({routers[r][1] for r in pe_router}))
    last_row, last_col = len(row_y) - 1, len(col_x) - 1
    conn_router = {
        "N": tuple(routers.index((0, c)) for c in pe_cols),
        "E": tuple(routers.index((r, last_col)) for r in pe_rows),
        "S": tuple(routers.index((last_row, c)) for c in pe_cols),
        "W": tuple(routers.index((r, 0)) for r in pe_rows),
    }
    return FloorPlan(col_x=tuple(col_x), row_y=tuple(row_y), routers=routers, pe_xy=tuple(pe_xy),
                     pe_router=tuple(pe_router), m_cpu_router=nearest(cube.placement.m_cpu_mm),
                     sram_router=nearest(cube.placement.sram_mm), conn_router=conn_router,
                     pe_rows=pe_rows, pe_cols=pe_cols, units_per_mm=1000 * math.lcm(*divisions))


def _spread(a: float, b: float, n: int) -> list[float]:
    if n == 1:
        return [a]
    return [a + (b - a) * i / (n - 1) for i in range(n)]
