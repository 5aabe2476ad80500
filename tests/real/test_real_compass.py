"""FedCompass on the process backend: the server runs the scheduler on the times it measures
(Li et al. 2024, Algorithms 1-2: speed estimates, arrival groups, each task's steps), holds
the works that arrive in their group's time and aggregates a group when its last member
arrives or its latest time passes. The recorded trace says where each commit went and how
many steps each task took; the engine replays it to the same bits. Over a population the
estimates are the clients' and a group's slots choose their next clients at its close."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from real_helpers import flat, quadratic_scenario, wait_no_children
from test_real_population import population_scenario
from typer.testing import CliRunner

from gemsim.app import run
from gemsim.cli import app

pytestmark = pytest.mark.slow

ALONE, GENERAL, GROUP = 0, 1, 2  # the trace's buffer column (docs/design.md §5)
Q_MAX, Q_MIN, WORKERS, COMMITS = 6, 2, 3, 60


def compass_scenario(**blocks):
    """Three workers at speeds 1, 0.6 and 0.35 (20 ms a step at speed 1): the scheduler
    gives the slow ones fewer steps so that groups finish together; some arrive late."""
    return quadratic_scenario(
        n=WORKERS,
        commits=COMMITS,
        optimizer={"rule": "fedcompass", "lr": 0.05, "window": Q_MAX, "min_window": Q_MIN},
        workers={"groups": [{"count": 1, "speed": s} for s in (1.0, 0.6, 0.35)]},
        **blocks,
    )


CLIENTS = 8  # on 3 slots, of lognormal speeds


def population_compass_scenario():
    speed = {"dist": "lognormal", "median": 1.0, "sigma": 0.6}
    optimizer = {"rule": "fedcompass", "lr": 0.05, "window": Q_MAX, "min_window": Q_MIN}
    clients = {"population": CLIENTS, "speed": speed}
    return population_scenario(commits=COMMITS, clients=clients, optimizer=optimizer)


SCENARIOS = {"workers": compass_scenario, "population": population_compass_scenario}


@pytest.fixture(scope="module", params=list(SCENARIOS))
def real_and_replay(request, computed_once):
    def compute():
        scenario = SCENARIOS[request.param]()
        real = run(scenario, backend="process")
        return real, run(scenario, trace=real.trace)

    return request.param, *computed_once(f"real-compass-{request.param}", compute)


def _groups(trace) -> list[list[int]]:
    """The rows of each aggregation of a group: consecutive GROUP rows, each aggregation
    ending at its row that closes the round (a budget may cut the last one short)."""
    out, current = [], []
    for k in np.flatnonzero(trace.buffer == GROUP):
        if current and k != current[-1] + 1:
            raise AssertionError(f"group rows {current} interrupted before row {k}")
        current.append(int(k))
        if trace.round_end[k]:
            out.append(current)
            current = []
    return out + ([current] if current else [])


def test_the_server_runs_the_scheduler_and_records_it(real_and_replay):
    case, real, _ = real_and_replay
    assert real.manifest["backend"] == "process"
    assert_the_scheduler_ran(real, case)
    assert wait_no_children() == []


def assert_the_scheduler_ran(real, case: str) -> None:
    """The real run's trace is what FedCompass's scheduler decides (also on Ray:
    test_real_ray.py)."""
    trace = real.trace
    assert real.status.value == "ok" and len(trace) == COMMITS
    steps, buffer, closes = trace.local_steps, trace.buffer, trace.round_end
    # Every owner's first task (a worker's, or a client's): Q_max steps, applied alone; none
    # after (its speed is known then).
    owner = trace.worker if case == "workers" else trace.client
    firsts = sorted(int(np.flatnonzero(owner == o)[0]) for o in np.unique(owner))
    assert np.flatnonzero(buffer == ALONE).tolist() == firsts
    assert (steps[firsts] == Q_MAX).all()
    assert ((steps >= Q_MIN) & (steps <= Q_MAX)).all()
    groups = _groups(trace)
    assert sum(len(g) > 1 for g in groups) >= 3
    if case == "workers":  # the slowest worker was given fewer steps than the fastest
        later = np.arange(len(trace)) >= WORKERS
        mean = [steps[later & (trace.worker == w)].mean() for w in range(WORKERS)]
        assert mean[2] < mean[0], mean
    else:  # the client report counts each client's committed tasks
        summary = real.worker_summary
        np.testing.assert_array_equal(summary.commits, np.bincount(owner, minlength=CLIENTS))
    # A row closes its round where it is applied alone or closes its group, nowhere else.
    closing = buffer == ALONE
    for g in groups[:-1]:
        closing[g[-1]] = True
    if closes[groups[-1][-1]]:
        closing[groups[-1][-1]] = True
    np.testing.assert_array_equal(closes, closing)
    # A group's members each appear once in it, and their slots' next tasks pull the version
    # after its close; a worker applied alone or into the general buffer goes on from its
    # own commit.
    group_of = {k: g for g in groups for k in g}
    for g in groups:
        assert len(set(owner[g].tolist())) == len(set(trace.worker[g].tolist())) == len(g)
    for w in range(WORKERS):
        rows = np.flatnonzero(trace.worker == w)
        for k, nxt in zip(rows[:-1], rows[1:], strict=True):
            after = group_of[k][-1] + 1 if buffer[k] == GROUP else k + 1
            assert trace.pulled_version[nxt] == after, (w, k, nxt)


@pytest.mark.bitexact
def test_replay_of_a_fedcompass_run_gives_its_bits(real_and_replay):
    _, real, replay = real_and_replay
    assert replay.status.value == "ok" and len(replay.trace) == COMMITS
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))


def test_validate_refuses_fedcompass_before_any_run(tmp_path):
    """Calibration cannot fit per-batch laws from tasks of their own steps: refused with
    exit 2 before the real run, nothing written."""
    doc = compass_scenario().model_dump(mode="json", by_alias=True, exclude_none=True)
    path, out = tmp_path / "compass.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "FedCompass's scheduler gives each task its own local steps" in result.output
    assert not out.exists()
