"""Work bounds checked before a simulation: a compute law divided by a worker's speed must
neither overflow nor stall virtual time, churn and slowdowns may not need more events than
`MAX_EVENTS`, nor a seconds budget more commits than a trace holds (estimated from the
budget and the laws' typical values, checked here against simulations)."""

import math

import pytest

from gemsim.timing import (
    Churn,
    ClusterSpec,
    CommitBudget,
    Constant,
    Empirical,
    Exponential,
    LogNormal,
    Pareto,
    SecondsBudget,
    Slowdowns,
    StepsBudget,
    Uniform,
    WorkerSpec,
    simulate,
    simulate_run,
)
from gemsim.timing._churn import MAX_EVENTS
from gemsim.timing._draws import check_compute
from gemsim.timing._work import check_work, expected_work


def _spec(worker: WorkerSpec, n: int, budget) -> ClusterSpec:
    return ClusterSpec(workers=(worker,) * n, budget=budget)


def test_a_speed_that_overflows_or_stalls_virtual_time_is_refused():
    with pytest.raises(ValueError, match=r"at speed 5e-324 takes more than 1e\+15 s"):
        check_compute(Constant(1.0), 5e-324)
    with pytest.raises(ValueError, match=r"at speed 1e\+308 takes less than 1e-300 s"):
        check_compute(Exponential(mean=0.1), 1e308)
    check_compute(Exponential(mean=0.1), 1e-6)  # 10^5 s a batch: slow, but finite
    # Through the timing API too: refused before simulating, not an infinite trace duration.
    slow = WorkerSpec(Constant(1.0), speed=5e-324)
    with pytest.raises(ValueError, match="at speed 5e-324"):
        simulate(_spec(slow, 2, CommitBudget(10)), seed=0)


def test_the_event_estimate_of_constant_laws_is_exact():
    churn = Churn(Constant(1.0), Constant(1.0))  # a down and an up every 2 s
    slow = Slowdowns(Constant(2.0), Constant(3.0), Constant(2.0))  # two events every 4 s
    worker = WorkerSpec(Constant(0.1), churn=churn, slowdowns=slow)
    work = expected_work(_spec(worker, 3, SecondsBudget(100.0)))
    assert (work.events, work.seconds, work.stuck) == (3 * 100 * (2 / 2 + 2 / 4), 100.0, None)
    # An up period of 1 s holds at least 1 / 0.1 - 1 = 9 commits of 0.1 s: 4.5 a second.
    plain = WorkerSpec(Constant(0.1), churn=churn)
    work = expected_work(_spec(plain, 1, CommitBudget(90)))
    assert work.seconds == pytest.approx(90 / 4.5) and work.events == pytest.approx(work.seconds)
    work = expected_work(_spec(WorkerSpec(Constant(0.1)), 4, CommitBudget(90)))
    assert (work.events, work.seconds, work.commits) == (0.0, pytest.approx(90 / 40), 90.0)
    # A seconds budget: 4 workers at 10 commits a second, or the server's 1 / 0.05 s.
    spec = _spec(WorkerSpec(Constant(0.1)), 4, SecondsBudget(10.0))
    assert expected_work(spec).commits == pytest.approx(400)
    served = ClusterSpec(workers=spec.workers, budget=spec.budget, service=Constant(0.05))
    assert expected_work(served).commits == pytest.approx(200)


@pytest.mark.parametrize(
    ("compute", "churn", "slowdowns", "budget"),
    [
        (Exponential(0.1), Churn(Exponential(1.0), Exponential(1.0)), None, CommitBudget(1000)),
        (LogNormal(0.1, 0.5), Churn(Exponential(0.3), Constant(0.1)), None, CommitBudget(1000)),
        (Exponential(0.1), Churn(Constant(0.05), Constant(0.05)), None, CommitBudget(500)),
        (Exponential(0.1), None, Slowdowns(Exponential(1.0), Uniform(1, 5), Exponential(1.0)),
         CommitBudget(1000)),
        (Exponential(0.1), Churn(Exponential(2.0), Exponential(1.0)),
         Slowdowns(Exponential(1.0), Uniform(1, 5), Exponential(1.0)), StepsBudget(150)),
        (Pareto(0.05, 0.8), Churn(Exponential(2.0), Exponential(1.0)), None, CommitBudget(1000)),
    ],
)  # fmt: skip
def test_the_event_estimate_is_within_a_small_factor_of_a_simulation(
    compute, churn, slowdowns, budget
):
    spec = _spec(WorkerSpec(compute, churn=churn, slowdowns=slowdowns), 4, budget)
    work = expected_work(spec)
    duration = simulate_run(spec, seed=0).trace.duration
    assert work.stuck is None and 1 / 3 < work.seconds / duration < 3, (work, duration)


