"""Churn, availability traces and how they compose with joins, failures and budgets."""

import math

import numpy as np
import pytest
from timing_helpers import rows_of, version_at

from gemsim.timing import (
    Churn,
    ClusterSpec,
    CommitBudget,
    Constant,
    Down,
    EmulatedCompute,
    Exponential,
    Failure,
    LogNormal,
    SecondsBudget,
    SlowdownClock,
    Slowdowns,
    StepsBudget,
    Uniform,
    WorkerSpec,
    down_intervals,
    life_events,
    simulate,
    simulate_run,
)
from gemsim.timing._draws import worker_draws


def _spec(workers, budget=None, **kwargs):
    return ClusterSpec(workers=tuple(workers), budget=budget or SecondsBudget(100.0), **kwargs)


@pytest.mark.parametrize(
    "churn",
    [
        Churn(Exponential(20.0), Exponential(10.0)),
        Churn(Uniform(5.0, 15.0), LogNormal(3.0, 0.5)),
    ],
)
def test_long_run_fraction_up_is_mean_up_over_mean_cycle(churn):
    # Slow compute keeps the run cheap; availability does not depend on it.
    workers = [WorkerSpec(Exponential(5.0), churn=churn) for _ in range(10)]
    run = simulate_run(_spec(workers, SecondsBudget(40_000.0)), seed=1)
    observed = run.workers.up_seconds.sum() / (10 * 40_000.0)
    assert observed == pytest.approx(churn.availability(), rel=0.02)
    np.testing.assert_allclose(run.workers.availability, run.workers.up_seconds / 40_000.0)


def test_a_worker_is_silent_while_down_and_pulls_fresh_when_back():
    churn = Churn(Exponential(8.0), Exponential(4.0))
    workers = [WorkerSpec(LogNormal(0.5, 0.3), churn=churn) for _ in range(4)]
    run = simulate_run(_spec(workers, SecondsBudget(200.0), pull=Constant(0.01)), seed=2)
    trace = run.trace
    for w in range(4):
        mine = rows_of(trace, w)
        downs = run.workers.downs[w]
        for (start, end), following in zip(downs, [*downs[1:], (math.inf,)], strict=True):
            assert not np.any((trace.time[mine] > start) & (trace.time[mine] < end))
            life = mine[(trace.time[mine] > end) & (trace.time[mine] < following[0])]
            if life.size:  # its first commit of the life that began at `end`
                assert trace.fresh[life[0]] and not trace.fresh[life[1:]].any()
                assert trace.pulled_version[life[0]] == version_at(trace, end)
    assert run.workers.lost.sum() > 0
    assert np.all(run.workers.lost_compute_seconds <= run.workers.lost * 10.0)


def test_availability_intervals_are_reproduced_exactly():
    intervals = ((2.0, 5.5), (9.25, 12.0), (30.0, math.inf))
    workers = [WorkerSpec(Constant(1.0)), WorkerSpec(Constant(1.0), availability=intervals)]
    run = simulate_run(_spec(workers, SecondsBudget(40.0)), seed=0)
    assert run.workers.downs[1] == intervals
    assert run.workers.downs[0] == ()
    times = run.trace.time[rows_of(run.trace, 1)]
    # Going down at the instant of an arrival loses it: the timer to the down was set first.
    np.testing.assert_allclose(times, [1.0, 6.5, 7.5, 8.5, 13.0] + list(range(14, 30)))
    assert run.workers.up_seconds[1] == pytest.approx(40.0 - 3.5 - 2.75 - 10.0)


def _decimal_intervals(rng, count: int) -> tuple[tuple[float, float], ...]:
    """``count`` disjoint 3-decimal intervals, each ending past twice its start (where
    ``start + (up_at - start)`` is not exact: 3.441 + (12.371 - 3.441) == 12.370999999999999),
    at least 5 s apart."""
    out, t = [], 0.0
    for _ in range(count):
        start = round(t + rng.uniform(0.5, 1.5) + (5.0 if out else 0.0), 3)
        end = round(start * rng.uniform(2.2, 3.0), 3)
        out.append((start, end))
        t = end
    return tuple(out)


