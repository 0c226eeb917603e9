"""The measuring layer: the workload registry and one module per workload kind (docs/README.md)."""
