"""Calibration against the kernbench reference figures: evaluate every row, fit free parameters (design §12).

:data:`ROWS` maps every case of ``calibration/reference_public.csv`` to how it is measured on a system spec
in one mode (``fast`` path or ``exact`` replay) and what passes:

* **latency** (spec_fabric §8, spec_memory §10.2): one isolated probe transfer; ``err = measured /
  reference - 1``, ok when ``|err| <= 3 %``;
* **ordering** (spec_pe §10): probe latencies at 16 KiB, ok when strictly increasing;
* **centre vs corner** (spec_ccl §8.1): ``change = centre / corner - 1`` of the lrab all-reduce at 96 KiB,
  ok when ``centre < corner`` and ``0.02 <= -change <= 0.30``.  The reference fractions come from an older
  model, so only the sign and a magnitude band are checked;
* **upper bound**: the torus6 96 KiB all-reduce lies between the older model's 17.2 µs and the 30 µs guard;
* **buffer kinds**: at 64 KiB on torus6, ``tcm < hbm < sram``, each ratio to tcm within +-25 % of the
  reference ratio (1.8 and 2.0);
* **IPCQ overhead** (spec_ccl §8.2, ADR-0023 T5): IPCQ send/recv minus one DMA write of the same size, below
  100 ns on the hops h3 and h4 for every size from 128 B to 10 KB;
* **GEMM** (spec_pe §5.6): the 32x3072x32 load_ref composite window (992 ns) and the latency with the up-front
  A load (1765 ns) within 3 %; the tile counts of the reference shapes; a multi-tile GEMM slower than one
  tile, and a repeat identical;
* **retired**: ``ipcq_vs_dma_intercube`` ("IPCQ >= raw DMA") was measured on an older model.  Today's
  semantics put IPCQ about 12 ns below raw DMA (spec README, decisions).  The row reports that gap and is
  never a failure.

The all-reduce rows run on the given spec with the SIP arrangement (``sips``) of the torus6, ring6 or mesh6
preset, so a fitted or overridden parameter reaches them too.

:func:`fit` adjusts named parameters with ``scipy.optimize.least_squares`` on the relative errors of the
latency rows.  It uses the fast path only: those rows are isolated transfers, where fast == exact (parity
P1, design §7).

The package: ``systems`` (the reference figures, the systems the rows run on: :class:`Bench`), ``rows``
(how each case is measured and what passes: :data:`ROWS`, :func:`evaluate_rows`), ``fits`` (:func:`fit`)
and ``param_sets`` (fitted parameter sets, their files and documents).
"""


from kbfast.calibrate.fits import FIT_DEFAULTS, NO_SENSITIVITY, FitParam, FitResult, fit, parse_fit, sensitivity_scale
from kbfast.calibrate.param_sets import param_set_document, param_set_file, save_param_set, topology_labels
from kbfast.calibrate.rows import (GEMM_TILE_COUNTS, LATENCY_ROWS, ROWS, BufferKindRow, CentreCornerRow, GemmOrderingRow,
                                   GemmRow, GemmTileCountRow, IpcqOverheadRow, LatencyRow, OrderingRow, Outcome,
                                   RetiredIpcqRow, Row, WindowRow, all_ok, buffer_kind_targets, chain_text,
                                   check_registry, evaluate_rows, older_torus_ns, probe_table)
from kbfast.calibrate.systems import (COLUMNS, FILE_COLUMNS, MODES, ORDER_BYTES, PE2PE_HOPS, PE2PE_SIZES,
                                      REFERENCE_FILE, TILE_64K, TILE_96K, TOL, Bench, KiB, derive, reference_csv,
                                      reference_table)

__all__ = [
    "BufferKindRow", "Bench", "COLUMNS", "CentreCornerRow", "FILE_COLUMNS", "FIT_DEFAULTS", "FitParam", "FitResult",
    "GEMM_TILE_COUNTS",
    "GemmOrderingRow", "GemmRow", "GemmTileCountRow", "IpcqOverheadRow", "KiB", "LATENCY_ROWS", "LatencyRow", "MODES",
    "NO_SENSITIVITY", "ORDER_BYTES", "OrderingRow", "Outcome", "PE2PE_HOPS", "PE2PE_SIZES", "REFERENCE_FILE", "ROWS",
    "RetiredIpcqRow", "Row", "TILE_64K", "TILE_96K", "TOL", "WindowRow", "all_ok", "buffer_kind_targets", "chain_text",
    "check_registry", "derive", "evaluate_rows", "fit", "older_torus_ns", "param_set_document",
    "param_set_file", "parse_fit", "probe_table", "reference_csv", "reference_table", "save_param_set",
    "sensitivity_scale", "topology_labels",
]
