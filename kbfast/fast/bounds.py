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

from numba import njit


@njit(cache=True)
def interference(res_ptr, res_ids, res_work, users_ptr, users, begin_lo, end_hi, use_windows,
                 own_extra):  # pragma: no cover - jitted
    """extra[o] = own_extra[o] + sum over o's resources of the work of overlapping co-users."""
    n_ops = len(res_ptr) - 1
    extra = own_extra.copy()
    for o in range(n_ops):
        for k in range(res_ptr[o], res_ptr[o + 1]):
            r = res_ids[k]
            for j in range(users_ptr[r], users_ptr[r + 1]):
                g = users[j, 0]
                if g == o:
                    continue
                if use_windows and (end_hi[g] < begin_lo[o] or end_hi[o] < begin_lo[g]):
                    continue
                extra[o] += res_work[users[j, 1]]
    return extra
