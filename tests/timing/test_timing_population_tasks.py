"""A population's tasks (`ClientTasks`), from the timing model's one run: the committed ones
are the trace's rows, the others lost when their client went down or in flight at the end,
and the per-client counts of the `ClientReport` are their sums."""

import math

import numpy as np
import pytest

from gemsim.timing import (
    TASK_COMMITTED,
    TASK_IN_FLIGHT,
    TASK_LOST,
    Churn,
    ClusterSpec,
    CommitBudget,
    Exponential,
    LogNormal,
    Population,
    SecondsBudget,
    WorkerSpec,
    client_down_intervals,
    simulate_run,
)

CHURN = Churn(Exponential(20.0), Exponential(10.0))
POPULATION = Population(40, speed=LogNormal(1.0, 0.6), churn=CHURN)


def _spec(budget, population=POPULATION, k=5):
    # Service and push times are continuous: no two events share an instant.
    return ClusterSpec(
        workers=(WorkerSpec(Exponential(1.0)),) * k,
        budget=budget,
        push=Exponential(0.05),
        service=Exponential(0.01),
        population=population,
    )


@pytest.fixture(scope="module", params=[CommitBudget(1500), SecondsBudget(200.0)])
def run(request):
    return simulate_run(_spec(request.param), seed=7)


def test_the_committed_tasks_are_the_traces_rows_row_for_row(run):
    trace, tasks = run.trace, run.clients.tasks
    done = np.flatnonzero(tasks.outcome == TASK_COMMITTED)
    rows = tasks.commit[done]
    np.testing.assert_array_equal(np.sort(rows), np.arange(len(trace)))
    in_order = done[np.argsort(rows)]
    np.testing.assert_array_equal(tasks.client[in_order], trace.client)
    np.testing.assert_array_equal(tasks.slot[in_order], trace.worker)
    np.testing.assert_array_equal(tasks.end[in_order], trace.time)  # the commit's instant
    # The staleness the trace computes is the commits made while the task ran: its pull, at
    # its start, holds every commit made by then.
    pulled = np.searchsorted(trace.time, tasks.start[in_order], side="right")
    np.testing.assert_array_equal(trace.pulled_version, pulled)
    np.testing.assert_array_equal(trace.staleness, np.arange(len(trace)) - pulled)
    # A task lasts at least its compute, its wait in the queue and its service.
    spent = trace.compute_time + trace.queue_time + trace.service_time
    assert np.all(tasks.end[in_order] - tasks.start[in_order] >= spent * (1 - 1e-12))
    assert np.all(tasks.commit[tasks.outcome != TASK_COMMITTED] == -1)


def test_started_is_committed_plus_lost_plus_in_flight_and_the_counts_are_their_sums(run):
    tasks, clients, n = run.clients.tasks, run.clients, POPULATION.n_clients

    def per_client(outcome=None):
        chosen = tasks.client if outcome is None else tasks.client[tasks.outcome == outcome]
        return np.bincount(chosen, minlength=n)

    np.testing.assert_array_equal(clients.started, per_client())
    np.testing.assert_array_equal(clients.completed, per_client(TASK_COMMITTED))
    np.testing.assert_array_equal(clients.lost, per_client(TASK_LOST))
    in_flight = per_client(TASK_IN_FLIGHT)
    np.testing.assert_array_equal(clients.started, clients.completed + clients.lost + in_flight)
    # Against counts kept apart from the tasks: the trace's commits, each slot's losses.
    np.testing.assert_array_equal(clients.completed, np.bincount(run.trace.client, minlength=n))
    lost_by_slot = np.bincount(tasks.slot[tasks.outcome == TASK_LOST], minlength=5)
    np.testing.assert_array_equal(lost_by_slot, run.workers.lost)
    assert clients.lost.sum() > 20  # the churn is felt
    # At most one task a slot is in flight at the end, its end unknown.
    flying = tasks.outcome == TASK_IN_FLIGHT
    assert len(np.unique(tasks.slot[flying])) == flying.sum() <= 5
    assert np.all(np.isnan(tasks.end[flying])) and not np.isnan(tasks.end[~flying]).any()


def test_a_slot_runs_one_task_at_a_time_and_a_client_is_in_one_at_a_time(run):
    tasks = run.clients.tasks
    end = np.where(np.isnan(tasks.end), np.inf, tasks.end)
    for column in (tasks.slot, tasks.client):
        for who in np.unique(column):
            mine = np.flatnonzero(column == who)  # in start order
            assert np.all(tasks.start[mine[1:]] >= end[mine[:-1]]), who
    # A slot's next task starts the moment its task ends (no client was ever missing here).
    for w in range(5):
        mine = np.flatnonzero(tasks.slot == w)
        np.testing.assert_array_equal(tasks.start[mine[1:]], end[mine[:-1]])
    assert np.all(tasks.start[:5] == 0.0) and list(tasks.slot[:5]) == list(range(5))


def test_a_lost_task_ends_when_its_client_goes_down(run):
    tasks = run.clients.tasks
    lost = np.flatnonzero(tasks.outcome == TASK_LOST)
    for i in lost:
        c, t = int(tasks.client[i]), float(tasks.end[i])
        downs = client_down_intervals(POPULATION, 7, c, until=t + 1e-9)
        assert any(d.start == t for d in downs), (i, c, t)
        assert tasks.start[i] < t


def test_a_seconds_budget_starts_no_task_after_its_end_and_a_loss_after_it_is_in_flight():
    run = simulate_run(_spec(SecondsBudget(120.0)), seed=3)
    tasks = run.clients.tasks
    assert tasks.start.max() <= 120.0
    ended = ~np.isnan(tasks.end)
    assert np.all(tasks.end[ended] <= 120.0)
    assert run.clients.started.sum() == len(tasks.client)


def test_without_a_population_there_are_no_tasks():
    spec = ClusterSpec(workers=(WorkerSpec(Exponential(1.0)),) * 3, budget=CommitBudget(50))
    assert simulate_run(spec, seed=0).clients is None


def test_clients_never_down_lose_nothing_and_the_tasks_tile_the_slots():
    run = simulate_run(_spec(CommitBudget(300), Population(12)), seed=1)
    tasks = run.clients.tasks
    assert not np.any(tasks.outcome == TASK_LOST)
    assert np.sum(tasks.outcome == TASK_IN_FLIGHT) == 5  # every slot busy at the end
    assert math.isclose(tasks.start[-1], run.trace.time[-1])  # started at the last commit
