"""Each budget kind stops exactly where it says."""

import math

import numpy as np
import pytest
from timing_helpers import cluster

from gemsim.timing import (
    CommitBudget,
    Discipline,
    Exponential,
    LogNormal,
    SecondsBudget,
    StepsBudget,
    simulate,
)

NETWORK = {
    "pull": LogNormal(0.05, 0.5),
    "push": LogNormal(0.05, 0.5),
    "service": LogNormal(0.02, 0.5),
}


@pytest.mark.parametrize("synchronous", [False, True])
@pytest.mark.parametrize("commits", [1, 7, 2500])
def test_commit_budget_gives_exactly_n_commits(commits, synchronous):
    spec = cluster(
        6, LogNormal(1.0, 0.5), CommitBudget(commits), synchronous=synchronous, **NETWORK
    )
    trace = simulate(spec, seed=11)
    assert len(trace) == commits
    assert trace.duration == trace.time[-1]


def test_commit_budget_is_a_prefix_of_a_longer_run():
    short = simulate(cluster(8, LogNormal(1.0, 0.5), CommitBudget(500), **NETWORK), seed=3)
    long = simulate(cluster(8, LogNormal(1.0, 0.5), CommitBudget(1500), **NETWORK), seed=3)
    for name, column in short.columns().items():
        np.testing.assert_array_equal(column, getattr(long, name)[:500], err_msg=name)


@pytest.mark.parametrize("discipline", list(Discipline))
def test_seconds_budget_keeps_every_commit_up_to_the_horizon_and_none_after(discipline):
    spec = cluster(10, Exponential(mean=1.0), SecondsBudget(40.0), discipline=discipline, **NETWORK)
    trace = simulate(spec, seed=5)
    longer = simulate(
        cluster(10, Exponential(mean=1.0), SecondsBudget(80.0), discipline=discipline, **NETWORK),
        seed=5,
    )
    assert trace.duration == 40.0
    assert trace.time[-1] <= 40.0
    expected = int((longer.time <= 40.0).sum())
    assert len(trace) == expected
    np.testing.assert_array_equal(trace.time, longer.time[:expected])


def test_seconds_budget_counts_a_commit_exactly_at_the_horizon():
    from gemsim.timing import Constant

    trace = simulate(cluster(3, Constant(1.0), SecondsBudget(3.0)), seed=0)
    assert len(trace) == 9
    assert trace.time[-1] == 3.0


def test_seconds_budget_busy_time_counts_service_cut_by_the_horizon():
    from gemsim.timing import Constant

    # One worker: compute 1, service 2 -> commits at 3, 6; the third service runs 7..9.
    trace = simulate(cluster(1, Constant(1.0), SecondsBudget(8.0), service=Constant(2.0)), 0)
    np.testing.assert_allclose(trace.time, [3.0, 6.0])
    assert trace.busy_time == pytest.approx(2.0 + 2.0 + 1.0)


@pytest.mark.parametrize(("steps", "window"), [(10, 1), (10, 3), (9, 3), (1, 4)])
@pytest.mark.parametrize("synchronous", [False, True])
def test_steps_budget_commits_ceil_steps_over_window_per_worker(steps, window, synchronous):
    spec = cluster(
        5,
        LogNormal(1.0, 0.5),
        StepsBudget(steps),
        speeds=(1.0, 1.0, 2.0, 0.5, 3.0),
        window=window,
        synchronous=synchronous,
        **NETWORK,
    )
    trace = simulate(spec, seed=8)
    counts = np.bincount(trace.worker, minlength=5)
    assert list(counts) == [math.ceil(steps / window)] * 5
