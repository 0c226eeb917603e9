"""One vocabulary for "method": how a figure was made, and which of those the fast path may use.

A *method* is how one figure was made.  Every result row's ``method`` column holds one of :data:`METHODS`
(a model step's row joins its pieces' methods with commas).  A *fast-path choice* says which methods the
fast path may use for a point: the ``--method`` option of ``kbfast probe`` and ``kbfast run model``, and a
model sweep's ``workload.method``, take one of :data:`FAST_CHOICES`.  docs/README.md ("Methods") lists both.
"""

from __future__ import annotations

from kbfast.errors import KbfastError, not_one_of

MODES = ("fast", "exact")     # the two evaluators a point is measured on

EXACT, CLOSED_FORM, EXACT_REPLAY, NETWORK, FLUID = "exact", "closed form", "exact replay", "network", "fluid"
MAXPLUS, MAXPLUS_STEADY, MAXPLUS_ESTIMATE = "maxplus", "maxplus_steady", "maxplus_estimate"

# method -> how it makes the figure (docs/fast_path.md, docs/gemm.md, docs/models.md)
METHODS: dict[str, str] = {
    EXACT: "exact mode: the flit-level replay of the whole Program (kbfast.exact)",
    CLOSED_FORM: "the fast path where no flows met: each transfer's closed form, exact (parity P1)",
    EXACT_REPLAY: "the fast path replayed a small contended Program exactly (its bounds stay the fast path's)",
    NETWORK: "the fast path's fluid FIFO queueing network of a contended Program too large to replay (its bounds "
             "stay the fast path's)",
    FLUID: "the fast path's fluid schedule of flows sharing resources, with its bounds",
    MAXPLUS: "a GEMM's tile-pipeline max-plus recurrence, equal to exact mode where no transfers overlap",
    MAXPLUS_STEADY: "a GEMM's recurrence plus its C writes' interference, from exact replays of three short "
                    "prefixes extrapolated over the periodic steady state, between the recurrence and its upper bound",
    MAXPLUS_ESTIMATE: "the recurrence alone where the writes meet the reads, without a steady state, above the "
                      "fluid schedule's size: optimistic, a lower bound",
}
# what the hybrid fast path may use (kbfast.measure.hybrid)
HYBRID_METHODS = (CLOSED_FORM, EXACT_REPLAY, NETWORK, FLUID)
GEMM_FAST_METHODS = (MAXPLUS, MAXPLUS_STEADY, FLUID, MAXPLUS_ESTIMATE)   # a GEMM's fast path (kbfast.measure.gemm.fast_method)

# fast-path choice -> the methods it allows
FAST_CHOICES: dict[str, str] = {
    "hybrid": "closed form where no flows meet, else an exact replay of the Program when it fits the event "
              "budget, else the queueing network when it fits that budget, else fluid",
    "network": "closed form where no flows meet, else the queueing network when it fits 50 M of its events "
               "(never a replay), else fluid",
    "fluid": "closed form or fluid: never a replay or the queueing network (quicker, less exact where flows "
             "meet)",
}


def check_method(w: dict) -> None:
    """A workload kind's name check of its ``method`` field: one of :data:`FAST_CHOICES`."""
    check_fast_choice(str(w["method"]))


def check_fast_choice(method: str) -> None:
    """Refuse a fast-path choice that is not one of :data:`FAST_CHOICES`, by name."""
    if method not in FAST_CHOICES:
        raise not_one_of("fast method", method, FAST_CHOICES)
