"""The fluid schedule's max-min fair rates (``kbfast.fast.waterfill._rates``), filled per connected component,
against a plain global water-filling over all active flows (docs/fast_path.md §3).

The reference is the filling kbfast ran before it split the active flows into components, transcribed into
plain Python: the same operations, so the rates must agree bit for bit, whatever the components are.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import BWS, run_rates
from naive import global_filling

@st.composite
def instances(draw):
    n_res = draw(st.integers(1, 10))
    worker = [draw(st.booleans()) for _ in range(n_res)]
    res_ovh = np.array([draw(st.sampled_from([2.0, 8.0])) if k else 0.0 for k in worker])
    res_cap = np.array([1.0 if k else draw(st.sampled_from(BWS)) for k in worker])
    n_flows = draw(st.integers(1, 14))
    flows = [draw(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=4, unique=True)) for _ in range(n_flows)]
    bn = np.array([draw(st.sampled_from(BWS)) for _ in range(n_flows)])
    nbytes = np.array([draw(st.sampled_from([256, 4096, 65536, 1000])) for _ in range(n_flows)], np.int64)
    return flows, bn, res_cap, res_ovh, nbytes


@settings(max_examples=300, deadline=None)
@given(instances())
def test_component_filling_equals_global_filling(inst):
    flows, bn, res_cap, res_ovh, nbytes = inst
    n, n_res = len(flows), len(res_cap)
    users = np.bincount([r for f in flows for r in f], minlength=n_res).astype(np.int64)
    rate = run_rates(flows, bn, res_cap, res_ovh, nbytes)
    assert rate.tolist() == global_filling(flows, bn, res_cap, res_ovh, nbytes, users)
    # and it is a feasible allocation: no flow above its cap, no resource above its capacity
    assert np.all(rate <= bn * (1 + 1e-12))
    for r in range(n_res):
        if users[r] > 1:
            used = sum(rate[o] * (res_ovh[r] / max(nbytes[o], 1) if res_ovh[r] > 0 else 1.0)
                       for o in range(n) if r in flows[o])
            assert used <= res_cap[r] * (1 + 1e-9)
