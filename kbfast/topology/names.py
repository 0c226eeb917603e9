"""Node names <-> node ids (spec_fabric §1.5), computed from the id layout, never stored per node."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from kbfast.errors import UnknownNodeError, closest
from kbfast.topology.builder import Tables

SWITCH_NAME = "fabric.switch0"
_NAME = re.compile(r"^sip(\d+)\.(?:cube(\d+)\.)?(.+)$")
_CUBE = re.compile(r"cube\d+")


@lru_cache(maxsize=64)
def _local_index(names: tuple[str, ...]) -> dict[str, int]:
    return {n: i for i, n in enumerate(names)}


def full_name(t: Tables, name: str) -> str:
    """``name`` with its SIP: a short name, one that starts at its cube or IO chiplet (``cube1.pe0.pe_dma``,
    ``io0.pcie_ep``), is on SIP 0 (``sip0.cube1.pe0.pe_dma``); any other name is returned unchanged."""
    head = name.partition(".")[0]
    if _CUBE.fullmatch(head) or head in _io_chiplets(t.io_names):
        return f"sip0.{name}"
    return name


@lru_cache(maxsize=64)
def _io_chiplets(io_names: tuple[str, ...]) -> frozenset[str]:
    """The IO chiplet ids (``io0``) of a SIP's IO-local names."""
    return frozenset(n.partition(".")[0] for n in io_names)


def node_id(t: Tables, name: str, typed: str | None = None) -> int:
    """Id of a node name such as ``sip0.cube3.r0c4`` or ``sip1.io0.pcie_ep``; a short name without the SIP
    (``cube3.r0c4``) is on SIP 0 (:func:`full_name`).  A refusal names the node as the user ``typed`` it (default
    ``name``: ``cube1.pe9`` for ``sip0.cube1.pe9.pe_dma``)."""
    if name == SWITCH_NAME:
        return 0
    typed, name = typed or name, full_name(t, name)
    m = _NAME.match(name)
    lay = t.layout
    if m:
        sip, cube, rest = int(m.group(1)), m.group(2), m.group(3)
        if sip >= lay.n_sips:
            raise UnknownNodeError(f"unknown node {typed!r}: SIP {sip} does not exist (the system has "
                                   f"{lay.n_sips} SIPs, sip0 to sip{lay.n_sips - 1})")
        if cube is None:
            local = _local_index(t.io_names).get(rest)
            if local is not None:
                return lay.sip_node_base(sip) + local
            raise UnknownNodeError(f"unknown node {typed!r}: {_hint(typed, rest, t.io_names, 'an IO chiplet')}")
        c = int(cube)
        if c >= lay.n_cubes_per_sip:
            raise UnknownNodeError(f"unknown node {typed!r}: cube {c} does not exist (a SIP has "
                                   f"{lay.n_cubes_per_sip} cubes, cube0 to cube{lay.n_cubes_per_sip - 1})")
        local = _local_index(t.cube_names).get(rest)
        if local is not None:
            return lay.cube_node_base(sip, c) + local
        raise UnknownNodeError(f"unknown node {typed!r}: {_hint(typed, rest, t.cube_names, 'a cube')}")
    raise UnknownNodeError(f"unknown node {typed!r}: names look like sip0.cube0.pe0.pe_dma, sip0.cube0.r0c0, "
                           f"sip0.io0.pcie_ep or {SWITCH_NAME} (a name without its SIP, such as cube0.pe0, is on "
                           "sip0)")


def _hint(typed: str, local: str, names: tuple[str, ...], where: str) -> str:
    """What to type instead of ``typed``, whose name inside its cube or IO chiplet, ``local``, is unknown: the
    close names, written as the user wrote the rest (``sip0.cube1.r0c5``), else one example of each kind of name
    in ``where`` (a cube has some 150 names: ``r0c0``, ``pe0.pe_cpu``, ``hbm_ctrl.pe0``, ...)."""
    pe = re.fullmatch(r"pe(\d+)\.pe_dma", local)
    n_pes = sum(n.endswith(".pe_dma") for n in names)
    if pe and int(pe.group(1)) >= n_pes:           # a PE beyond the cube's (``cube1.pe9``, a PE's shorthand)
        return f"a cube has {n_pes} PEs, pe0 to pe{n_pes - 1}"
    return (closest(local, names, typed[:len(typed) - len(local)] if typed.endswith(local) else "")
            or f"names in {where} look like {', '.join(_examples(names))}")


