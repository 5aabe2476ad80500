"""The Ray backend on a local instance: the same protocol as the process backend, so its
recorded trace must replay to the same parameters; failures kill and restart actors."""

from __future__ import annotations

import numpy as np
import pytest
from real_helpers import assert_replay_matches, cnn_scenario, quadratic_scenario

from gemsim.app import run

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def test_replay_of_a_ray_cnn_run_gives_its_parameters():
    scenario = cnn_scenario("gem", commits=200)
    real = run(scenario, backend="ray")
    assert real.status.value == "ok" and len(real.trace) == 200
    assert real.manifest["backend"] == "ray"
    n = scenario.workers.count
    assert set(np.unique(real.trace.worker)) == set(range(n))
    assert real.trace.staleness.max() > 0
    assert_replay_matches(real, run(scenario, trace=real.trace))


def test_ray_scheduled_failure_restarts_an_actor_that_pulls_anew():
    scenario = quadratic_scenario(
        n=3,
        budget={"commits": None, "seconds": 8.0},
        workers={"failures": [{"worker": 2, "at": 1.0, "restart_after": 0.5}]},
    )
    real = run(scenario, backend="ray")
    events = [(e["event"], e["worker"]) for e in real.manifest["worker_events"]]
    assert events == [("killed", 2), ("restarted", 2)]
    restarted = real.manifest["worker_events"][1]["time"]
    trace = real.trace
    twos = np.flatnonzero((trace.worker == 2) & (trace.time > restarted))
    assert twos.size > 0
    assert trace.pulled_version[twos[0]] > 0
    assert_replay_matches(real, run(scenario, trace=trace))
