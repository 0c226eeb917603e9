"""The simulation core under both evaluators (docs/README.md, "Architecture").

``heap`` the event queue, ``agents`` agent programs, DMA channels and IPCQ credit flow, ``fabric`` the
shared wire and controller formulas, ``lowering`` a Program packed for the kernels, ``diagnostics``
deadlock, budget and I1 reports.  ``kbfast.fast`` and ``kbfast.exact`` stand on it; it imports neither.
"""
