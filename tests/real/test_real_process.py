"""The process backend: real runs whose recorded traces the engine replays exactly, worker
deaths (scheduled and unexpected), and the run folder it writes (interrupts: in
test_real_interrupt.py)."""

from __future__ import annotations

import json
import signal

import numpy as np
import psutil
import pytest
import yaml
from real_helpers import (
    assert_replay_matches,
    cnn_scenario,
    forked_by_fork_server,
    quadratic_scenario,
    wait_no_children,
    warm_worker_cache,
)
from typer.testing import CliRunner

from gemsim.app import run
from gemsim.cli import app
from gemsim.trace import CommitTrace

pytestmark = pytest.mark.slow


def real_scenario(case: str):
    """GEM on the paper's CNN, where exactness matters most (XLA may fuse the worker's and the
    replay's programs differently); DOWNPOUR on the quadratic, for the protocol. Three
    workers: every check below holds for any n >= 2 (two workers are already asynchronous);
    192 commits, 64 per worker."""
    if case == "gem-cnn":
        return cnn_scenario("gem")
    return quadratic_scenario(n=3, commits=192, optimizer={"rule": "downpour"})


@pytest.fixture(scope="module", params=["gem-cnn", "downpour-quadratic"])
def real_and_replay(request, computed_once):
    scenario = real_scenario(request.param)

    def compute():
        if request.param == "gem-cnn":  # compiling the CNN costs more than starting a process
            warm_worker_cache(scenario)
        real = run(scenario, backend="process")
        return real, run(scenario, trace=real.trace)

    return scenario, *computed_once(f"real-and-replay-{request.param}", compute)


def test_replay_of_a_real_run_gives_its_parameters(real_and_replay):
    scenario, real, replay = real_and_replay
    assert real.status.value == "ok"
    assert real.manifest["n_commits"] == scenario.budget.commits == len(real.trace)
    assert_replay_matches(real, replay)


def test_real_trace_is_a_consistent_asynchronous_trace(real_and_replay):
    scenario, real, _ = real_and_replay
    trace = real.trace
    n = scenario.workers.count
    assert np.all(np.diff(trace.time) >= 0)
    assert set(np.unique(trace.worker)) == set(range(n))  # every worker committed
    # Pull at commit: a worker's next gradient is on the version its own commit made.
    for w in range(n):
        mine = np.flatnonzero(trace.worker == w)
        assert trace.pulled_version[mine[0]] == 0
        np.testing.assert_array_equal(trace.pulled_version[mine[1:]], mine[:-1] + 1)
    assert trace.staleness.max() > 0  # it really was asynchronous
    for col in (trace.compute_time, trace.queue_time, trace.service_time):
        assert np.all(np.isfinite(col)) and np.all(col >= 0)
    assert trace.busy_time == pytest.approx(trace.service_time.sum())


def test_real_run_metrics_match_the_replay(real_and_replay):
    _, real, replay = real_and_replay
    for col in ("batch_loss", "update_norm"):
        np.testing.assert_allclose(real.metrics[col], replay.metrics[col], rtol=1e-4, atol=1e-6)
    assert real.manifest["backend"] == "process" and replay.manifest["backend"] == "sim"
    assert real.run_id != replay.run_id  # one results folder can hold both


def test_a_worker_killed_mid_run_is_recorded_and_the_others_finish():
    scenario = quadratic_scenario(n=3, commits=150)
    victim = {}

    def kill_one(done, total):
        if done == 40 and not victim:
            child = _workers()[0]
            victim["pid"] = child.pid
            child.send_signal(signal.SIGKILL)

    real = run(scenario, backend="process", progress=kill_one)
    assert victim, "no worker process was found to kill"
    assert real.status.value == "ok" and len(real.trace) == 150
    deaths = [e for e in real.manifest["worker_events"] if e["event"] == "died"]
    assert len(deaths) == 1 and "exit code -9" in deaths[0]["detail"]
    dead = deaths[0]["worker"]
    after = real.trace.time > deaths[0]["time"]
    assert after.sum() > 50 and not np.any(real.trace.worker[after] == dead)
    assert wait_no_children() == []
    assert_replay_matches(real, run(scenario, trace=real.trace))


STEPS = 100  # per worker: about 2 s of commits at the emulated 0.02 s per gradient


def test_scheduled_failure_kills_restarts_and_the_worker_pulls_anew():
    # A budget in steps per worker: the run waits for the restarted worker (its start-up
    # takes seconds, more on a loaded machine) instead of ending at a time it may miss.
    scenario = quadratic_scenario(
        n=3,
        budget={"commits": None, "epochs_per_worker": STEPS},  # the quadratic: 1 step/epoch
        workers={"failures": [{"worker": 1, "at": 1.0, "restart_after": 0.5}]},
    )
    real = run(scenario, backend="process")
    events = [(e["event"], e["worker"]) for e in real.manifest["worker_events"]]
    assert events == [("killed", 1), ("restarted", 1)]
    killed, restarted = (e["time"] for e in real.manifest["worker_events"])
    # The server's loop never waits past its next scheduled event: the kill is late only by
    # the time the machine takes to wake the server (margin for a loaded one). The worker is
    # down for the scheduled [1.0, 1.5]: back at 1.5, or once its new process is ready.
    assert 1.0 <= killed < 2.0 and restarted >= max(1.5, killed)
    trace = real.trace
    # Every worker did its steps: the work lost in the crash was computed again.
    assert np.bincount(trace.worker, minlength=3).tolist() == [STEPS] * 3
    ones = np.flatnonzero(trace.worker == 1)
    before, after = ones[trace.time[ones] < killed], ones[trace.time[ones] > restarted]
    assert before.size and after.size, "worker 1 must commit before its crash and after"
    # After the restart it pulled the version of that moment, not its own last commit's.
    first = after[0]
    assert trace.pulled_version[first] > before[-1] + 1
    assert trace.pulled_version[first] == np.sum(trace.time < restarted)
    assert_replay_matches(real, run(scenario, trace=trace))


def test_cli_run_with_process_backend_writes_a_run_folder(tmp_path):
    scenario_file = tmp_path / "s.yaml"
    # A budget in seconds (the other runs here count commits or steps).
    config = quadratic_scenario(budget={"commits": None, "seconds": 1.0}).model_dump(mode="json")
    scenario_file.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", str(scenario_file), "--backend", "process", "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["backend"] == "process" and manifest["status"] == "ok"
    trace = CommitTrace.from_parquet(folder / "trace.parquet")
    assert manifest["n_commits"] == len(trace) > 0 and trace.duration >= 1.0
    assert {"trace.parquet", "metrics.parquet", "params.npz"} <= {p.name for p in folder.iterdir()}
    # The recorded trace replays from the run folder itself.
    replayed = CliRunner().invoke(
        app, ["replay", str(folder), str(scenario_file), "--out", str(tmp_path / "r"), "--quiet"]
    )
    assert replayed.exit_code == 0, replayed.output


def test_cli_rejects_an_unknown_backend(tmp_path):
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(quadratic_scenario().model_dump(mode="json")))
    result = CliRunner().invoke(app, ["run", str(scenario_file), "--backend", "mpi"])
    assert result.exit_code == 2
    assert "--backend" in result.output and "mpi" in result.output


def _workers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if forked_by_fork_server(p)]
