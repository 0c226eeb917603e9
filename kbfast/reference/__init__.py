"""Readable reference simulators that check the Numba evaluators (``pip install kbfast[reference]``)."""
