"""Model descriptions shipped with kbfast (YAML files in this folder; docs/models.md)."""
