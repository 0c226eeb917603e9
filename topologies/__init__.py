"""Topology presets shipped with kbfast (YAML files in this folder)."""
