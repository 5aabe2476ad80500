"""Workers with local steps of their own on the process backend: each worker runs its own
window, the recorded trace's `local_steps` column says so, each worker stops after its own
share of a steps budget, and the replay of the trace gives the same bits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from real_helpers import flat

from gemsim.app import run
from gemsim.config import parse_scenario

pytestmark = [pytest.mark.slow, pytest.mark.bitexact]

WINDOWS = (4, 2, 1)


def test_a_real_run_with_group_windows_replays_bit_exactly():
    scenario = parse_scenario(
        {
            "name": "real-own-windows",
            "seed": 3,
            "workers": {
                "count": 3,
                "compute": {"dist": "exponential", "mean": 0.01},
                "emulate_latency": True,  # the quadratic's own gradient takes microseconds
                "groups": [{"count": 1, "window": w} for w in WINDOWS],
            },
            "budget": {"epochs_per_worker": 16},
            "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
            "optimizer": {"rule": "local", "lr": 0.02, "window": 2},
        },
        "real-own-windows",
    )
    real = run(scenario, backend="process")
    trace = real.trace
    assert real.status.value == "ok"
    assert trace.local_steps is not None
    for w, window in enumerate(WINDOWS):
        mine = trace.worker == w
        assert set(trace.local_steps[mine].tolist()) == {window}
        assert int(mine.sum()) == math.ceil(16 / window)  # the quadratic's epoch is one step
    replay = run(scenario, trace=trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))
