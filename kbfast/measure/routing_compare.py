"""How much of a congestion result is the router: probe cases evaluated under every routing policy.

For each probe case, each size and each policy of :data:`kbfast.topology.routing.POLICIES`
(``kernbench``, ``balanced``, ``hops``; docs/routing.md) the same Program is built with
``Router(tables, policy=...)`` and run through both evaluators of :mod:`kbfast.measure.probe` (the fast one
may replay a small contended Program exactly, see ``fast_method``), and through the fast path's own
fluid estimate (:func:`kbfast.fast.evaluate.run_fast`, no replay).  Next to the makespans the frame
lists which UCIe connections the case's routes load, how many flows each carries, how often a route
uses a cube's UCIe endpoint as a zero-length bus between two connections of one port, and the most
loaded edge.

The case endpoints come from the catalogue of the topology's own ``routing.policy`` (the "worst"
remote slice of REMOTE_CUBE_PE_REMOTE_WORST, for instance, is chosen by routing weight), so every
policy routes the very same flows.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import pandas as pd

from kbfast.config.schema import SystemSpec
from kbfast.errors import KbfastError
from kbfast.sim.lowering import data_routes
from kbfast.ir import Op, Program
from kbfast.measure.probe import evaluate_case, exact_evaluator, fast_evaluator, fluid_evaluator
from kbfast.measure.rows import rel_error
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.kinds import EdgeKind, NodeKind
from kbfast.topology.names import node_name
from kbfast.topology.routing import POLICIES, Router
from kbfast.workloads.probe_catalogue import DEFAULT_PROBE_BYTES, ProbeCase, build_catalogue, select

EXTRA_CASES = ("REMOTE_CUBE_PE_REMOTE_WORST", "REMOTE_SIP")
REFERENCE_POLICY = "kernbench"
COLUMNS = ["case", "group", "n_issuers", "nbytes", "policy", "exact_makespan_ns", "fast_makespan_ns",
           "fast_rel_error", "fast_method", "fluid_makespan_ns", "fluid_rel_error", "exact_vs_kernbench", "same_routes_as_kernbench", "ucie_conns", "ucie_edges",
           "bus_passes", "max_edge", "max_edge_kind", "max_edge_bw_gbs", "max_edge_flows", "max_edge_drain_ns"]
_CONN_KINDS = (int(NodeKind.UCIE_CONN), int(NodeKind.IO_CONN))


def default_case_names(t: Tables, router: Router) -> list[str]:
    """Every case of group ``congestion``, then REMOTE_CUBE_PE_REMOTE_WORST and REMOTE_SIP (those that exist)."""
    catalogue = build_catalogue(t, router)
    names = [n for n, c in catalogue.items() if c.group == "congestion"]
    return names + [n for n in EXTRA_CASES if n in catalogue and n not in names]


def flow_routes(p: Program) -> list[np.ndarray]:
    """The data-carrying route of every DMA flow of a Program (``kbfast.sim.lowering.data_routes``: the
    reverse route for a host read, the forward route otherwise)."""
    routes = data_routes(p)
    dma = np.flatnonzero((p.op_code == Op.DMA_WRITE) | (p.op_code == Op.DMA_READ))
    return [p.route(int(routes[o])) for o in dma]


def edge_label(t: Tables, e: int) -> str:
    """``sip0.cube0.ucie-E.conn0 -> sip0.cube0.ucie-E``."""
    return f"{node_name(t, int(t.edge_src[e]))} -> {node_name(t, int(t.edge_dst[e]))}"


def bus_passes(t: Tables, edges: np.ndarray) -> list[tuple[int, int, int]]:
    """(connection in, UCIe endpoint, connection out) of every place where a route enters a UCIe
    endpoint from one of its connections and leaves it by another connection: the endpoint used as a
    zero-length bus.  Two consecutive ``ucie_internal`` edges are exactly that, since an endpoint's
    only ``ucie_internal`` edges go to its own connections."""
    internal = t.edge_kind[edges] == EdgeKind.UCIE_INTERNAL
    at = np.flatnonzero(internal[:-1] & internal[1:])
    return [(int(t.edge_src[edges[i]]), int(t.edge_dst[edges[i]]), int(t.edge_dst[edges[i + 1]])) for i in at]


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 3, 5] -> ``0..3,5``."""
    parts, run = [], [indices[0]]
    for i in indices[1:]:
        if i == run[-1] + 1:
            run.append(i)
            continue
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}")
        run = [i]
    parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1]}")
    return ",".join(parts)


def _short(name: str) -> str:
    """Names inside sip0 (where every probe starts) drop their ``sip0.`` prefix."""
    return name[5:] if name.startswith("sip0.") else name


