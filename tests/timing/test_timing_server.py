"""The parameter server, the network, windows and tie order."""

import numpy as np
import pytest
from timing_helpers import cluster, rows_of

from gemsim.timing import (
    ClusterSpec,
    CommitBudget,
    Constant,
    Discipline,
    Exponential,
    LogNormal,
    SecondsBudget,
    WorkerSpec,
    simulate,
    staleness_summary,
)
from gemsim.timing._draws import seed_sequence


@pytest.mark.parametrize("service", [None, Constant(0.01)])
@pytest.mark.parametrize("synchronous", [False, True])
def test_equal_constant_compute_commits_in_worker_order_every_round(service, synchronous):
    n = 7
    spec = cluster(n, Constant(1.0), CommitBudget(10 * n), service=service, synchronous=synchronous)
    trace = simulate(spec, seed=0)
    np.testing.assert_array_equal(trace.worker, np.tile(np.arange(n), 10))


def test_synchronous_rounds_share_one_pulled_version():
    n = 4
    spec = cluster(n, LogNormal(1.0, 0.5), CommitBudget(40), synchronous=True, pull=Constant(0.5))
    trace = simulate(spec, seed=2)
    rounds = trace.pulled_version.reshape(10, n)
    np.testing.assert_array_equal(rounds, np.repeat(np.arange(0, 40, n)[:, None], n, axis=1))
    np.testing.assert_array_equal(trace.staleness.reshape(10, n), np.tile(np.arange(n), (10, 1)))
    # The first round starts at t = 0 without a pull; later ones when the previous round
    # is complete, plus the pull latency.
    np.testing.assert_array_equal(trace.time[:n], trace.compute_time[:n])
    times = trace.time.reshape(10, n)
    starts = times[:-1, -1] + 0.5 + trace.compute_time.reshape(10, n)[1:].min(axis=1)
    assert np.all(times[1:].min(axis=1) >= starts - 1e-12)


def _loaded(discipline, seed=0):
    # Service 0.3 s against 4 workers computing ~1 s: the PS is busy and queues form.
    return cluster(
        4,
        Exponential(mean=1.0),
        CommitBudget(3000),
        service=Exponential(mean=0.3),
        discipline=discipline,
    )


def _arrivals(trace):
    return trace.time - trace.service_time - trace.queue_time


def test_fifo_serves_in_arrival_order():
    trace = simulate(_loaded(Discipline.FIFO), seed=1)
    assert np.all(np.diff(_arrivals(trace)) >= -1e-9)
    assert trace.queue_time.max() > 0


def test_random_discipline_serves_out_of_arrival_order_and_keeps_worker_draws():
    fifo = simulate(_loaded(Discipline.FIFO), seed=1)
    rand = simulate(_loaded(Discipline.RANDOM), seed=1)
    assert np.sum(np.diff(_arrivals(rand)) < -1e-9) > 50
    # Random service spreads waiting times: the worst wait grows.
    assert rand.queue_time.max() > fifo.queue_time.max()
    # The picks come from the server's stream; workers' compute draws do not shift.
    for w in range(4):
        a, b = fifo.compute_time[rows_of(fifo, w)], rand.compute_time[rows_of(rand, w)]
        m = min(len(a), len(b))
        np.testing.assert_array_equal(a[:m], b[:m])


def test_random_discipline_is_deterministic():
    first = simulate(_loaded(Discipline.RANDOM), seed=9)
    assert first.sha256() == simulate(_loaded(Discipline.RANDOM), seed=9).sha256()
    assert first.sha256() != simulate(_loaded(Discipline.RANDOM), seed=10).sha256()


def test_service_and_queue_times_are_recorded_and_busy_time_is_their_sum():
    trace = simulate(_loaded(Discipline.FIFO), seed=4)
    assert np.all(trace.service_time > 0)
    assert trace.busy_time == pytest.approx(trace.service_time.sum())
    summary = staleness_summary(trace)
    assert 0 < summary["ps_utilisation"] <= 1
    assert summary["ps_utilisation"] == pytest.approx(trace.busy_time / trace.duration)


