"""FedCompass on the process backend: the server runs the scheduler on the times it measures
(Li et al. 2024, Algorithms 1-2: speed estimates, arrival groups, each task's steps), holds
the works that arrive in their group's time and aggregates a group when its last member
arrives or its latest time passes. The recorded trace says where each commit went and how
many steps each task took; the engine replays it to the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from real_helpers import flat, quadratic_scenario, wait_no_children

from gemsim import config
from gemsim.app import run

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


@pytest.fixture(scope="module")
def real_and_replay(computed_once):
    def compute():
        scenario = compass_scenario()
        real = run(scenario, backend="process")
        return real, run(scenario, trace=real.trace)

    return computed_once("real-compass", compute)


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
    real, _ = real_and_replay
    trace = real.trace
    assert real.status.value == "ok" and len(trace) == COMMITS
    assert real.manifest["backend"] == "process"
    steps, buffer, closes = trace.local_steps, trace.buffer, trace.round_end
    # Every worker's first task: Q_max steps, applied alone; none after (speeds are known).
    firsts = [int(np.flatnonzero(trace.worker == w)[0]) for w in range(WORKERS)]
    assert sorted(firsts) == list(range(WORKERS))
    assert np.flatnonzero(buffer == ALONE).tolist() == list(range(WORKERS))
    assert (steps[:WORKERS] == Q_MAX).all()
    assert ((steps >= Q_MIN) & (steps <= Q_MAX)).all()
    # Groups formed, and the slowest worker was given fewer steps than the fastest.
    groups = _groups(trace)
    assert sum(len(g) > 1 for g in groups) >= 3
    later = np.arange(len(trace)) >= WORKERS
    mean = [steps[later & (trace.worker == w)].mean() for w in range(WORKERS)]
    assert mean[2] < mean[0], mean
    # A row closes its round where it is applied alone or closes its group, nowhere else.
    closing = buffer == ALONE
    for g in groups[:-1]:
        closing[g[-1]] = True
    if closes[groups[-1][-1]]:
        closing[groups[-1][-1]] = True
    np.testing.assert_array_equal(closes, closing)
    # A group's members each appear once in it, and pull the version after its close; a
    # worker applied alone or into the general buffer goes on from its own commit.
    group_of = {k: g for g in groups for k in g}
    for g in groups:
        assert len(set(trace.worker[g].tolist())) == len(g)
    for w in range(WORKERS):
        rows = np.flatnonzero(trace.worker == w)
        for k, nxt in zip(rows[:-1], rows[1:], strict=True):
            after = group_of[k][-1] + 1 if buffer[k] == GROUP else k + 1
            assert trace.pulled_version[nxt] == after, (w, k, nxt)
    assert wait_no_children() == []


@pytest.mark.bitexact
def test_replay_of_a_fedcompass_run_gives_its_bits(real_and_replay):
    real, replay = real_and_replay
    assert replay.status.value == "ok" and len(replay.trace) == COMMITS
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))


@pytest.mark.parametrize(
    ("backend", "blocks", "field"),
    [
        ("ray", {}, "--backend process"),
        ("process", {"clients": {"population": 6, "concurrency": 3}}, "clients:"),
    ],
)
def test_what_the_server_does_not_run_is_refused_before_the_run(backend, blocks, field):
    doc = compass_scenario().model_dump(mode="json", by_alias=True, exclude_none=True)
    if "clients" in blocks:
        doc["workers"] = {"compute": doc["workers"]["compute"], "emulate_latency": True}
    scenario = config.Scenario.model_validate({**doc, **blocks})
    with pytest.raises(ValueError, match="fedcompass") as caught:
        config.check_real_backend(scenario, backend)
    assert field in str(caught.value)
