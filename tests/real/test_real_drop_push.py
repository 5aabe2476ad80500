"""Lost pushes on the process backend: the server loses each push with its worker's own
draws (the timing model's stream), the worker pulls and computes again, the recorded trace's
`dropped` column says which pushes were lost, and the replay of the trace gives the same
bits."""

from __future__ import annotations

import numpy as np
import pytest
from real_helpers import flat

from gemsim import timing
from gemsim.app import run
from gemsim.config import parse_scenario

pytestmark = [pytest.mark.slow, pytest.mark.bitexact]

P = 0.3


@pytest.mark.parametrize(
    "optimizer",
    [
        {"rule": "local", "lr": 0.02, "window": 2},
        # GEM's proxy state tells a pull from the worker's own commit: after a lost push
        # its next gradient starts from a plain pull, in the server and in the replay alike.
        {"rule": "gem", "lr": 0.05},
    ],
)
def test_a_real_run_losing_pushes_replays_bit_exactly(optimizer):
    scenario = parse_scenario(
        {
            "name": "real-drops",
            "seed": 4,
            "workers": {
                "count": 3,
                "compute": {"dist": "exponential", "mean": 0.01},
                "emulate_latency": True,  # the quadratic's own gradient takes microseconds
                "failures": {"drop_push": P},
            },
            "budget": {"commits": 45},
            "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
            "optimizer": optimizer,
        },
        "real-drops",
    )
    real = run(scenario, backend="process")
    trace = real.trace
    assert real.status.value == "ok" and len(trace) == 45
    assert trace.dropped is not None and trace.dropped.sum() > 0
    for w in range(3):  # the server's decisions are the timing model's draws, push by push
        flags = []
        for d in trace.dropped[trace.worker == w].tolist():
            flags += [True] * d + [False]
        draw = timing.drop_draw(4, w, P)
        assert flags == [draw() for _ in flags]
    replay = run(scenario, trace=trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))
