"""Reference figures of the kernbench simulator and the parameter sets fitted by ``kbfast calibrate`` (design §12)."""