def test_decimal_availability_intervals_are_reproduced_to_the_bit():
    rng = np.random.default_rng(11)
    intervals = [_decimal_intervals(rng, 5) for _ in range(40)]  # 200 intervals
    drifting = sum(a + (b - a) != b for ivs in intervals for a, b in ivs)
    assert drifting >= 5  # the cases that used to come out an ulp off
    compute = 4.0  # shorter than any up period: every life commits once at least
    workers = [WorkerSpec(Constant(compute), availability=ivs) for ivs in intervals]
    horizon = max(ivs[-1][1] for ivs in intervals) + 10.0
    spec = _spec(workers, SecondsBudget(horizon))
    run = simulate_run(spec, seed=0)
    trace = run.trace
    for w, ivs in enumerate(intervals):
        assert [(d.start, d.end) for d in down_intervals(workers[w], 0, w)] == list(ivs)
        assert run.workers.downs[w] == ivs
        times = trace.time[rows_of(trace, w)]
        for _, up in ivs:  # each life's first commit: one compute after its exact up time
            assert times[np.searchsorted(times, up)] == up + compute
    ups = sorted((e.worker, e.time) for e in life_events(spec, 0) if e.kind == "up")
    assert ups == [(w, b) for w, ivs in enumerate(intervals) for _, b in ivs]
    down = [math.fsum(b - a for a, b in ivs) for ivs in intervals]
    np.testing.assert_allclose(run.workers.up_seconds, horizon - np.array(down), rtol=1e-12)


def test_failures_and_joins_are_the_special_case_of_availability():
    law = LogNormal(1.0, 0.4)
    listed = [
        WorkerSpec(law, failures=(Failure(2.5, 1.25), Failure(7.0))),
        WorkerSpec(law, join_at=3.5),
        WorkerSpec(law),
    ]
    traced = [
        WorkerSpec(law, availability=((2.5, 3.75), (7.0, math.inf))),
        WorkerSpec(law, availability=((0.0, 3.5),)),
        WorkerSpec(law),
    ]
    assert simulate(_spec(listed), 3).sha256() == simulate(_spec(traced), 3).sha256()


def test_sources_of_downtime_merge_into_disjoint_intervals():
    worker = WorkerSpec(
        Constant(1.0),
        join_at=1.0,
        failures=(Failure(4.0, 2.0), Failure(20.0)),
        availability=((0.5, 2.0), (5.0, 8.0), (8.0, 9.0), (12.0, 13.0)),
    )
    assert list(down_intervals(worker, 0, 0)) == [
        Down(0.0, 2.0),
        Down(4.0, 9.0),
        Down(12.0, 13.0),
        Down(20.0, math.inf),
    ]
    assert list(down_intervals(worker, 0, 0, until=10.0)) == [Down(0.0, 2.0), Down(4.0, 9.0)]


def test_churn_periods_alternate_from_up_and_come_from_the_workers_own_streams():
    churn = Churn(Exponential(3.0), Exponential(1.0))
    one = WorkerSpec(Constant(1.0), churn=churn)
    downs = list(down_intervals(one, 5, 2, until=5000.0))
    starts = np.array([d.start for d in downs])
    ends = np.array([d.end for d in downs])
    assert starts[0] > 0 and np.all(starts[1:] > ends[:-1])
    assert np.mean([d.length for d in downs]) == pytest.approx(1.0, rel=0.1)
    assert np.mean(starts[1:] - ends[:-1]) == pytest.approx(3.0, rel=0.1)
    # Adding workers, or changing what others do, leaves worker w's periods unchanged.
    small = _spec([one] * 3, SecondsBudget(300.0))
    big = _spec([one] * 5, SecondsBudget(300.0), pull=Constant(0.1))
    a, b = simulate_run(small, 5), simulate_run(big, 5)
    for w in range(3):
        assert a.workers.downs[w] == b.workers.downs[w]


