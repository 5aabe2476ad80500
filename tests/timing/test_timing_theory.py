"""Staleness theory of docs/design.md §4: zero service/network time, pull at commit."""

import numpy as np
import pytest
from timing_helpers import cluster

from gemsim.timing import (
    CommitBudget,
    Constant,
    Exponential,
    LogNormal,
    Uniform,
    expected_worker_staleness,
    geometric_pmf,
    simulate,
    staleness_summary,
    total_variation,
)
from gemsim.timing._stats import staleness_pmf

LAWS = {
    "exponential": (Exponential(mean=1.0), None),
    "lognormal": (LogNormal(median=1.0, sigma=0.5), None),
    "uniform": (Uniform(low=0.5, high=1.5), None),
    "heterogeneous": (LogNormal(median=1.0, sigma=0.3), "speeds"),
}


@pytest.mark.parametrize("n", [5, 30])
@pytest.mark.parametrize("law", sorted(LAWS))
def test_mean_staleness_is_n_minus_one(law, n):
    compute, kind = LAWS[law]
    speeds = tuple(np.linspace(0.5, 2.0, n)) if kind == "speeds" else None
    trace = simulate(cluster(n, compute, CommitBudget(50_000), speeds=speeds), seed=1)
    mean = staleness_summary(trace)["staleness_mean"]
    assert mean == pytest.approx(n - 1, rel=0.01)


def test_per_worker_staleness_matches_commit_rates():
    rates = (1.0, 1.0, 2.0, 4.0)
    trace = simulate(cluster(4, Exponential(mean=1.0), CommitBudget(200_000), speeds=rates), 2)
    per_worker = staleness_summary(trace)["per_worker"]
    observed = np.array([row["staleness_mean"] for row in per_worker])
    np.testing.assert_allclose(observed, expected_worker_staleness(rates), rtol=0.03)
    np.testing.assert_allclose(expected_worker_staleness(rates), [7.0, 7.0, 3.0, 1.0])


@pytest.mark.parametrize("n", [5, 10])
def test_exponential_compute_gives_geometric_staleness(n):
    trace = simulate(cluster(n, Exponential(mean=1.0), CommitBudget(100_000)), seed=3)
    pmf = staleness_pmf(trace)
    theory = geometric_pmf(n, kmax=len(pmf) + 50 * n)
    assert total_variation(pmf, theory) < 0.02
    summary = staleness_summary(trace)
    assert summary["staleness_var"] == pytest.approx(n * (n - 1), rel=0.05)


@pytest.mark.parametrize("n", [1, 4, 17])
def test_constant_equal_compute_gives_exactly_n_minus_one(n):
    trace = simulate(cluster(n, Constant(1.0), CommitBudget(20 * n)), seed=0)
    assert np.all(trace.staleness[n:] == n - 1)
    # The first round: everyone computed on version 0, committing in worker order.
    np.testing.assert_array_equal(trace.staleness[:n], np.arange(n))
