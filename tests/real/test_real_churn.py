"""The process backend follows churn and slowdowns under `workers.emulate_latency`: it kills
and restarts worker processes at the simulator's own down intervals, stretches the emulated
compute by the slowdowns, and `gemsim validate` passes on a churn scenario."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from real_helpers import flat, quadratic_scenario, wait_no_children
from typer.testing import CliRunner

from gemsim import timing
from gemsim.app import run
from gemsim.cli import app
from gemsim.config import build_cluster

pytestmark = pytest.mark.slow

# Down for 10 s: long enough for the new process to start up (import, compile) meanwhile.
CHURN = {
    "uptime": {"dist": "exponential", "mean": 8.0},
    "downtime": {"dist": "constant", "value": 10.0},
}


def test_churn_kills_and_restarts_workers_on_the_simulated_schedule():
    scenario = quadratic_scenario(
        n=3,
        seed=4,
        budget={"commits": None, "seconds": 30.0},
        workers={"churn": CHURN},
    )
    spec = build_cluster(scenario)
    planned = list(timing.life_events(spec, scenario.seed, until=60.0))
    downs = [(e.time, e.worker) for e in planned if e.kind == "down" and e.time < 29.0]
    ups = {(e.time, e.worker) for e in planned if e.kind == "up" and e.time < 29.0}
    assert downs and any(t < 20.0 for t, _ in ups), "the seed must bring a worker back early"
    real = run(scenario, backend="process")
    events = real.manifest["worker_events"]
    killed = [(e["time"], e["worker"]) for e in events if e["event"] == "killed"]
    assert [w for _, w in killed] == [w for _, w in downs]
    for (at, _), (planned_at, _) in zip(killed, downs, strict=True):
        assert planned_at <= at < planned_at + 1.0  # the server loop wakes for each event
    trace = real.trace
    for (start, w), up in zip(downs, _ups(planned, downs), strict=True):
        silent = (trace.worker == w) & (trace.time > start + 0.5) & (trace.time < up)
        assert not silent.any(), f"worker {w} committed while down"
    restarts = [(e["time"], e["worker"]) for e in events if e["event"] == "restarted"]
    # Each up starts a process that went on by then or once ready (10 s of margin to start).
    assert len(restarts) >= sum(t < 20.0 for t, _ in ups) and len(restarts) <= len(ups)
    for at, w in restarts:  # at its planned time (or when its process was ready), pulling anew
        assert any(w == v and t <= at for t, v in ups)
        first = np.flatnonzero((trace.worker == w) & (trace.time > at))[0]
        assert trace.fresh[first] and trace.pulled_version[first] == np.sum(trace.time < at)
    assert wait_no_children() == []
    # A replay of a real run with restarts is bit-exact: the restarted workers' rule state
    # starts anew through the same compiled `on_pull` in the server and in the engine.
    replay = run(scenario, trace=trace)
    assert np.max(np.abs(flat(real.params) - flat(replay.params))) == 0.0
    np.testing.assert_array_equal(replay.metrics["update_norm"], real.metrics["update_norm"])


def _ups(planned, downs):
    """The time each down of `downs` ends."""
    return [
        next(e.time for e in planned if e.worker == w and e.kind == "up" and e.time > start)
        for start, w in downs
    ]


def test_slowdowns_stretch_the_emulated_compute():
    slow = {
        "every": {"dist": "constant", "value": 1.0},
        "factor": {"dist": "constant", "value": 4.0},
        "duration": {"dist": "constant", "value": 1.0},
    }
    workers = {"compute": {"dist": "constant", "value": 0.05}, "slowdowns": slow}
    real = run(quadratic_scenario(n=2, commits=200, workers=workers), backend="process")
    compute = real.trace.compute_time
    # Every other second the emulated 0.05 s lasts 0.2 s: a fifth of the commits (the
    # workers' own compute takes far less than either).
    assert np.mean(compute > 0.15) > 0.1 and np.mean(compute < 0.1) > 0.5


def test_validate_passes_on_a_churn_scenario(tmp_path):
    # Any seed: `validate` simulates the real run's own down intervals (only the compute
    # draws vary), so how rare or frequent its churn happened to be is no matter of luck.
    # Seed 0's schedule has two downs and two comings back within the run.
    config = {
        "name": "validate-churn",
        "seed": 0,
        "workers": {
            "count": 4,
            "compute": {"dist": "exponential", "mean": 0.1},
            "emulate_latency": True,
            # Down for 8 s: long enough for the new process to start up meanwhile.
            "churn": {
                "uptime": {"dist": "exponential", "mean": 20.0},
                "downtime": {"dist": "constant", "value": 8.0},
            },
        },
        "budget": {"commits": 600},
        "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
        "optimizer": {"rule": "gem", "lr": 0.05},
    }
    path = tmp_path / "churn.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(
        app, ["validate", str(path), "--out", str(tmp_path / "out"), "--json", "--quiet"]
    )
    report = json.loads(result.output.strip().splitlines()[-1])
    assert result.exit_code == 0, report
    assert report["passed"] and all(report["checks"].values())
    calibrated = yaml.safe_load((tmp_path / "out" / "calibrated.yaml").read_text())
    assert calibrated["workers"]["churn"] == config["workers"]["churn"]
    real = next(
        json.loads(p.read_text())
        for p in (tmp_path / "out").glob("*/manifest.json")
        if json.loads(p.read_text())["kind"] == "process"
    )
    kinds = [e["event"] for e in real["worker_events"]]
    assert kinds.count("killed") >= 2 and "restarted" in kinds  # churn really happened
