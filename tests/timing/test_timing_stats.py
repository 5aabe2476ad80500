"""Staleness summary, theory helpers and the text histogram."""

import json

import numpy as np
import pytest
from timing_helpers import cluster

from gemsim.timing import (
    CommitBudget,
    CommitTrace,
    Constant,
    Exponential,
    expected_worker_staleness,
    format_histogram,
    geometric_pmf,
    simulate,
    staleness_summary,
    total_variation,
)


def _trace():
    return CommitTrace.from_columns(
        time=[1.0, 2.0, 2.0, 3.0, 4.0],
        worker=[0, 1, 0, 0, 1],
        pulled_version=[0, 0, 1, 3, 2],
        compute_time=[1.0] * 5,
        queue_time=[0.0] * 5,
        service_time=[0.5] * 5,
        n_workers=3,
        duration=5.0,
        busy_time=2.0,
    )


def test_summary_of_a_small_trace():
    summary = staleness_summary(_trace())  # staleness 0, 1, 1, 0, 2
    assert summary["commits"] == 5
    assert summary["staleness_mean"] == pytest.approx(0.8)
    assert summary["staleness_var"] == pytest.approx(np.var([0, 1, 1, 0, 2]))
    assert summary["staleness_p50"] == 1
    assert summary["staleness_p99"] == 2
    assert summary["staleness_max"] == 2
    assert summary["commits_per_second"] == pytest.approx(1.0)
    assert summary["ps_utilisation"] == pytest.approx(0.4)
    assert summary["histogram"] == [2, 2, 1]
    assert summary["per_worker"] == [
        {"worker": 0, "commits": 3, "staleness_mean": pytest.approx(1 / 3)},
        {"worker": 1, "commits": 2, "staleness_mean": pytest.approx(1.5)},
        {"worker": 2, "commits": 0, "staleness_mean": None},
    ]
    json.dumps(summary)  # plain Python values only


def test_utilisation_falls_back_to_service_times_without_busy_time():
    trace = _trace()
    columns = {name: getattr(trace, name) for name in ("time", "worker", "pulled_version")}
    columns.update(compute_time=trace.compute_time, queue_time=trace.queue_time)
    bare = CommitTrace.from_columns(
        **columns, service_time=trace.service_time, n_workers=3, duration=5.0
    )
    assert staleness_summary(bare)["ps_utilisation"] == pytest.approx(0.5)


def test_summary_of_an_empty_trace_has_no_statistics():
    empty = {k: [] for k in ("time", "worker", "pulled_version", "compute_time")}
    trace = CommitTrace.from_columns(
        **empty, queue_time=[], service_time=[], n_workers=2, duration=0.0
    )
    summary = staleness_summary(trace)
    assert summary["commits"] == 0
    assert summary["staleness_mean"] is None and summary["commits_per_second"] is None
    assert summary["histogram"] == []
    assert [row["commits"] for row in summary["per_worker"]] == [0, 0]


def test_summary_of_a_simulation_is_consistent():
    trace = simulate(cluster(6, Exponential(mean=1.0), CommitBudget(5000)), seed=0)
    summary = staleness_summary(trace)
    assert sum(summary["histogram"]) == 5000
    assert sum(row["commits"] for row in summary["per_worker"]) == 5000
    assert summary["staleness_p50"] <= summary["staleness_p99"] <= summary["staleness_max"]
    assert summary["commits_per_second"] == pytest.approx(6.0, rel=0.05)


def test_geometric_pmf():
    pmf = geometric_pmf(4, 2000)
    assert pmf[0] == 0.25 and pmf[1] == pytest.approx(0.25 * 0.75)
    assert pmf.sum() == pytest.approx(1.0)
    k = np.arange(len(pmf))
    assert (k * pmf).sum() == pytest.approx(3.0)
    assert ((k - 3.0) ** 2 * pmf).sum() == pytest.approx(12.0)
    np.testing.assert_array_equal(geometric_pmf(1, 3), [1.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        geometric_pmf(0, 3)
    with pytest.raises(ValueError, match="kmax"):
        geometric_pmf(3, -1)


def test_expected_worker_staleness():
    np.testing.assert_allclose(expected_worker_staleness([1, 1, 2, 4]), [7, 7, 3, 1])
    np.testing.assert_allclose(expected_worker_staleness([2.0] * 5), [4.0] * 5)
    for bad in ([], [1.0, 0.0], [1.0, -2.0], [np.inf]):
        with pytest.raises(ValueError, match="rates"):
            expected_worker_staleness(bad)


def test_total_variation():
    assert total_variation([0.5, 0.5], [0.5, 0.5]) == 0.0
    assert total_variation([1.0], [0.0, 1.0]) == 1.0  # padded with zeros
    assert total_variation([0.2, 0.8], [0.6, 0.4]) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="p must be"):
        total_variation([-0.1, 1.1], [1.0])
    with pytest.raises(ValueError, match="q must be"):
        total_variation([1.0], [[1.0]])


def test_format_histogram_small_and_binned():
    text = format_histogram([5, 10, 0, 5], expected=[0.25, 0.5, 0.0, 0.25], width=10)
    lines = text.splitlines()
    assert lines[0].split() == ["tau", "count", "obs%", "exp%"]
    assert lines[2].endswith("#" * 10)
    assert "50.00" in lines[2]
    assert len(lines) == 5
    many = format_histogram(np.ones(100, dtype=int), max_rows=10)
    assert len(many.splitlines()) == 11
    assert many.splitlines()[1].split()[0] == "0-9"
    assert format_histogram([]) == "(no commits)"


def test_format_histogram_of_a_trace():
    trace = simulate(cluster(3, Constant(1.0), CommitBudget(30)), seed=0)
    text = format_histogram(staleness_summary(trace)["histogram"])
    assert text.splitlines()[-1].startswith("2")
