"""`server.pull: before_apply` on the process backend: the server sends each committing worker
the version its commit was applied to (Mishchenko et al. 2022's notebook), the recorded trace
says so, and its replay in the engine gives the same bits (the engine's pre fills write the
row the server sent)."""

from __future__ import annotations

import numpy as np
import pytest
from real_helpers import flat, quadratic_scenario

from gemsim.app import run

pytestmark = [pytest.mark.slow, pytest.mark.bitexact]


@pytest.mark.parametrize(
    "optimizer", [{"rule": "gem", "lr": 0.05}, {"rule": "ringmaster", "lr": 0.05, "threshold": 2}]
)
def test_a_real_run_pulling_before_apply_replays_bit_exactly(optimizer):
    scenario = quadratic_scenario(
        n=3, commits=60, server={"pull": "before_apply"}, optimizer=optimizer
    )
    real = run(scenario, backend="process")
    assert real.status.value == "ok" and len(real.trace) == 60
    trace = real.trace
    last, own = {}, []
    for k, w in enumerate(trace.worker.tolist()):
        if w in last and not trace.fresh[k]:
            own.append((int(trace.pulled_version[k]), last[w]))
        last[w] = k
    assert len(own) >= 50 and all(pv == prev for pv, prev in own)  # the version before
    replay = run(scenario, trace=trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))
    for name in ("update_norm", "weight"):
        np.testing.assert_array_equal(replay.metrics[name], real.metrics[name], err_msg=name)
