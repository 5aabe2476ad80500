"""The server options beside the protocol (`gemsim.timing._server_options`) against their
definitions: pulls before apply change versions only, never times; ties by worker order the
arrivals of one instant by index; Ringmaster's calculation stops leave no gradient with a
delay of the threshold or more; Rennala's restarts put every gradient of a step on the step's
version. The defaults are gemsim's behaviour as it was, trace for trace."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from timing_helpers import cluster

from gemsim.timing import (
    BatchRestarts,
    ClusterSpec,
    CommitBudget,
    Constant,
    DelayStops,
    Exponential,
    Failure,
    LogNormal,
    Population,
    PullAt,
    SecondsBudget,
    Ssp,
    Ties,
    WorkerSpec,
    simulate,
    simulate_run,
)

LAW = LogNormal(0.1, 0.5)
NETWORK = dict(pull=Exponential(0.01), push=Exponential(0.01), service=Exponential(0.005))


def busy_spec(**options):
    """Eight unequal workers with network and service times (a queue forms), one crash."""
    workers = tuple(
        WorkerSpec(LAW, speed=s, failures=(Failure(at=2.0, restart_after=0.5),) if w == 3 else ())
        for w, s in enumerate((1.0, 1.0, 2.0, 0.5, 1.5, 1.0, 3.0, 0.7))
    )
    return ClusterSpec(workers=workers, budget=CommitBudget(600), **NETWORK, **options)


def previous_commit(trace) -> np.ndarray:
    """Per commit, its worker's previous commit, or -1."""
    last, out = {}, np.full(len(trace), -1)
    for k, w in enumerate(trace.worker.tolist()):
        out[k] = last.get(w, -1)
        last[w] = k
    return out


def test_the_defaults_are_the_trace_as_it_was():
    spec = busy_spec()
    explicit = busy_spec(pull_at=PullAt.AFTER_APPLY, ties=Ties.BY_START, stops=None)
    assert simulate(spec, 4).sha256() == simulate(explicit, 4).sha256()
    assert busy_spec(pull_at="before_apply").pull_at is PullAt.BEFORE_APPLY  # by value


def test_pull_before_apply_changes_the_versions_only():
    after = simulate(busy_spec(), 4)
    before = simulate(busy_spec(pull_at=PullAt.BEFORE_APPLY), 4)
    for name in ("time", "worker", "compute_time", "queue_time", "service_time", "fresh"):
        np.testing.assert_array_equal(getattr(before, name), getattr(after, name), name)
    prev = previous_commit(before)
    own = (prev >= 0) & ~before.fresh  # pulled at its own previous commit
    assert own.sum() > 500
    np.testing.assert_array_equal(before.pulled_version[own], prev[own])  # the version before
    np.testing.assert_array_equal(after.pulled_version[own], prev[own] + 1)
    assert before.staleness[own].min() >= 1


def test_ties_by_worker_take_one_instants_arrivals_in_index_order():
    # Constant compute: at t = 3 all four arrive. By start, worker 3 (computing since 0) goes
    # first, then 2 (since 1.5), then 0 and 1 (since 2); by worker, index order.
    workers = tuple(WorkerSpec(Constant(c)) for c in (1.0, 1.0, 1.5, 3.0))
    spec = ClusterSpec(workers=workers, budget=CommitBudget(40))
    by_start, by_worker = (
        simulate(spec, 0),
        simulate(dataclasses.replace(spec, ties="by_worker"), 0),
    )
    np.testing.assert_array_equal(by_start.time, by_worker.time)
    at_3 = by_start.time == 3.0
    assert by_start.worker[at_3].tolist() == [3, 2, 0, 1]
    assert by_worker.worker[at_3].tolist() == [0, 1, 2, 3]
    for trace, ordered in ((by_worker, True), (by_start, False)):
        groups = np.split(trace.worker, np.flatnonzero(np.diff(trace.time)) + 1)
        assert all(np.all(np.diff(g) > 0) for g in groups) is ordered
    # With service times and a queue: arrivals of one instant still queue in index order.
    queued = simulate(busy_spec(ties=Ties.BY_WORKER), 2)
    assert len(queued) == 600 and queued.queue_time.max() > 0


@pytest.mark.parametrize("threshold", [1, 3, 8])
def test_delay_stops_leave_no_delay_at_the_threshold(threshold):
    run = simulate_run(busy_spec(stops=DelayStops(threshold)), 5)
    trace = run.trace
    assert len(trace) == 600 and trace.staleness.max() < threshold
    assert run.workers.cancelled.sum() > 0  # stops happened, counted as cancelled work
    # Without stops the same workers send gradients with delays far past the threshold.
    assert simulate(busy_spec(), 5).staleness.max() >= threshold + 2


def test_delay_stops_that_never_trigger_change_nothing():
    plain = simulate(busy_spec(), 5)
    never = simulate_run(busy_spec(stops=DelayStops(plain.staleness.max() + 1)), 5)
    assert never.trace.sha256() == plain.sha256() and never.workers.cancelled.sum() == 0


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_batch_restarts_put_each_steps_gradients_on_its_version(batch):
    run = simulate_run(busy_spec(stops=BatchRestarts(batch)), 6)
    trace = run.trace
    k = np.arange(len(trace))
    step_version = batch * (k // batch)  # the version the step before commit k created
    assert np.all(trace.pulled_version >= step_version)
    if batch > 1:
        assert run.workers.cancelled.sum() > 0


def test_stops_follow_a_shared_link_and_a_seconds_budget():
    spec = busy_spec(stops=DelayStops(2))
    spec = dataclasses.replace(
        spec, bandwidth_bytes_per_s=1e6, model_bytes=4000, shared_link=True, budget=SecondsBudget(5)
    )
    trace = simulate(spec, 1)
    assert len(trace) > 50 and trace.staleness.max() < 2 and trace.time.max() <= 5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(pull_at="sideways"), "ClusterSpec.pull_at must be one of PullAt.AFTER_APPLY"),
        (dict(ties="random"), "ClusterSpec.ties must be one of Ties.BY_START"),
        (dict(stops=2), "ClusterSpec.stops must be one of DelayStops, BatchRestarts or None"),
        (dict(pull_at=PullAt.BEFORE_APPLY, protocol=Ssp(2)), "needs the async protocol"),
        (dict(stops=DelayStops(2), protocol=Ssp(2)), "needs the async protocol"),
        (
            dict(stops=BatchRestarts(2), pull_at=PullAt.BEFORE_APPLY),
            "allowed with pull_at=after_apply only",
        ),
    ],
)
def test_bad_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        cluster(2, LAW, **options)


def test_options_a_population_does_not_have_are_refused():
    population = Population(n_clients=10)
    for options in (
        dict(ties=Ties.BY_WORKER),
        dict(stops=DelayStops(2)),
        dict(pull_at="before_apply"),
    ):
        with pytest.raises(ValueError, match="population"):
            cluster(2, LAW, population=population, **options)
    with pytest.raises(ValueError, match="DelayStops.threshold must be an integer >= 1"):
        DelayStops(0)
    with pytest.raises(ValueError, match="BatchRestarts.batch must be an integer >= 1"):
        BatchRestarts(True)