def test_endless_churn_and_slowdowns_are_refused_naming_the_limit():
    tiny = Churn(Constant(1e-6), Constant(1e-6))
    # Exponential compute finishes within 1e-6 s once in 10^5 tries: 4e7 events for 200.
    with pytest.raises(ValueError, match=r"about 4e\+07 events .* at most 1e\+07"):
        check_work(_spec(WorkerSpec(Exponential(0.1), churn=tiny), 4, CommitBudget(200)))
    # Constant compute never does: the budget is never reached.
    with pytest.raises(ValueError, match="worker 0 cannot commit.*lengthen churn.uptime"):
        check_work(_spec(WorkerSpec(Constant(0.1), churn=tiny), 4, CommitBudget(200)))
    # Episodes of no length: the slowdown clock would never move past them.
    zero = Slowdowns(Constant(5e-324), Constant(2.0), Constant(5e-324))
    work = expected_work(_spec(WorkerSpec(Constant(0.1), slowdowns=zero), 4, CommitBudget(200)))
    assert math.isinf(work.events) and work.events > MAX_EVENTS
    # Compute of infinite mean still commits: 10^300 s of it is far more than a trace holds.
    heavy = _spec(WorkerSpec(Pareto(1e-9, 1.0)), 3, SecondsBudget(1e300))
    with pytest.raises(ValueError, match=r"about 1e\+309 commits|about inf commits"):
        check_work(heavy)
    # Up periods that vanish when added to the clock (after a down period of 10^6 s): the
    # down intervals would merge without end, even under a seconds budget.
    vanish = Churn(Pareto(5e-104, 1e15), Empirical((1e6,)))
    with pytest.raises(ValueError, match="worker 0's churn up periods .* never comes back up"):
        check_work(_spec(WorkerSpec(Constant(0.1), churn=vanish), 3, SecondsBudget(2.0)))
    # A seconds budget always ends; churn that fits is accepted.
    check_work(_spec(WorkerSpec(Constant(0.1), churn=tiny), 4, SecondsBudget(1.0)))


def test_quantiles_kept_per_law_are_those_of_the_law_itself():
    """`_law_quantiles` keeps a law's quantiles for the process (a sweep checks one cluster
    per run): equal laws share them, and a law of other parameters, or of another family with
    equal ones, gets its own, each equal to a bisection of its own survival function."""
    from gemsim.timing import _work

    laws = [LogNormal(0.1, 0.25), LogNormal(0.1, 0.5), Exponential(mean=0.1), Uniform(0.0, 0.2)]
    for law in laws + [LogNormal(0.1, 0.25)]:  # the last equal to the first, another object
        kept = _work._quantiles(law, {})
        assert kept == [_work._quantile(law, level) for level in _work.QUANTILE_LEVELS]
        assert kept == sorted(kept) and kept[0] > 0.0  # increasing, inside the law
    spread = [_work._quantiles(law, {}) for law in laws]
    assert len({tuple(q) for q in spread}) == len(laws)
    # The estimate of a cluster is the same made again from new, equal laws.
    again = _spec(WorkerSpec(LogNormal(0.1, 0.25)), 4, CommitBudget(90))
    first = _spec(WorkerSpec(LogNormal(0.1, 0.25)), 4, CommitBudget(90))
    assert expected_work(first) == expected_work(again)


def test_a_constant_laws_quantiles_are_its_value_as_the_bisection_finds_them():
    """A constant law's quantiles come without bisection (a cluster of n distinct constant
    laws, the theory papers' tau_i, needs n of them): each is the smallest x whose
    P(draw <= x) reaches the level, the value itself, exactly as the bisection gives it."""
    import random

    from gemsim.timing import _work

    rng = random.Random(5)
    values = [0.0, 5e-324, 1e-9, *(rng.uniform(0, 100) for _ in range(20)), 1e3 * math.pi]
    for value in values:
        law = Constant(value)
        bisected = [_work._quantile(law, level) for level in _work.QUANTILE_LEVELS]
        assert _work._quantiles(law, {}) == bisected == [value] * len(bisected)
