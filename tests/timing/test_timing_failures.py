"""Crashes, restarts and late joins (docs/design.md §4)."""

import numpy as np
import pytest
from timing_helpers import rows_of, version_at

from gemsim.timing import (
    ClusterSpec,
    CommitBudget,
    Constant,
    Failure,
    LogNormal,
    SecondsBudget,
    StepsBudget,
    WorkerSpec,
    simulate,
)


def _spec(workers, budget=None, **kwargs):
    return ClusterSpec(workers=tuple(workers), budget=budget or SecondsBudget(10.0), **kwargs)


def test_crash_loses_gradient_in_compute_and_restart_pulls_fresh():
    crash = Failure(at=2.5, restart_after=1.1)
    workers = [WorkerSpec(Constant(1.0))] * 2 + [WorkerSpec(Constant(1.0), failures=(crash,))]
    trace = simulate(_spec(workers, pull=Constant(0.25)), seed=0)
    mine = rows_of(trace, 2)
    np.testing.assert_allclose(trace.time[mine[:3]], [1.0, 2.25, 4.85])
    # Down from 2.5 to 3.6, and the gradient it was computing at 2.5 never arrives.
    assert not np.any((trace.time[mine] > 2.5) & (trace.time[mine] < 4.85))
    first_after = mine[2]
    assert trace.pulled_version[first_after] == version_at(trace, 3.6) == 8
    assert trace.staleness[first_after] == 2


def _two_workers(w1_failures=()):
    # Worker 0 computes 0.1 s, worker 1 0.2 s; service is 1 s, so worker 1 queues.
    workers = [
        WorkerSpec(Constant(0.1)),
        WorkerSpec(Constant(0.2), failures=tuple(w1_failures)),
    ]
    return _spec(workers, budget=SecondsBudget(4.5), service=Constant(1.0))


def test_crash_while_queued_drops_the_gradient():
    healthy = simulate(_two_workers(), seed=0)
    assert healthy.worker[1] == 1 and healthy.time[1] == pytest.approx(2.1)
    crashed = simulate(_two_workers([Failure(at=0.5)]), seed=0)
    assert not np.any(crashed.worker == 1)
    assert np.all(crashed.worker == 0)


def test_commit_already_in_service_completes_and_restart_pulls_current_version():
    trace = simulate(_two_workers([Failure(at=1.5, restart_after=0.1)]), seed=0)
    np.testing.assert_array_equal(trace.worker[:4], [0, 1, 0, 1])
    np.testing.assert_allclose(trace.time[:4], [1.1, 2.1, 3.1, 4.1])
    # Commit 1 was in service (1.1 -> 2.1) when worker 1 crashed at 1.5: it completes
    # with its own facts (computed on version 0, queued 0.2 -> 1.1).
    assert trace.pulled_version[1] == 0
    assert trace.compute_time[1] == pytest.approx(0.2)
    assert trace.queue_time[1] == pytest.approx(0.9)
    # The restarted worker pulled at 1.6, when the PS held version 1.
    assert trace.pulled_version[3] == version_at(trace, 1.6) == 1
    assert trace.queue_time[3] == pytest.approx(3.1 - 1.8)


def test_permanent_crash_stops_all_commits_of_that_worker():
    workers = [WorkerSpec(LogNormal(1.0, 0.5)) for _ in range(3)]
    workers[1] = WorkerSpec(LogNormal(1.0, 0.5), failures=(Failure(at=5.0),))
    trace = simulate(_spec(workers, budget=SecondsBudget(30.0)), seed=4)
    assert np.any(trace.worker == 1)
    assert np.all(trace.time[trace.worker == 1] < 5.0)
    assert np.any(trace.time > 5.0)


