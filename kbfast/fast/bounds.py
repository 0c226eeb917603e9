"""Upper bound on the delay contention can add to each flow (design §6, parity P2).

In a network of FIFO servers without backpressure, flows that share a server
with flow ``o`` while ``o`` is in flight can delay ``o``'s completion by at
most the work they bring to the shared servers (max-plus monotonicity: a delay
of the inputs by ``d`` delays the outputs by at most ``d``):

* a shared wire: their bytes / bw;
* a shared flit-aware node: their first-flit overhead;
* a shared HBM controller: commit time (+ switch penalty) per flit they commit,
  plus a switch penalty on each of ``o``'s own commits.

Only flows whose windows ``[begin_lower, end_upper]`` overlap count.  The
bound starts from "every sharer" (valid), then tightens: windows taken from a
valid bound contain the true in-flight intervals, so each pass stays valid.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def interference(res_ptr, res_ids, res_work, users_ptr, users, begin_lo, end_hi, use_windows,
                 own_extra):  # pragma: no cover - jitted
    """extra[o] = own_extra[o] + sum over o's resources of the work of overlapping co-users.

    Co-user ``g`` overlaps ``o`` unless ``end_hi[g] < begin_lo[o]`` or ``end_hi[o] < begin_lo[g]``.  As
    every window has ``begin_lo <= end_hi``, the overlapping work on a resource is
    ``W(begin_lo[g] <= end_hi[o]) - W(end_hi[g] < begin_lo[o])``: two prefix sums over the resource's
    users sorted by begin and by end, so a call costs O(U log U) for U (op, resource) pairs, not the
    O(U^2) of comparing every pair.  A resource whose windows all contain one instant overlaps entirely
    and needs no sort (nor any per-pair array: begins, ends and works are gathered only for the
    windowed resources).  ``o``'s own work (entry ``k`` of ``res_work``: entries are grouped by op, in
    order) is then taken out.
    """
    n_ops = len(res_ptr) - 1
    n_users = len(users)
    n_res = len(users_ptr) - 1
    max_u = 0
    for r in range(n_res):
        max_u = max(max_u, users_ptr[r + 1] - users_ptr[r])
    # a windowed resource's begins, ends and works, gathered into scratch of its size
    tb = np.empty(max_u)
    te = np.empty(max_u)
    tw = np.empty(max_u)
    by_b = np.empty(n_users)            # per resource: begins sorted, and the work prefix in that order
    by_e = np.empty(n_users)
    cum_b = np.empty(n_users + len(users_ptr))
    cum_e = np.empty(n_users + len(users_ptr))
    total = np.zeros(n_res)
    windowed = np.zeros(n_res, np.bool_)
    for r in range(n_res):
        lo, hi = users_ptr[r], users_ptr[r + 1]
        last_begin = -np.inf
        first_end = np.inf
        for j in range(lo, hi):
            g = users[j, 0]
            total[r] += res_work[users[j, 1]]
            last_begin = max(last_begin, begin_lo[g])
            first_end = min(first_end, end_hi[g])
        # when every window holds the latest begin, all of them overlap: the total, no sorting
        windowed[r] = use_windows and hi - lo >= 2 and last_begin > first_end
        if not windowed[r]:
            continue
        for k in range(hi - lo):
            g = users[lo + k, 0]
            tw[k] = res_work[users[lo + k, 1]]
            tb[k] = begin_lo[g]
            te[k] = end_hi[g]
        ob = np.argsort(tb[:hi - lo], kind="mergesort")
        oe = np.argsort(te[:hi - lo], kind="mergesort")
        cum_b[lo + r] = 0.0
        cum_e[lo + r] = 0.0
        for k in range(hi - lo):
            by_b[lo + k] = tb[ob[k]]
            by_e[lo + k] = te[oe[k]]
            cum_b[lo + r + k + 1] = cum_b[lo + r + k] + tw[ob[k]]
            cum_e[lo + r + k + 1] = cum_e[lo + r + k] + tw[oe[k]]
    extra = own_extra.copy()
    for o in range(n_ops):
        for k in range(res_ptr[o], res_ptr[o + 1]):
            r = res_ids[k]
            lo, hi = users_ptr[r], users_ptr[r + 1]
            if hi - lo < 2:
                continue
            if windowed[r]:
                started = np.searchsorted(by_b[lo:hi], end_hi[o], side="right")     # begin_lo[g] <= end_hi[o]
                ended = np.searchsorted(by_e[lo:hi], begin_lo[o], side="left")      # end_hi[g] < begin_lo[o]
                extra[o] += max(cum_b[lo + r + started] - cum_e[lo + r + ended] - res_work[k], 0.0)
            else:
                extra[o] += max(total[r] - res_work[k], 0.0)
    return extra