def test_real_backend_schedule_follows_the_same_intervals():
    churn = Churn(Exponential(3.0), Exponential(1.0))
    workers = [WorkerSpec(Constant(1.0), churn=churn), WorkerSpec(Constant(1.0), join_at=2.0)]
    spec = _spec(workers, SecondsBudget(30.0))
    events = list(life_events(spec, 7, until=30.0))
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert [(e.worker, e.kind) for e in events if e.worker == 1] == [(1, "join")]
    mine = [e for e in events if e.worker == 0]
    assert mine[0].kind == "join" and mine[0].time == 0.0
    pairs = [(d.start, d.end) for d in down_intervals(workers[0], 7, 0, until=30.0)]
    assert [(e.time, e.kind) for e in mine[1:]] == [
        item for start, end in pairs for item in ((start, "down"), (end, "up"))
    ]
    assert simulate_run(spec, 7).workers.downs[0] == tuple(pairs)


def test_emulated_compute_takes_the_simulators_draw_of_each_cycle_lost_ones_included():
    # What a real run under emulate_latency sleeps: draw c for its c-th computation, counted
    # over its lives with the ones lost to a kill, as the simulator draws.
    churn = Churn(Exponential(10.0), Exponential(3.0))
    workers = [WorkerSpec(Exponential(0.5), churn=churn) for _ in range(3)]
    spec = _spec(workers, SecondsBudget(200.0))
    run = simulate_run(spec, seed=8)
    trace = run.trace
    for w in range(3):
        emulated = EmulatedCompute(spec, 8, w)
        draws = [emulated(c, 0.0) for c in range(len(rows_of(trace, w)) + 200)]
        committed = trace.compute_time[rows_of(trace, w)]
        where = {d: c for c, d in enumerate(draws)}  # exponential draws are distinct
        cycles = np.array([where[float(x)] for x in committed])
        assert np.all(np.diff(cycles) > 0)
        # The cycles skipped are the ones lost: one per down interval before the last commit.
        skipped = cycles[-1] + 1 - len(cycles)
        last = trace.time[rows_of(trace, w)][-1]
        assert skipped == sum(start < last for start, _ in run.workers.downs[w]) > 3
    with pytest.raises(ValueError, match="comes after"):
        emulated(0, 0.0)


def test_schedule_seed_keeps_the_downs_and_slowdowns_and_changes_only_the_other_draws():
    churn = Churn(Exponential(6.0), Exponential(2.0))
    slow = Slowdowns(Exponential(4.0), Constant(3.0), Exponential(1.0))
    workers = [WorkerSpec(Exponential(0.3), churn=churn, slowdowns=slow) for _ in range(3)]
    spec = _spec(workers, SecondsBudget(100.0), pull=Exponential(0.05))
    own = simulate_run(spec, seed=2)
    mixed = simulate_run(spec, seed=9, schedule_seed=2)
    assert mixed.workers.downs == own.workers.downs
    assert simulate(spec, 2, schedule_seed=2).sha256() == own.trace.sha256()
    assert mixed.trace.sha256() != own.trace.sha256()
    # Without a schedule, only the compute, network and service draws were ever the seed's.
    plain = _spec([WorkerSpec(Exponential(0.3)) for _ in range(3)], SecondsBudget(100.0))
    assert simulate(plain, 9, schedule_seed=2).sha256() == simulate(plain, 9).sha256()
    # The slowdown episodes are the schedule's: with nothing but compute, worker 0's i-th
    # commit is seed 9's i-th draw stretched by seed 2's episodes from its previous commit.
    alone = _spec([WorkerSpec(Exponential(0.3), slowdowns=slow)], SecondsBudget(100.0))
    trace = simulate(alone, 9, schedule_seed=2)
    clock, draw = SlowdownClock(alone.workers[0], 2, 0), worker_draws(alone, 9, 0).compute
    starts = np.r_[0.0, trace.time[:-1]]
    expected = [clock.stretch(float(t), draw()) for t in starts]
    assert trace.compute_time.tolist() == expected
    assert np.mean(trace.compute_time) > 1.2 * 0.3  # slowed down
    with pytest.raises(ValueError, match="schedule_seed must be an integer >= 0"):
        simulate(spec, 1, schedule_seed=-1)


