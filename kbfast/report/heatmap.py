"""Link utilisation on the cube mesh (design §8): one SIP's cubes laid out as its cube grid, each cube's
router mesh and UCIe connections at their floor-plan positions (spec_fabric §1.4), every link coloured by
its utilisation (busy / the result's span; the busier direction of a pair).  Links the workload did not
use are drawn thin and grey; links outside the cube meshes (IO chiplet, PCIe, switch) are not drawn."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from kbfast.report.figures import pyplot, save_figure
from kbfast.topology.builder import Tables
from kbfast.topology.floorplan import build_floorplan
from kbfast.topology.names import node_name

CUBE_GAP_MM = 5.0          # drawn space between neighbouring cubes
CONN_OFFSET_MM = 0.8       # a UCIe connection drawn this far outside its router
PORT_OFFSET_MM = 1.6       # a UCIe endpoint: the middle of its connections, this far outside
_NAME = re.compile(r"^sip(\d+)\.cube(\d+)\.(.+)$")
_OUT = {"N": (0.0, -1.0), "S": (0.0, 1.0), "E": (1.0, 0.0), "W": (-1.0, 0.0)}


def _local_xy(t: Tables):
    """Cube-local (x, y) mm of routers, UCIe connections and PEs, by local name."""
    plan = build_floorplan(t.spec.cube)
    out: dict[str, tuple[float, float]] = {}
    for i, (r, c) in enumerate(plan.routers):
        out[f"r{r}c{c}"] = plan.router_xy(i)
    for port, routers in plan.conn_router.items():
        dx, dy = _OUT[port]
        for k, r in enumerate(routers):
            x, y = plan.router_xy(r)
            out[f"ucie-{port}.conn{k}"] = (x + CONN_OFFSET_MM * dx, y + CONN_OFFSET_MM * dy)
        xs, ys = zip(*(plan.router_xy(r) for r in routers))
        out[f"ucie-{port}"] = (float(np.mean(xs)) + PORT_OFFSET_MM * dx, float(np.mean(ys)) + PORT_OFFSET_MM * dy)
    for i, xy in enumerate(plan.pe_xy):
        out[f"pe{i}.pe_dma"] = xy
    return out


def _position(t: Tables, local_xy: dict, name: str) -> tuple[int, tuple[float, float]] | None:
    """(SIP, global (x, y) mm) of a node on the drawing, or None when it is not drawn."""
    m = _NAME.match(name)
    if not m or m.group(3) not in local_xy:
        return None
    sip, cube = int(m.group(1)), int(m.group(2))
    w = t.spec.sip.cube_mesh.w
    g = t.spec.cube.geometry
    x, y = local_xy[m.group(3)]
    return sip, ((cube % w) * (g.w_mm + CUBE_GAP_MM) + x, (cube // w) * (g.h_mm + CUBE_GAP_MM) + y)


def plot_link_heatmap(t: Tables, edges: pd.DataFrame, out: Path, label: str, sip: int | None = None) -> Path:
    """Draw ``edges`` (a result's per-link table: src, dst, utilization) on SIP ``sip`` (default: the SIP of
    the busiest drawn link) and write ``out``."""
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Rectangle

    local_xy = _local_xy(t)
    used: dict[tuple, float] = {}
    sip_of: dict[tuple, int] = {}
    for src, dst, u in zip(edges["src"], edges["dst"], edges["utilization"]):
        a, b = _position(t, local_xy, src), _position(t, local_xy, dst)
        if a is None or b is None or a[0] != b[0]:
            continue
        key = (a[0], *sorted((a[1], b[1])))
        used[key] = max(used.get(key, 0.0), float(u))
        sip_of[key] = a[0]
    if sip is None:
        sip = sip_of[max(used, key=lambda k: (used[k], -sip_of[k]))] if used else 0
    first = t.layout.cube_node_base(sip, 0)
    last = first + t.spec.n_cubes_per_sip * t.layout.nodes_per_cube
    grey = []
    in_sip = np.flatnonzero((t.edge_src >= first) & (t.edge_src < last) & (t.edge_dst >= first) & (t.edge_dst < last))
    for e in in_sip.tolist():
        a = _position(t, local_xy, node_name(t, int(t.edge_src[e])))
        b = _position(t, local_xy, node_name(t, int(t.edge_dst[e])))
        if a is not None and b is not None and (sip, *sorted((a[1], b[1]))) not in used:
            grey.append((a[1], b[1]))
    hot = sorted((k for k in used if sip_of[k] == sip), key=lambda k: used[k])
    fig, ax = pyplot().subplots(figsize=(9, 8))
    ax.add_collection(LineCollection(grey, colors="#d0d0d0", linewidths=0.6, zorder=1))
    vmax = max((used[k] for k in hot), default=0.0)
    lc = LineCollection([k[1:] for k in hot], cmap="inferno_r", linewidths=2.6, zorder=2)
    lc.set_array(np.array([100 * used[k] for k in hot]))
    lc.set_clim(0, max(100 * vmax, 1e-9))
    ax.add_collection(lc)
    g, mesh = t.spec.cube.geometry, t.spec.sip.cube_mesh
    for c in range(mesh.w * mesh.h):
        x0, y0 = (c % mesh.w) * (g.w_mm + CUBE_GAP_MM), (c // mesh.w) * (g.h_mm + CUBE_GAP_MM)
        ax.add_patch(Rectangle((x0, y0), g.w_mm, g.h_mm, fill=False, lw=0.8, ec="#888"))
        ax.text(x0 + 0.3, y0 + 0.9, f"cube{c}", fontsize=7, color="#666")
    ax.set_xlim(-2, mesh.w * (g.w_mm + CUBE_GAP_MM))
    ax.set_ylim(mesh.h * (g.h_mm + CUBE_GAP_MM), -2)
    ax.set_aspect("equal")
    ax.set_xlabel(f"x on the SIP (mm; cubes drawn {CUBE_GAP_MM:g} mm apart)")
    ax.set_ylabel("y on the SIP (mm)")
    ax.set_title(f"{t.spec.name}, SIP {sip}: link utilisation\n{label}", fontsize=10)
    fig.colorbar(lc, ax=ax, shrink=0.8, label="link utilisation (% of the span, busier direction)")
    return save_figure(fig, out, dpi=120)
