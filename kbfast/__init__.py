"""kbfast: a fast performance model of the AHBM accelerator system."""

__version__ = "0.1.0"
