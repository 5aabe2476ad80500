"""Transient slowdowns (stragglers for a while) and the shared parameter-server link."""

import math

import numpy as np
import pytest
from timing_helpers import rows_of

from gemsim.timing import (
    ClusterSpec,
    CommitBudget,
    Constant,
    Exponential,
    LogNormal,
    SecondsBudget,
    SlowdownClock,
    Slowdowns,
    Uniform,
    WorkerSpec,
    simulate,
)
from gemsim.timing._draws import SLOW_DURATION, SLOW_EVERY, SLOW_FACTOR, seed_sequence, worker_draws


def _reference_finish(slowdowns, seed, w, t0, work, episodes=400):
    """Where ``work`` seconds of normal-speed compute started at t0 end, by inverting the
    piecewise-linear work-done curve (slope 1 between episodes, 1/factor inside)."""

    def draws(law, kind):
        return law.sample(np.random.default_rng(seed_sequence(seed, 0, w, kind)), episodes)

    every = draws(slowdowns.every, SLOW_EVERY)
    duration = draws(slowdowns.duration, SLOW_DURATION)
    factor = draws(slowdowns.factor, SLOW_FACTOR)
    starts = np.cumsum(every + np.concatenate([[0.0], duration[:-1]]))
    ends = starts + duration
    times = np.concatenate([[0.0], np.ravel(np.column_stack([starts, ends]))])
    done = np.concatenate([[0.0], np.cumsum(np.ravel(np.column_stack([every, duration / factor])))])
    return np.interp(np.interp(t0, times, done) + work, done, times)


def test_stretch_matches_the_inverted_work_curve():
    slow = Slowdowns(every=Exponential(3.0), factor=Uniform(2.0, 5.0), duration=Exponential(1.5))
    spec = WorkerSpec(Constant(1.0), slowdowns=slow)
    clock = SlowdownClock(spec, 7, 3)
    rng = np.random.default_rng(0)
    t0 = np.sort(rng.uniform(0, 600, 400))
    work = rng.exponential(0.7, 400)
    ours = np.array([t + clock.stretch(t, c) for t, c in zip(t0, work, strict=True)])
    np.testing.assert_allclose(ours, _reference_finish(slow, 7, 3, t0, work), rtol=1e-9)


def test_mean_compute_time_matches_the_mixture_it_implies():
    slow = Slowdowns(every=Exponential(3.0), factor=Uniform(2.0, 4.0), duration=Exponential(1.5))
    law = LogNormal(0.3, 0.5)
    workers = tuple(WorkerSpec(law, slowdowns=slow) for _ in range(16))
    trace = simulate(ClusterSpec(workers=workers, budget=SecondsBudget(3000.0)), seed=1)
    # A worker always computes (no network, no service): a second of work takes
    # (E[every] + E[duration]) / (E[every] + E[duration] E[1/factor]) seconds.
    inverse_factor = math.log(2.0) / 2.0  # E[1/U] for U uniform on [2, 4]
    expected = law.mean() * slow.time_per_work(inverse_factor)
    # The mean over these ~110,000 commits varies by 0.30 % (sd over seeds 1-40, episodes
    # spanning several commits included): 1.5 % is 5 sd.
    assert trace.compute_time.mean() == pytest.approx(expected, rel=0.015)


def test_a_commit_is_slowed_by_the_factor_only_inside_an_episode():
    slow = Slowdowns(every=Constant(10.0), factor=Constant(3.0), duration=Constant(5.0))
    worker = WorkerSpec(Constant(1.0), slowdowns=slow)
    trace = simulate(ClusterSpec(workers=(worker,), budget=CommitBudget(40)), seed=0)
    # Normal until 10: ten commits of 1 s. Slowed on [10, 15): the commit started at 10 takes
    # 3 s; the one started at 13 does 2/3 of its work by 15 and the last third at normal
    # speed. Normal again until 25.
    third = 1.0 / 3.0
    expected = [*range(1, 11), 13.0, 15.0 + third, 16.0 + third, 17.0 + third]
    np.testing.assert_allclose(trace.time[:14], expected)
    np.testing.assert_allclose(trace.compute_time[:13], [1.0] * 10 + [3.0, 2.0 + third, 1.0])


def test_slowdowns_come_from_the_workers_own_streams():
    slow = Slowdowns(every=Exponential(2.0), factor=Constant(4.0), duration=Exponential(1.0))
    law = LogNormal(0.2, 0.3)
    small = ClusterSpec(workers=(WorkerSpec(law, slowdowns=slow),) * 2, budget=CommitBudget(400))
    big = ClusterSpec(workers=(WorkerSpec(law, slowdowns=slow),) * 3, budget=CommitBudget(400))
    a, b = simulate(small, 5), simulate(big, 5)
    for w in range(2):
        ca, cb = a.compute_time[rows_of(a, w)], b.compute_time[rows_of(b, w)]
        m = min(len(ca), len(cb))
        assert m > 50
        np.testing.assert_array_equal(ca[:m], cb[:m])
    # The base draws are untouched: outside episodes a commit takes exactly its draw.
    base = worker_draws(small, 5, 0).compute
    draws = np.array([base() for _ in range(len(rows_of(a, 0)))])
    ratio = a.compute_time[rows_of(a, 0)] / draws
    assert np.all((ratio >= 1.0) & (ratio <= 4.0 + 1e-12)) and np.mean(ratio == 1.0) > 0.4


def test_slowdown_factor_must_be_positive():
    with pytest.raises(ValueError, match="factor"):
        Slowdowns(every=Constant(1.0), factor=Constant(0.0), duration=Constant(1.0))
    with pytest.raises(ValueError, match="duration"):
        Slowdowns(every=Constant(1.0), factor=Constant(2.0), duration=Constant(0.0))


# -- the shared link ----------------------------------------------------------------------


def _linked(n, compute, commits, shared, **kwargs):
    workers = tuple(WorkerSpec(compute) for _ in range(n))
    return ClusterSpec(
        workers=workers,
        budget=CommitBudget(commits),
        bandwidth_bytes_per_s=1e6,
        model_bytes=20_000,
        shared_link=shared,
        **kwargs,
    )


@pytest.mark.parametrize("n", [8, 32])
def test_shared_link_throughput_saturates_at_bandwidth_over_model_bytes(n):
    trace = simulate(_linked(n, Constant(0.001), 5000, True), seed=0)
    assert len(trace) / trace.duration == pytest.approx(1e6 / 20_000, rel=0.01)
    # With a link each, a worker's cycle is its compute plus two transfers of 0.02 s.
    own = simulate(_linked(n, Constant(0.001), 5000, False), seed=0)
    assert len(own) / own.duration == pytest.approx(n / 0.041, rel=0.01)


def test_shared_link_below_saturation_is_each_workers_own_link():
    # One worker never queues behind another: the same times as a link of its own.
    kwargs = {"pull": Constant(0.002), "push": Exponential(0.003)}
    shared = simulate(_linked(1, LogNormal(0.1, 0.5), 300, True, **kwargs), seed=2)
    own = simulate(_linked(1, LogNormal(0.1, 0.5), 300, False, **kwargs), seed=2)
    np.testing.assert_allclose(shared.time, own.time, rtol=1e-12)
    np.testing.assert_array_equal(shared.pulled_version, own.pulled_version)


def test_shared_link_needs_a_bandwidth():
    with pytest.raises(ValueError, match="shared_link needs bandwidth"):
        ClusterSpec(workers=(WorkerSpec(Constant(1.0)),), budget=CommitBudget(1), shared_link=True)
