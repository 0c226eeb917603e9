"""Validated system descriptions: schema and loader."""

from kbfast.config.loader import DEFAULT_TOPOLOGY, load_system, parse_override, preset_names
from kbfast.config.schema import SystemSpec

__all__ = ["DEFAULT_TOPOLOGY", "SystemSpec", "load_system", "parse_override", "preset_names"]
