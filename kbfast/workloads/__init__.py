"""Workload generators: each emits Program IR and nothing else."""