def test_churn_composes_with_steps_budgets_failures_and_is_deterministic():
    churn = Churn(Exponential(6.0), Exponential(2.0))
    workers = [WorkerSpec(LogNormal(0.5, 0.3), churn=churn) for _ in range(3)]
    workers[0] = WorkerSpec(LogNormal(0.5, 0.3), churn=churn, failures=(Failure(5.0, 1.0),))
    spec = _spec(workers, StepsBudget(40))
    first, second = simulate(spec, 9), simulate(spec, 9)
    assert first.sha256() == second.sha256()
    assert list(np.bincount(first.worker)) == [40, 40, 40]
    assert first.fresh.sum() > 3  # lives after coming back up


def test_everyone_churning_still_reaches_a_commit_budget():
    churn = Churn(Constant(2.0), Constant(1.0))
    workers = [WorkerSpec(Constant(0.5), churn=churn) for _ in range(2)]
    trace = simulate(_spec(workers, CommitBudget(40)), 0)
    assert len(trace) == 40
    # Up 0-2, down 2-3, up 3-5, ...: both commit at 0.5, 1.0, 1.5 and lose the gradient due
    # at 2.0 (the timer to going down was set first), then at 3.5, 4.0, 4.5, 6.5, ...
    np.testing.assert_allclose(trace.time[::2][:7], [0.5, 1.0, 1.5, 3.5, 4.0, 4.5, 6.5])
    assert np.array_equal(trace.worker[:6], [0, 1] * 3)


def test_churn_law_must_have_a_positive_mean():
    with pytest.raises(ValueError, match="Churn.downtime"):
        Churn(Exponential(1.0), Constant(0.0))
    with pytest.raises(ValueError, match="availability"):
        WorkerSpec(Constant(1.0), availability=((3.0, 2.0),))


def _everything(n):
    churn = Churn(Exponential(8.0), Exponential(2.0))
    slow = Slowdowns(every=Exponential(5.0), factor=Uniform(2.0, 3.0), duration=Exponential(2.0))
    workers = [WorkerSpec(LogNormal(0.3, 0.4), churn=churn, slowdowns=slow) for _ in range(n)]
    workers[0] = WorkerSpec(LogNormal(0.3, 0.4), speed=2.0, failures=(Failure(3.0, 1.0),))
    return workers


def test_every_mechanism_together_is_deterministic_and_per_worker():
    spec = _spec(_everything(5), SecondsBudget(200.0), pull=Exponential(0.01))
    assert simulate(spec, 4).sha256() == simulate(spec, 4).sha256() != simulate(spec, 5).sha256()
    # Without a server queue a worker's commits depend on its own draws alone: adding a worker
    # leaves the others' compute times (slowed or not) and down intervals unchanged.
    small = simulate_run(_spec(_everything(3), SecondsBudget(200.0)), 4)
    big = simulate_run(_spec(_everything(4), SecondsBudget(200.0)), 4)
    for w in range(3):
        a = small.trace.compute_time[rows_of(small.trace, w)]
        b = big.trace.compute_time[rows_of(big.trace, w)]
        assert len(a) > 100 and np.array_equal(a, b)
        assert small.workers.downs[w] == big.workers.downs[w]
        assert small.workers.lost[w] == big.workers.lost[w]