def test_repeated_crashes_leave_gaps_and_each_restart_pulls_fresh():
    failures = (Failure(3.05, 2.0), Failure(8.05, 1.0))
    workers = [WorkerSpec(Constant(1.0)), WorkerSpec(Constant(1.0), failures=failures)]
    trace = simulate(_spec(workers, budget=SecondsBudget(15.0)), seed=0)
    mine = rows_of(trace, 1)
    times = trace.time[mine]
    assert not np.any((times > 3.05) & (times < 6.05))
    assert not np.any((times > 8.05) & (times < 10.05))
    for restart in (5.05, 9.05):
        first = mine[np.argmax(trace.time[mine] > restart)]
        assert trace.time[first] == pytest.approx(restart + 1.0)
        assert trace.pulled_version[first] == version_at(trace, restart)


def test_everyone_gone_ends_the_run_early():
    workers = [WorkerSpec(Constant(1.0), failures=(Failure(at=2.5),))] * 3
    trace = simulate(_spec(workers, budget=CommitBudget(1000)), seed=0)
    assert len(trace) == 6
    assert trace.duration == pytest.approx(2.0)


def test_late_join_pulls_the_version_current_at_join_time():
    workers = [WorkerSpec(Constant(1.0))] * 2 + [WorkerSpec(Constant(1.0), join_at=2.5)]
    trace = simulate(_spec(workers, pull=Constant(0.25)), seed=0)
    mine = rows_of(trace, 2)
    assert trace.time[mine[0]] == pytest.approx(2.5 + 0.25 + 1.0)
    assert trace.pulled_version[mine[0]] == version_at(trace, 2.5) == 4
    assert trace.staleness[mine[0]] == 2
    assert not np.any(trace.worker[trace.time < 3.75] == 2)


def test_steps_budget_counts_only_committed_gradients():
    failures = (Failure(at=2.5, restart_after=1.0),)
    workers = [
        WorkerSpec(LogNormal(1.0, 0.3), failures=failures if w == 1 else ()) for w in range(3)
    ]
    workers.append(WorkerSpec(LogNormal(1.0, 0.3), failures=(Failure(at=3.0),)))
    trace = simulate(_spec(workers, budget=StepsBudget(10)), seed=5)
    counts = np.bincount(trace.worker, minlength=4)
    assert list(counts[:3]) == [10, 10, 10]
    assert counts[3] < 10


def test_steps_budget_with_crash_during_last_service_does_not_overshoot():
    # Worker 1's last commit is in service when it crashes; after the restart it must not
    # compute another commit, because the one in service already fills its quota.
    workers = [
        WorkerSpec(Constant(0.1)),
        WorkerSpec(Constant(0.2), failures=(Failure(at=1.5, restart_after=0.1),)),
    ]
    trace = simulate(_spec(workers, budget=StepsBudget(1), service=Constant(1.0)), seed=0)
    np.testing.assert_array_equal(trace.worker, [0, 1])


def test_sync_round_goes_on_without_crashed_worker_and_restart_joins_next_round():
    workers = [WorkerSpec(Constant(1.0))] * 2 + [
        WorkerSpec(Constant(1.0), failures=(Failure(at=0.5, restart_after=0.2),))
    ]
    trace = simulate(_spec(workers, budget=CommitBudget(5), synchronous=True), seed=0)
    np.testing.assert_array_equal(trace.worker, [0, 1, 0, 1, 2])
    np.testing.assert_allclose(trace.time, [1.0, 1.0, 2.0, 2.0, 2.0])
    np.testing.assert_array_equal(trace.pulled_version, [0, 0, 2, 2, 2])


def test_sync_late_joiner_waits_for_the_next_round():
    workers = [WorkerSpec(Constant(1.0))] * 2 + [WorkerSpec(Constant(1.0), join_at=0.4)]
    trace = simulate(_spec(workers, budget=CommitBudget(5), synchronous=True), seed=0)
    np.testing.assert_array_equal(trace.worker, [0, 1, 0, 1, 2])
    np.testing.assert_array_equal(trace.pulled_version, [0, 0, 2, 2, 2])
