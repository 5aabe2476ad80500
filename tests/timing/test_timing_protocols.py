"""Server protocols against their invariants and closed forms (docs/design.md §4).

SSP (Ho et al. 2013): no worker computes while its clock leads the slowest's by more than
the bound; bound 0 is lock-step rounds, an unbounded SSP is `Async`. K-sync and K-async
(Dutta et al. 2018): with exponential compute of rate lambda, the expected time per update
is (H_n - H_{n-k}) / lambda for both; k = n of k_sync is `Sync`, k = 1 of k_async `Async`.
"""

import math

import numpy as np
import pytest
from timing_helpers import cluster

from gemsim.timing import (
    Async,
    ClusterSpec,
    CommitBudget,
    Constant,
    Exponential,
    Failure,
    KAsync,
    KSync,
    LogNormal,
    SecondsBudget,
    Ssp,
    StepsBudget,
    Sync,
    WorkerSpec,
    one_commit_rounds,
    simulate,
    simulate_run,
)

LAW = LogNormal(1.0, 0.5)


def _clocks_at_versions(trace):
    """clocks[v, w]: commits worker w had made when version v was current."""
    onehot = np.zeros((len(trace) + 1, trace.n_workers), dtype=np.int64)
    onehot[np.arange(1, len(trace) + 1), trace.worker] = 1
    return np.cumsum(onehot, axis=0)


def _harmonic(m: int) -> float:
    return math.fsum(1.0 / i for i in range(1, m + 1))


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_ssp_no_worker_computes_while_leading_by_more_than_the_bound(bound):
    trace = simulate(cluster(6, LAW, CommitBudget(3000), protocol=Ssp(bound)), seed=2)
    clocks = _clocks_at_versions(trace)
    # Each gradient was started (pulled) at its pulled version: its worker's clock then
    # leads the slowest clock by at most the bound.
    at_pull = clocks[trace.pulled_version]
    lead = at_pull[np.arange(len(trace)), trace.worker] - at_pull.min(axis=1)
    assert lead.max() == bound  # reached, never exceeded
    # So no clock ever leads the slowest by more than bound + 1 (the commit in flight).
    assert (clocks.max(axis=1) - clocks.min(axis=1)).max() <= bound + 1


def test_ssp_bound_zero_is_lock_step_rounds():
    n = 5
    ssp = simulate(cluster(n, LAW, CommitBudget(1000), protocol=Ssp(0)), seed=3)
    sync = simulate(cluster(n, LAW, CommitBudget(1000), protocol=Sync()), seed=3)
    for name in ("time", "worker", "pulled_version", "compute_time", "queue_time"):
        np.testing.assert_array_equal(getattr(ssp, name), getattr(sync, name))
    rounds = ssp.pulled_version.reshape(-1, n)
    assert np.all(rounds == rounds[:, :1]) and np.all(rounds[:, 0] == np.arange(0, 1000, n))
    assert ssp.round_end.all()  # a rule still applies each commit as it comes


@pytest.mark.parametrize("bound", [math.inf, 10**9])
def test_unbounded_ssp_is_async(bound):
    kwargs = {"pull": LogNormal(0.05, 0.5), "service": LogNormal(0.01, 1)}
    ssp = simulate(cluster(6, LAW, CommitBudget(2000), protocol=Ssp(bound), **kwargs), seed=4)
    plain = simulate(cluster(6, LAW, CommitBudget(2000), **kwargs), seed=4)
    assert ssp.sha256() == plain.sha256()


def test_ssp_blocked_time_is_reported_and_shrinks_with_the_bound():
    waited = [
        simulate_run(
            cluster(6, LAW, SecondsBudget(500.0), protocol=Ssp(s)), seed=5
        ).workers.waited_seconds.sum()
        for s in (0, 1, 4, math.inf)
    ]
    assert waited[0] > waited[1] > waited[2] > 0 and waited[3] == 0


def test_ssp_ignores_workers_that_are_down_and_restarts_at_the_slowest_clock():
    workers = [WorkerSpec(LAW) for _ in range(4)]
    workers[0] = WorkerSpec(LAW, failures=(Failure(5.0, 30.0),))
    trace = simulate(
        ClusterSpec(workers=tuple(workers), budget=SecondsBudget(80.0), protocol=Ssp(1)), 6
    )
    down = (trace.time > 5.0) & (trace.time < 35.0)
    assert np.count_nonzero(down & (trace.worker != 0)) > 30  # the others went on


