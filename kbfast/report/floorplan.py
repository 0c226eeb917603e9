"""Draw one cube's floor plan (spec_fabric §1.4) with matplotlib."""

from __future__ import annotations

from pathlib import Path

from kbfast.config.schema import SystemSpec
from kbfast.report.figures import pyplot, save_figure
from kbfast.topology.floorplan import CORNERS, build_floorplan


def plot_floorplan(spec: SystemSpec, out: Path) -> Path:
    """Routers, HBM hole, PEs with their attachments, M_CPU, SRAM and UCIe connections."""
    from matplotlib.patches import Rectangle

    plan = build_floorplan(spec.cube)
    w, h = spec.cube.geometry.w_mm, spec.cube.geometry.h_mm
    fig, ax = pyplot().subplots(figsize=(7, 7))
    ax.add_patch(Rectangle((0, 0), w, h, fill=False, lw=1.5))
    ncol = len(plan.col_x)
    hole_x0 = plan.col_x[ncol // 2 - 1] - 0.6
    hole_x1 = plan.col_x[ncol // 2] + 0.6
    hbm_rows = [r for r in range(len(plan.row_y)) if all((r, c) not in plan.routers for c in (ncol // 2 - 1, ncol // 2))]
    if hbm_rows:
        y0, y1 = plan.row_y[hbm_rows[0]] - 0.6, plan.row_y[hbm_rows[-1]] + 0.6
        ax.add_patch(Rectangle((hole_x0, y0), hole_x1 - hole_x0, y1 - y0, color="#f3d9a4", label="HBM hole"))
    pos = {rc: plan.router_xy(i) for i, rc in enumerate(plan.routers)}
    for (r, c), (x, y) in pos.items():
        for nb in ((r, c + 1), (r + 1, c)):
            if nb in pos:
                ax.plot([x, pos[nb][0]], [y, pos[nb][1]], color="#999", lw=1, zorder=1)
    xs, ys = zip(*pos.values())
    ax.scatter(xs, ys, marker="s", s=140, color="#4a7bb7", zorder=2, label="router")
    for (r, c), (x, y) in pos.items():     # below and right of the marker: clear of a PE drawn on its router
        ax.text(x + 0.3, y + 0.3, f"r{r}c{c}", ha="left", va="top", fontsize=6)
    per_corner = spec.cube.pe_layout.pe_per_corner
    for i, ((px, py), r) in enumerate(zip(plan.pe_xy, plan.pe_router)):
        rx, ry = plan.router_xy(r)
        ax.plot([px, rx], [py, ry], color="#2a9d55", lw=1, ls="--", zorder=1,
                label="PE to its router" if i == 0 else None)
        ax.scatter([px], [py], s=220, color="#2a9d55", zorder=3, label="PE" if i == 0 else None)
        ax.text(px, py, f"PE{i}", ha="center", va="center", fontsize=6, color="white", zorder=4)
        if i % per_corner == 0:            # towards the cube's corner, between its two UCIe arrows
            dx, dy = (-0.8 if px < w / 2 else 0.8), (-0.8 if py < h / 2 else 0.8)
            ax.text(px + dx, py + dy, CORNERS[i // per_corner], ha="center", va="center", fontsize=7)
    for name, r, color in (("M_CPU", plan.m_cpu_router, "#b23a48"), ("SRAM", plan.sram_router, "#7b4ab7")):
        x, y = plan.router_xy(r)
        ax.scatter([x - 0.9], [y], marker="D", s=90, color=color, zorder=3)
        ax.text(x - 0.9, y + 0.55, name, ha="center", va="top", fontsize=6, color=color)   # 6: clear of the edge
    off = {"N": (0, -1.0), "S": (0, 1.0), "E": (1.0, 0), "W": (-1.0, 0)}
    for port, routers in plan.conn_router.items():
        dx, dy = off[port]
        for i, r in enumerate(routers):
            x, y = plan.router_xy(r)
            ax.annotate("", xy=(x + dx, y + dy), xytext=(x, y), arrowprops={"arrowstyle": "-|>", "color": "#e07a1f"})
            ax.text(x + 1.3 * dx, y + 1.3 * dy, f"{port}{i}", fontsize=6, ha="center", va="center", color="#e07a1f")
    ax.set_xlim(-1.8, w + 1.8)
    ax.set_ylim(h + 1.8, -1.8)
    ax.set_aspect("equal")
    ax.set_xlabel("x [mm]")
    ax.set_ylabel("y [mm]")
    ax.set_title(f"{spec.name}: one cube ({len(plan.routers)} routers, UCIe connections in orange)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=4, fontsize=8)
    return save_figure(fig, out, dpi=130)
