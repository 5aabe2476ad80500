"""The grace-period protocol (Liu, Douillard et al. 2024, arXiv 2401.09135, Algorithm 2)
against its definition: a round is the commits made within `seconds` of its first, closed
early once no gradient is in flight; its workers then pull its version together. A window
longer than any delay is `Sync`, commit for commit; a window of 0 is `Async` (config)."""

import dataclasses

import numpy as np
import pytest
from timing_helpers import cluster

from gemsim.timing import (
    CommitBudget,
    Exponential,
    Failure,
    Grace,
    LogNormal,
    SecondsBudget,
    Sync,
    simulate,
)


def rounds(trace):
    """The commits of each round, as index arrays."""
    ends = np.flatnonzero(trace.round_end)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [np.arange(a, b + 1) for a, b in zip(starts, ends, strict=True)]


@pytest.mark.parametrize("seconds", [0.05, 0.3, 2.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_round_is_the_commits_within_the_window_and_its_workers_pull_together(seconds, seed):
    spec = cluster(5, LogNormal(1.0, 0.5), CommitBudget(300), protocol=Grace(seconds))
    trace = simulate(spec, seed=seed)
    assert trace.round_end[-1] or len(trace) == 300
    members = rounds(trace)
    assert sum(len(r) for r in members) <= len(trace)
    for i, r in enumerate(members):
        times = trace.time[r]
        assert times.max() - times[0] <= seconds + 1e-12  # within the window of its first
        assert len(set(trace.worker[r].tolist())) == len(r)  # a worker joins once
        version = r[-1] + 1  # the version the round closed at
        if i + 1 < len(members):
            # the next round's first commit came after this window (or all had joined)
            nxt = members[i + 1][0]
            assert trace.time[nxt] > times[0] + seconds or len(r) == 5
        for w in trace.worker[r]:
            later = np.flatnonzero((trace.worker == w) & (np.arange(len(trace)) > r[-1]))
            if later.size:  # its next gradient starts from the round's version
                assert trace.pulled_version[later[0]] == version
    # windows short enough leave rounds of one commit, long ones gather several
    sizes = [len(r) for r in members]
    if seconds >= 2.0:
        assert np.mean(sizes) > 2
    assert max(sizes) <= 5


@pytest.mark.parametrize("seed", [0, 3])
def test_a_window_longer_than_any_delay_is_sync(seed):
    base = cluster(4, Exponential(1.0), CommitBudget(200))
    grace = simulate(dataclasses.replace(base, protocol=Grace(1e9)), seed=seed)
    sync = simulate(dataclasses.replace(base, protocol=Sync()), seed=seed)
    assert grace.sha256() == sync.sha256()


def test_a_crash_inside_a_window_does_not_hold_the_round():
    crash = (Failure(at=2.5, restart_after=3.0),)
    spec = cluster(3, LogNormal(1.0, 0.3), SecondsBudget(40.0), protocol=Grace(1e9))
    spec = dataclasses.replace(
        spec, workers=(dataclasses.replace(spec.workers[0], failures=crash), *spec.workers[1:])
    )
    trace = simulate(spec, seed=2)
    assert trace.time[-1] > 30  # the run went on past the crash
    for r in rounds(trace):
        assert len(set(trace.worker[r].tolist())) == len(r)


def test_bad_seconds_are_refused():
    for bad in (0, -1.0, float("inf"), float("nan"), "1"):
        with pytest.raises(ValueError, match="Grace.seconds must be a finite number > 0"):
            Grace(bad)
