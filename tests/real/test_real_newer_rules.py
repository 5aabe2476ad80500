"""The newer rules on the real backends: a run with a late join and a scheduled restart
replays to the same bits, worker state, server timestamps and pull hooks included."""

from __future__ import annotations

import numpy as np
import pytest
from real_helpers import flat, quadratic_scenario

from gemsim.app import run

pytestmark = pytest.mark.slow

OPTIMIZERS = {
    "delay_adaptive": {"rule": "delay_adaptive", "lr": 0.05, "tau_c": 2.0},
    "fedbuff": {"rule": "fedbuff", "lr": 0.05, "window": 2, "buffer": 3, "server_lr": 0.9},
    "local": {"rule": "local", "lr": 0.01, "window": 2},
}


def churn_scenario(optimizer: dict):
    """Three workers on the quadratic: worker 2 joins at 0.5 s, worker 1 is killed at 1 s
    and restarts 0.5 s later (a new process: its pull hook runs fresh). Each worker takes
    150 mini-batch steps (3 s of emulated compute at least), so the run lasts until the
    restarted process has finished its share, however long it takes to start."""
    return quadratic_scenario(
        n=3,
        budget={"commits": None, "epochs_per_worker": 150},
        workers={
            "joins": [{"worker": 2, "at": 0.5}],
            "failures": [{"worker": 1, "at": 1.0, "restart_after": 0.5}],
        },
        optimizer=optimizer,
    )


def assert_churn_replays_bit_exactly(real, scenario):
    assert real.status.value == "ok"
    # (the process backend also lists the join, and a worker that has taken all its steps
    # as "died" with code 0; the join is checked on the trace below)
    events = [e for e in real.manifest["worker_events"] if e["event"] in ("killed", "restarted")]
    assert [(e["event"], e["worker"]) for e in events] == [("killed", 1), ("restarted", 1)]
    trace = real.trace
    restarted = events[1]["time"]
    late = np.flatnonzero(trace.fresh & (trace.pulled_version > 0))
    assert set(trace.worker[late].tolist()) == {1, 2}, "the join and the restart pull anew"
    assert np.any((trace.worker == 1) & (trace.time > restarted))
    replay = run(scenario, trace=trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))
    np.testing.assert_array_equal(replay.metrics["update_norm"], real.metrics["update_norm"])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_process_run_with_join_and_restart_replays_bit_exactly(name):
    scenario = churn_scenario(OPTIMIZERS[name])
    assert_churn_replays_bit_exactly(run(scenario, backend="process"), scenario)


def test_ray_run_with_join_and_restart_replays_bit_exactly():
    pytest.importorskip("ray")
    scenario = churn_scenario(OPTIMIZERS["fedbuff"])
    real = run(scenario, backend="ray")
    assert real.manifest["backend"] == "ray"
    assert_churn_replays_bit_exactly(real, scenario)
