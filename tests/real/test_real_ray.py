"""The Ray backend on a local instance: the same protocol as the process backend, so its
recorded trace must replay to the same parameters; failures kill and restart actors, and a
stateful rule's run with a late join and a restart replays to the same bits; FedCompass's
server runs its scheduler, for workers and for a population's clients.

The protocol is the model's business nowhere (the process backend checks exactness on the
paper's CNN), so every run uses the quadratic, on one Ray instance started for the module:
starting Ray costs seconds (its own start-up and stopping are tested in
test_real_interrupt.py, through the command line)."""

from __future__ import annotations

import signal

import numpy as np
import pytest
from real_helpers import (
    STATEFUL_RULES,
    assert_join_and_restart_replay_bit_exactly,
    assert_replay_matches,
    flat,
    join_and_restart_scenario,
    quadratic_scenario,
)

from gemsim.app import run

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

WORKERS = 3


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    """One local instance for the module (a run uses one it finds and leaves it running)."""
    before = signal.getsignal(signal.SIGTERM)  # ray.init replaces pytest's SIGTERM handler
    ray.init(num_cpus=WORKERS + 1, include_dashboard=False, log_to_driver=False)
    signal.signal(signal.SIGTERM, before)
    try:
        yield
    finally:
        ray.shutdown()


def test_replay_of_a_ray_run_gives_its_parameters():
    scenario = quadratic_scenario(n=WORKERS, commits=200)
    real = run(scenario, backend="ray")
    assert real.status.value == "ok" and len(real.trace) == 200
    assert real.manifest["backend"] == "ray"
    assert set(np.unique(real.trace.worker)) == set(range(WORKERS))
    assert real.trace.staleness.max() > 0
    assert_replay_matches(real, run(scenario, trace=real.trace))


STEPS = 100  # per worker: about 2 s of commits at the emulated 0.02 s per gradient


def test_ray_scheduled_failure_restarts_an_actor_that_pulls_anew():
    # A budget in steps per worker: the run waits for the new actor (its start-up takes
    # seconds, more on a loaded machine) instead of ending at a time it may miss.
    scenario = quadratic_scenario(
        n=WORKERS,
        budget={"commits": None, "epochs_per_worker": STEPS},  # the quadratic: 1 step/epoch
        workers={"failures": [{"worker": 2, "at": 1.0, "restart_after": 0.5}]},
    )
    real = run(scenario, backend="ray")
    events = [(e["event"], e["worker"]) for e in real.manifest["worker_events"]]
    assert events == [("killed", 2), ("restarted", 2)]
    restarted = real.manifest["worker_events"][1]["time"]
    trace = real.trace
    # Every worker did its steps: commits in flight from the killed actor were void.
    assert np.bincount(trace.worker, minlength=WORKERS).tolist() == [STEPS] * WORKERS
    twos = np.flatnonzero((trace.worker == 2) & (trace.time > restarted))
    assert twos.size > 0
    assert trace.pulled_version[twos[0]] > 0
    assert_replay_matches(real, run(scenario, trace=trace))


def test_ray_run_with_join_and_restart_replays_bit_exactly():
    scenario = join_and_restart_scenario(STATEFUL_RULES["fedbuff"])
    real = run(scenario, backend="ray")
    assert real.manifest["backend"] == "ray"
    assert_join_and_restart_replay_bit_exactly(real, scenario)


@pytest.mark.bitexact
def test_a_population_on_ray_replays_bit_exactly():
    """Three slot actors serving 30 churning clients: the server actor chooses each task's
    client; the recorded trace names them, and its replay gives the same bits."""
    from test_real_population import CHURN, SPEED, population_scenario

    scenario = population_scenario(commits=60, clients={"churn": CHURN, "speed": SPEED})
    real = run(scenario, backend="ray")
    trace = real.trace
    assert real.status.value == "ok" and len(trace) == 60 and trace.n_clients == 30
    summary = real.worker_summary
    np.testing.assert_array_equal(summary.commits, np.bincount(trace.client, minlength=30))
    assert 0 <= summary.started.sum() - 60 - summary.lost.sum() <= WORKERS
    replay = run(scenario, trace=trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))


@pytest.mark.bitexact
@pytest.mark.parametrize("case", ["workers", "population"])
def test_fedcompass_on_ray_runs_its_scheduler_and_replays_bit_exactly(case):
    """The server actor holds a group's works and its members poll for their next tasks
    (test_real_compass.py checks the same on the process backend)."""
    from test_real_compass import SCENARIOS, assert_the_scheduler_ran

    scenario = SCENARIOS[case]()
    real = run(scenario, backend="ray")
    assert real.manifest["backend"] == "ray"
    assert_the_scheduler_ran(real, case)
    replay = run(scenario, trace=real.trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))