def compact_conns(t: Tables, load: dict[int, int]) -> str:
    """Compact text of the loaded UCIe connection edges, ``{ucie_internal edge id: flows}``.

    ``cube0.ucie-E.conn0 out x8`` is 8 flows on ``conn0 -> ucie-E`` (from the routers into the
    endpoint, towards the link); ``cube1.ucie-W.conn0..3 in x2`` is 2 flows on each of
    ``ucie-W -> conn0`` .. ``conn3`` (from the endpoint to the routers).  ``out`` and ``in`` on the
    same port of the same cube mean that a route used the endpoint as a bus.  Connections of one
    port, direction and flow count are merged into ranges (``conn1,3``, ``conn0..2``); names inside
    sip0 drop ``sip0.``.  Items are in topology order (cube, port N/E/S/W, out before in).
    """
    groups: dict[tuple[int, str, int], list[int]] = defaultdict(list)
    for e, n in load.items():
        src, dst = int(t.edge_src[e]), int(t.edge_dst[e])
        out = int(t.node_kind[src]) in _CONN_KINDS
        conn, endpoint = (src, dst) if out else (dst, src)
        index = int(node_name(t, conn).rsplit(".conn", 1)[1])
        groups[(endpoint, "out" if out else "in", n)].append(index)
    keys = sorted(groups, key=lambda k: (k[0], k[1] == "in", -k[2]))
    return ", ".join(_conn_item(t, k, groups[k]) for k in keys)


def top_conns(text: str, limit: int) -> list[str]:
    """The items of a :func:`compact_conns` text, cut to the ``limit`` with the most flows per connection
    (most first, ties in topology order) plus ``+K more`` when some are left out."""
    items = text.split(", ") if text else []
    if len(items) <= limit:
        return items
    top = sorted(items, key=lambda s: -int(s.rsplit(" x", 1)[1]))[:limit]
    return top + [f"+{len(items) - limit} more"]


def _conn_item(t: Tables, key: tuple[int, str, int], indices: list[int]) -> str:
    endpoint, direction, n = key
    return f"{_short(node_name(t, endpoint))}.conn{_ranges(sorted(indices))} {direction} x{n}"


def ucie_load(t: Tables, routes: list[np.ndarray], usage: Counter | None = None) -> dict[int, int]:
    """Flows per ``ucie_internal`` edge (connection <-> endpoint) over ``routes``, by edge id (``usage``: the
    flows per edge of those routes, when the caller has counted them already)."""
    usage = usage if usage is not None else Counter(int(e) for r in routes for e in r)
    return {e: n for e, n in sorted(usage.items()) if t.edge_kind[e] == EdgeKind.UCIE_INTERNAL}


def route_load(t: Tables, routes: list[np.ndarray]) -> dict:
    """Per-case routing figures: UCIe connection edges with their flows, bus passes, most loaded edge.

    The most loaded edge is the one with the most flows per GB/s (the one that needs the longest to
    carry its flows' bytes; edges of unlimited bandwidth only when there is no other), ties to more
    flows, then the smaller edge id.
    """
    usage = Counter(int(e) for r in routes for e in r)
    ucie = ucie_load(t, routes, usage)
    row: dict = {"ucie_conns": compact_conns(t, ucie), "ucie_edges": {edge_label(t, e): n for e, n in ucie.items()},
                 "bus_passes": sum(len(bus_passes(t, r)) for r in routes), "max_edge": "", "max_edge_kind": "",
                 "max_edge_bw_gbs": math.nan, "max_edge_flows": 0}
    if usage:
        e = min(usage, key=lambda e: (-usage[e] / float(t.edge_bw_gbs[e]), -usage[e], e))
        row.update(max_edge=edge_label(t, e), max_edge_kind=EdgeKind(int(t.edge_kind[e])).name.lower(),
                   max_edge_bw_gbs=float(t.edge_bw_gbs[e]), max_edge_flows=usage[e])
    return row


