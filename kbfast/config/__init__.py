"""Validated system descriptions and what is read with them (the lowest layer: imports only ``kbfast.errors``).

``schema`` (the typed description, the edge kind names), ``loader`` (presets, ``base:`` chains, parameter sets,
overrides, validation; built from ``yaml_reading``, ``param_sets``, ``overrides`` and ``validation``), ``models``
(model files), ``units`` (sizes and shapes), ``budget`` (memory estimates and the limit).
"""

from kbfast.config.loader import DEFAULT_TOPOLOGY, load_system, parse_override, preset_names
from kbfast.config.schema import SystemSpec

__all__ = ["DEFAULT_TOPOLOGY", "SystemSpec", "load_system", "parse_override", "preset_names"]