def test_bandwidth_adds_model_bytes_over_bandwidth_to_pull_and_push():
    def run(**net):
        spec = cluster(1, Constant(1.0), CommitBudget(4), **net)
        return simulate(spec, seed=0).time

    np.testing.assert_allclose(run(), [1.0, 2.0, 3.0, 4.0])
    transfer = {"bandwidth_bytes_per_s": 1e6, "model_bytes": 250_000}  # 0.25 s each way
    np.testing.assert_allclose(run(**transfer), [1.25, 2.75, 4.25, 5.75])
    both = run(**transfer, push=Constant(0.1), pull=Constant(0.2))
    np.testing.assert_allclose(both, [1.35, 3.15, 4.95, 6.75])
    # Without a bandwidth the model size alone costs nothing.
    np.testing.assert_allclose(run(model_bytes=250_000), [1.0, 2.0, 3.0, 4.0])


def test_speed_divides_compute_time_and_window_sums_batches():
    trace = simulate(cluster(2, Constant(1.0), CommitBudget(6), speeds=(2.0, 0.5), window=3), 0)
    np.testing.assert_allclose(trace.compute_time[trace.worker == 0], 1.5)
    np.testing.assert_allclose(trace.compute_time[trace.worker == 1], 6.0)


def test_compute_time_is_the_sum_of_window_draws_from_the_worker_stream():
    law, window, speed, seed = LogNormal(1.0, 0.5), 4, 1.5, 21
    workers = (WorkerSpec(law), WorkerSpec(law, speed=speed))
    spec = ClusterSpec(workers=workers, budget=SecondsBudget(120.0), window=window)
    trace = simulate(spec, seed)
    rng = np.random.default_rng(seed_sequence(seed, 0, 1, 0))
    expected = law.sample(rng, 64 * window).reshape(64, window).sum(axis=1) / speed
    mine = trace.compute_time[rows_of(trace, 1)]
    assert len(mine) > 10
    np.testing.assert_array_equal(mine, expected[: len(mine)])


def test_zero_service_keeps_the_theory_and_service_lowers_throughput():
    base = simulate(cluster(4, LogNormal(1.0, 0.3), SecondsBudget(200.0)), seed=6)
    slow = simulate(
        cluster(4, LogNormal(1.0, 0.3), SecondsBudget(200.0), service=Constant(0.2)), seed=6
    )
    assert np.all(base.service_time == 0) and np.all(base.queue_time == 0)
    assert base.busy_time == 0
    assert len(slow) < len(base)


def test_random_discipline_in_synchronous_rounds_keeps_the_round_structure():
    spec = cluster(
        5,
        LogNormal(1.0, 0.5),
        CommitBudget(50),
        synchronous=True,
        discipline=Discipline.RANDOM,
        service=Constant(0.3),
    )
    trace = simulate(spec, seed=3)
    np.testing.assert_array_equal(trace.pulled_version, np.repeat(np.arange(0, 50, 5), 5))
    for rnd in trace.worker.reshape(10, 5):
        assert sorted(rnd) == list(range(5))


def test_a_thousand_workers():
    spec = cluster(
        1000,
        LogNormal(1.0, 0.5),
        CommitBudget(20_000),
        pull=LogNormal(0.01, 0.5),
        push=LogNormal(0.01, 0.5),
        service=LogNormal(0.0005, 0.5),
    )
    trace = simulate(spec, seed=0)
    assert len(trace) == 20_000
    assert np.all(np.bincount(trace.worker, minlength=1000) > 0)


def test_a_long_run_of_services_each_ending_before_the_next_event_needs_no_recursion():
    """1,000 workers of equal constant compute reach an idle server at once, each service
    ending before anything else happens: the server finishes them one after another in a
    loop (an early version recursed, and ran out of stack)."""
    from gemsim import timing

    workers = tuple(timing.WorkerSpec(compute=timing.Constant(1.0)) for _ in range(1000))
    spec = timing.ClusterSpec(
        workers=workers,
        pull=None,
        push=None,
        bandwidth_bytes_per_s=None,
        model_bytes=0,
        service=timing.Constant(0.0001),
        discipline=timing.Discipline.FIFO,
        window=1,
        budget=timing.CommitBudget(3000),
    )
    trace = timing.simulate(spec, seed=0)
    assert len(trace) == 3000
    assert (trace.worker[:1000] == range(1000)).all()  # served in arrival (index) order