def compare_routing(spec: SystemSpec | Tables, cases: Sequence[str] | None = None,
                    sizes: Sequence[int] | None = None, policies: Sequence[str] = POLICIES) -> pd.DataFrame:
    """One row per (case, size, policy), cases in the given order, then sizes, then policies.

    ``cases``: probe case names (default :func:`default_case_names`); an unknown name raises a
    :class:`~kbfast.errors.KbfastError` with a did-you-mean hint.  ``sizes``: bytes per issuer
    (default 16 KiB).  Columns (:data:`COLUMNS`):

    * ``exact_makespan_ns``, ``fast_makespan_ns``: max DMA end - min issue (:func:`kbfast.measure.probe.evaluate_case`) with
      :func:`kbfast.measure.probe.exact_evaluator` and :func:`kbfast.measure.probe.fast_evaluator`; ``fast_rel_error`` =
      (fast - exact) / exact; ``fast_method``: how the fast evaluator got its estimate ("" if it does not say);
      ``fluid_makespan_ns``, ``fluid_rel_error``: the same with :func:`fluid_evaluator`;
    * ``exact_vs_kernbench``: exact makespan / the ``kernbench`` row's (same case and size) - 1, NaN without one;
      ``same_routes_as_kernbench``: every flow takes the same edges as under ``kernbench`` (None without it);
    * ``ucie_conns``: :func:`compact_conns`; ``ucie_edges``: ``{"conn -> endpoint" or "endpoint -> conn": flows}``
      over the ``ucie_internal`` edges; ``bus_passes``: endpoint-as-bus passes summed over the flows
      (:func:`bus_passes`);
    * ``max_edge`` (``"src -> dst"``), ``max_edge_kind``, ``max_edge_bw_gbs``, ``max_edge_flows``: the most loaded
      edge (:func:`route_load`); ``max_edge_drain_ns`` = flows x size / bandwidth, the time that edge alone needs.

    Routes do not depend on the size, so the route columns repeat across the sizes of a case and policy.
    """
    t = spec if isinstance(spec, Tables) else build_tables(spec)
    sizes = list(dict.fromkeys(sizes)) if sizes else [DEFAULT_PROBE_BYTES]
    if any(n <= 0 for n in sizes):
        raise KbfastError(f"size {min(sizes)} B: a probe needs at least 1 byte per issuer")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise KbfastError(f"unknown routing policy {unknown[0]!r}; use one of {', '.join(POLICIES)}")
    policies = list(dict.fromkeys(policies))
    home = Router(t)
    chosen: list[ProbeCase] = select(build_catalogue(t, home), list(dict.fromkeys(cases or default_case_names(t, home))))
    # The reference first, so that the others can be compared with its routes.
    routers = {p: home if p == home.policy else Router(t, policy=p)
               for p in sorted(policies, key=lambda p: p != REFERENCE_POLICY)}
    rows = []
    for case in chosen:
        ref_routes = None
        for policy, router in routers.items():
            routes = flow_routes(case.program(t, router, sizes[0]))
            key = [tuple(r.tolist()) for r in routes]
            if policy == REFERENCE_POLICY:
                ref_routes = key
            load = route_load(t, routes)
            for nbytes in sizes:
                exact = evaluate_case(t, router, case, nbytes, exact_evaluator)["makespan_ns"]
                fast_row = evaluate_case(t, router, case, nbytes, fast_evaluator)
                fast = fast_row["makespan_ns"]
                fluid = evaluate_case(t, router, case, nbytes, fluid_evaluator)["makespan_ns"]
                rows.append({"case": case.name, "group": case.group, "n_issuers": case.n_issuers, "nbytes": nbytes,
                             "policy": policy, "exact_makespan_ns": exact, "fast_makespan_ns": fast,
                             "fast_rel_error": rel_error(fast, exact),
                             "fast_method": str(fast_row.get("method", "")), "fluid_makespan_ns": fluid,
                             "fluid_rel_error": rel_error(fluid, exact),
                             "same_routes_as_kernbench": None if ref_routes is None else key == ref_routes, **load,
                             "max_edge_drain_ns": load["max_edge_flows"] * nbytes / load["max_edge_bw_gbs"]})
    df = pd.DataFrame(rows)
    ref = {(r.case, r.nbytes): r.exact_makespan_ns for r in df.itertuples() if r.policy == REFERENCE_POLICY}
    df["exact_vs_kernbench"] = [m / ref[(c, n)] - 1.0 if ref.get((c, n)) else math.nan
                                for c, n, m in zip(df["case"], df["nbytes"], df["exact_makespan_ns"])]
    rank = {"case": {c.name: i for i, c in enumerate(chosen)}, "nbytes": {n: i for i, n in enumerate(sizes)},
            "policy": {p: i for i, p in enumerate(policies)}}
    df = df.sort_values(["case", "nbytes", "policy"], key=lambda col: col.map(rank[col.name]), kind="stable")
    return df[COLUMNS].reset_index(drop=True)


__all__ = ["COLUMNS", "EXTRA_CASES", "bus_passes", "compact_conns", "compare_routing", "default_case_names",
           "flow_routes", "route_load", "top_conns", "ucie_load"]