@pytest.mark.parametrize("k", [1, 3, 6, 8])
@pytest.mark.parametrize("protocol", [KSync, KAsync])
def test_time_per_update_matches_the_exponential_closed_form(protocol, k):
    n, mean, rounds = 8, 0.5, 6000
    spec = cluster(n, Exponential(mean), CommitBudget(k * rounds), protocol=protocol(k))
    trace = simulate(spec, seed=k)
    ends = trace.time[trace.round_end]
    assert len(ends) == rounds
    per_update = np.diff(ends, prepend=0.0)
    expected = mean * (_harmonic(n) - _harmonic(n - k))
    variance = mean**2 * math.fsum(1.0 / i**2 for i in range(n - k + 1, n + 1))
    # The k-th of n exponential finishing times; memorylessness makes k_async's the same.
    assert per_update.mean() == pytest.approx(expected, abs=4 * math.sqrt(variance / rounds))
    if protocol is KSync:
        assert per_update.var() == pytest.approx(variance, rel=0.15)


def test_k_sync_rounds_start_together_and_cancel_the_stragglers():
    n, k, rounds = 6, 4, 300
    run = simulate_run(cluster(n, LAW, CommitBudget(k * rounds), protocol=KSync(k)), seed=8)
    trace = run.trace
    pulled = trace.pulled_version.reshape(rounds, k)
    assert np.all(pulled == np.arange(0, k * rounds, k)[:, None])
    assert np.array_equal(np.flatnonzero(trace.round_end) + 1, np.arange(k, k * rounds + 1, k))
    for block in trace.worker.reshape(rounds, k):
        assert len(set(block)) == k
    assert run.workers.cancelled.sum() == (n - k) * rounds  # every round cancels n - k
    assert np.all(run.workers.cancelled_compute_seconds > 0)


def test_k_sync_with_k_equal_n_is_sync():
    a = simulate(cluster(5, LAW, CommitBudget(500), protocol=KSync(5)), seed=9)
    b = simulate(cluster(5, LAW, CommitBudget(500), synchronous=True), seed=9)
    assert a.sha256() == b.sha256()


def test_k_async_with_k_one_is_async():
    kwargs = {"push": LogNormal(0.05, 0.5), "service": LogNormal(0.01, 1)}
    a = simulate(cluster(6, LAW, CommitBudget(2000), protocol=KAsync(1), **kwargs), seed=10)
    b = simulate(cluster(6, LAW, CommitBudget(2000), protocol=Async(), **kwargs), seed=10)
    assert a.sha256() == b.sha256()


def test_k_async_contributors_wait_and_pull_the_round_version_others_keep_going():
    n, k = 6, 3
    trace = simulate(cluster(n, LAW, CommitBudget(900), protocol=KAsync(k)), seed=11)
    ends = np.flatnonzero(trace.round_end)
    assert np.array_equal(ends + 1, np.arange(k, 901, k))
    for start in range(0, 900, k):
        workers = trace.worker[start : start + k]
        assert len(set(workers)) == k  # distinct contributors
        for w in workers:  # each pulls the version the round's update created
            later = np.flatnonzero(trace.worker[start + k :] == w)
            if later.size:
                assert trace.pulled_version[start + k + later[0]] == start + k
    assert trace.staleness.max() >= k  # the others computed on older versions


@pytest.mark.parametrize("protocol", [Ssp(1), KSync(2), KAsync(2), Sync()])
def test_protocols_compose_with_crashes_steps_budgets_and_are_deterministic(protocol):
    workers = [WorkerSpec(LAW) for _ in range(4)]
    workers[1] = WorkerSpec(LAW, failures=(Failure(3.0, 2.0), Failure(9.0)))
    workers[2] = WorkerSpec(LAW, join_at=4.0)
    spec = ClusterSpec(workers=tuple(workers), budget=StepsBudget(15), protocol=protocol)
    first, second = simulate(spec, 12), simulate(spec, 12)
    assert first.sha256() == second.sha256()
    counts = np.bincount(first.worker, minlength=4)
    assert counts[0] == counts[2] == counts[3] == 15 and counts[1] < 15


def test_protocol_validation_names_the_field():
    with pytest.raises(ValueError, match="k must be <= the number of workers"):
        cluster(3, LAW, protocol=KSync(4))
    with pytest.raises(ValueError, match="Ssp.bound"):
        Ssp(-1)
    with pytest.raises(ValueError, match="KAsync.k"):
        KAsync(0)
    with pytest.raises(ValueError, match="synchronous=True means protocol=Sync"):
        cluster(3, LAW, protocol=Ssp(1), synchronous=True)
    assert cluster(3, LAW, protocol=Sync()).synchronous
    assert cluster(3, Constant(1.0), synchronous=True).protocol == Sync()


def test_one_commit_rounds():
    assert one_commit_rounds(Async()) and one_commit_rounds(Ssp(0))
    assert one_commit_rounds(KSync(1)) and one_commit_rounds(KAsync(1))
    assert not any(one_commit_rounds(p) for p in (Sync(), KSync(2), KAsync(2)))