@lru_cache(maxsize=64)
def _examples(names: tuple[str, ...]) -> tuple[str, ...]:
    """The first name (sorted) of each kind in ``names``: a kind is the name's first part with its numbers
    left out, and whether more parts follow (``pe0.pe_dma`` and ``pe7.pe_tcm`` are one kind, ``r0c0`` another)."""
    kinds: dict[str, str] = {}
    for n in sorted(names):
        head, dot, _ = n.partition(".")
        kinds.setdefault(re.sub(r"\d+", "#", head) + dot, n)
    return tuple(kinds.values())


def locate(t: Tables, node: int) -> tuple[int, int, int]:
    """(sip, cube, local) of a node id; cube is -1 inside the IO chiplet, sip -1 for the switch."""
    if node == 0:
        return -1, -1, 0
    lay = t.layout
    sip, rest = divmod(node - 1, lay.nodes_per_sip)
    if rest < lay.io_nodes:
        return sip, -1, rest
    cube, local = divmod(rest - lay.io_nodes, lay.nodes_per_cube)
    return sip, cube, local


def cube_locals(t: Tables, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cube, local) of each of ``nodes``, all inside cubes (:func:`locate` over an array)."""
    lay = t.layout
    rest = (np.asarray(nodes, np.int64) - 1) % lay.nodes_per_sip - lay.io_nodes
    if np.any(rest < 0) or np.any(np.asarray(nodes) == 0):
        raise ValueError("cube_locals: a node is not inside a cube")
    return np.divmod(rest, lay.nodes_per_cube)


@lru_cache(maxsize=64)
def _own_ctrl_lut(names: tuple[str, ...]) -> np.ndarray:
    """Per cube-local index: the local index of ``hbm_ctrl.pe{x}`` for a block ``pe{x}.*`` of PE x, else -1."""
    index = _local_index(names)
    lut = np.full(len(names), -1, np.int64)
    for i, name in enumerate(names):
        pe, dot, _ = name.partition(".")
        if dot and pe.startswith("pe") and pe[2:].isdigit():
            lut[i] = index[f"hbm_ctrl.{pe}"]
    lut.flags.writeable = False
    return lut


def own_hbm_ctrls(t: Tables, pe_nodes: np.ndarray) -> np.ndarray:
    """The HBM controller of each PE's own slice: ``sip{S}.cube{C}.hbm_ctrl.pe{X}`` for any block of
    ``sip{S}.cube{C}.pe{X}`` (:func:`hbm_ctrl` over an array, by id arithmetic: the controller and the
    PE blocks sit at fixed offsets of the cube template)."""
    nodes = np.asarray(pe_nodes, np.int64)
    _, local = cube_locals(t, nodes)
    ctrl = _own_ctrl_lut(tuple(t.cube_names))[local]
    if np.any(ctrl < 0):
        bad = int(nodes[np.flatnonzero(ctrl < 0)[0]])
        raise ValueError(f"own_hbm_ctrls: {node_name(t, bad)} is not a PE block")
    return nodes - local + ctrl


def node_name(t: Tables, node: int) -> str:
    """Name of a node id (inverse of :func:`node_id`)."""
    if not 0 <= node < t.n_nodes:
        raise UnknownNodeError(f"node id {node} is outside 0..{t.n_nodes - 1}")
    sip, cube, local = locate(t, node)
    if sip < 0:
        return SWITCH_NAME
    if cube < 0:
        return f"sip{sip}.{t.io_names[local]}"
    return f"sip{sip}.cube{cube}.{t.cube_names[local]}"


def sip_local_names(t: Tables) -> list[str]:
    """Names of one SIP's nodes in SIP-local id order, without the ``sip{S}.`` prefix."""
    return list(t.io_names) + [f"cube{c}.{n}" for c in range(t.layout.n_cubes_per_sip) for n in t.cube_names]


def node_names(t: Tables, nodes: np.ndarray) -> list[str]:
    """The name of each of ``nodes``."""
    return [node_name(t, int(n)) for n in nodes]


def pe_block(t: Tables, sip: int, cube: int, pe: int, block: str = "pe_dma") -> int:
    """Id of a PE block, e.g. ``pe_block(t, 0, 3, 2)`` is ``sip0.cube3.pe2.pe_dma``."""
    return node_id(t, f"sip{sip}.cube{cube}.pe{pe}.{block}")


def hbm_ctrl(t: Tables, sip: int, cube: int, pe: int) -> int:
    """Id of PE ``pe``'s HBM controller, ``sip{sip}.cube{cube}.hbm_ctrl.pe{pe}``."""
    return node_id(t, f"sip{sip}.cube{cube}.hbm_ctrl.pe{pe}")


def io_node(t: Tables, sip: int, what: str) -> int:
    """Id of an IO-chiplet node: ``what`` in pcie_ep, io_cpu, io_noc."""
    chip = t.spec.sip.io_chiplets[0].id
    return node_id(t, f"sip{sip}.{chip}.{what}")
