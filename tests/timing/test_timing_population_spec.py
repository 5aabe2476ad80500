"""Client populations: what is refused, determinism and streams, the trace's client column and
the reports computed from a run without gradients."""

import dataclasses
import math
import pickle

import numpy as np
import pytest

from gemsim.timing import (
    Churn,
    ClusterSpec,
    CommitBudget,
    CommitTrace,
    Constant,
    Empirical,
    Exponential,
    Failure,
    LogNormal,
    Mixture,
    Population,
    Selection,
    StepsBudget,
    Sync,
    Uniform,
    WorkerSpec,
    check_work,
    client_down_intervals,
    client_speeds,
    client_up_seconds,
    population_summary,
    selection_fairness,
    simulate_run,
)

CHURN = Churn(Exponential(5.0), Exponential(2.0))


def _spec(population, k=3, budget=None, **kwargs):
    return ClusterSpec(
        workers=(WorkerSpec(Exponential(1.0)),) * k,
        budget=budget or CommitBudget(300),
        population=population,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: _spec(Population(2), k=3), r"workers: 3 slots .* population of 2 clients"),
        (lambda: Population(0), r"Population.n_clients must be an integer >= 1, got 0"),
        (lambda: _spec(Population(2), k=0), "ClusterSpec.workers must be a non-empty sequence"),
        (lambda: Population(5, speed=Uniform(0.0, 2.0)), "Population.speed must draw values > 0"),
        (lambda: Population(5, speed=Constant(0.0)), "Population.speed must draw values > 0"),
        (lambda: Population(5, speed=Empirical((0.0, 1.0))), "Population.speed must draw"),
        (
            lambda: Population(5, availability={5: ((1.0, 2.0),)}),
            r"Population.availability names client 5; allowed: client ids in \[0, 5\)",
        ),
        (
            lambda: Population(5, availability={-1: ((1.0, 2.0),)}),
            "Population.availability names client -1",
        ),
        (
            lambda: Population(2, availability={0: ((0.0, math.inf),), 1: ((0.0, math.inf),)}),
            "Population.availability holds all 2 clients down for good from t = 0",
        ),
        (
            lambda: Population(2, availability={0: ((2.0, 1.0),)}),
            r"Population.availability\[0\]\[0\] up_at must be a number > down_at",
        ),
        (lambda: Population(3, selection="weighted"), "Population.weights: selection 'weighted'"),
        (
            lambda: Population(3, selection=Selection.WEIGHTED, weights=(1.0, 2.0)),
            "Population.weights must be 3 numbers",
        ),
        (
            lambda: Population(2, selection=Selection.WEIGHTED, weights=(1.0, -1.0)),
            r"Population.weights\[1\] must be a finite number >= 0",
        ),
        (lambda: Population(2, weights=(1.0, 1.0)), "Population.weights are only for selection"),
        (lambda: Population(2, selection="best"), "Population.selection must be one of"),
        (lambda: _spec(Population(5), protocol=Sync()), "ClusterSpec.protocol: a population"),
        (lambda: _spec(Population(5), budget=StepsBudget(10)), "ClusterSpec.budget: a population"),
        (
            lambda: ClusterSpec(
                workers=(WorkerSpec(Exponential(1.0), churn=CHURN),),
                budget=CommitBudget(10),
                population=Population(5),
            ),
            r"ClusterSpec.workers\[0\].churn: a population's slots have no churn",
        ),
        (
            lambda: ClusterSpec(
                workers=(WorkerSpec(Exponential(1.0), failures=(Failure(1.0),)),),
                budget=CommitBudget(10),
                population=Population(5),
            ),
            r"ClusterSpec.workers\[0\].failures",
        ),
    ],
)
def test_bad_populations_are_refused_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_clients_whose_up_periods_are_too_short_for_a_task_are_refused_before_running():
    population = Population(10, churn=Churn(Constant(0.01), Exponential(1.0)))
    with pytest.raises(ValueError, match="no task can finish: the clients' up periods"):
        check_work(_spec(population))
    check_work(_spec(Population(10, churn=CHURN)))


def test_a_run_is_a_pure_function_of_its_seed():
    availability = {7: ((1.0, 9.0),), 2: ((0.0, 3.0), (2.0, 5.0))}
    population = Population(50, speed=LogNormal(1.0, 0.5), churn=CHURN, availability=availability)
    spec = _spec(population, k=4, service=Exponential(0.05))
    copy = pickle.loads(pickle.dumps(spec))  # as a spec travels to another process
    assert copy == spec and list(copy.population.availability) == [2, 7]
    a, b = simulate_run(spec, 11), simulate_run(copy, 11)
    assert a.trace.sha256() == b.trace.sha256()
    for x, y in zip(a.clients, b.clients, strict=True):
        np.testing.assert_array_equal(x, y)
    assert simulate_run(spec, 12).trace.sha256() != a.trace.sha256()


@pytest.mark.parametrize(
    "law", [LogNormal(1.0, 0.5), Mixture(((0.9, Constant(1.0)), (0.1, Uniform(0.1, 0.2))))]
)
def test_adding_clients_changes_no_existing_clients_speed_or_calendar(law):
    small = Population(5000, speed=law, churn=CHURN, availability={3: ((1.0, 4.0),)})
    big = dataclasses.replace(small, n_clients=5001)
    np.testing.assert_array_equal(client_speeds(small, 7), client_speeds(big, 7)[:5000])
    for c in (0, 3, 4999):
        assert list(client_down_intervals(small, 7, c, until=60.0)) == list(
            client_down_intervals(big, 7, c, until=60.0)
        )
    # Each client's streams are its own: two clients' calendars differ.
    assert list(client_down_intervals(small, 7, 0, until=60.0)) != list(
        client_down_intervals(small, 7, 1, until=60.0)
    )


def test_the_run_follows_each_clients_calendar_and_speed():
    population = Population(30, speed=LogNormal(1.0, 0.5), churn=CHURN)
    run = simulate_run(_spec(population, k=4, budget=CommitBudget(500)), seed=3)
    np.testing.assert_array_equal(run.clients.speed, client_speeds(population, 3))
    # With no pull, push or service, a commit's gradient was computed from time - compute.
    trace = run.trace
    for t, compute, c in zip(trace.time, trace.compute_time, trace.client, strict=True):
        for d in client_down_intervals(population, 3, int(c), until=t):
            assert not (d.start <= t - compute < d.end or t - compute < d.start <= t)


def test_the_client_column_is_written_read_and_hashed(tmp_path):
    run = simulate_run(_spec(Population(20, churn=CHURN)), seed=2)
    trace = run.trace
    assert trace.client.dtype == np.int64 and trace.n_clients == 20
    trace.to_parquet(tmp_path / "t.parquet")
    back = CommitTrace.from_parquet(tmp_path / "t.parquet")
    assert back == trace and back.sha256() == trace.sha256()
    np.testing.assert_array_equal(back.client, trace.client)
    assert "client" in trace.to_pandas().columns
    without = dataclasses.replace(trace, client=None, n_clients=None)
    assert without.sha256() != trace.sha256() and without != trace
    other = dataclasses.replace(trace, client=(trace.client + 1) % 20)
    assert other.sha256() != trace.sha256()
    with pytest.raises(ValueError, match=r"CommitTrace.client must be in \[0, 5\)"):
        dataclasses.replace(trace, n_clients=5)
    with pytest.raises(ValueError, match="CommitTrace.client and n_clients come together"):
        dataclasses.replace(trace, n_clients=None)
    with pytest.raises(ValueError, match="got no client column and n_clients 20"):
        dataclasses.replace(trace, client=None)
    with pytest.raises(ValueError, match="client has 2"):
        dataclasses.replace(trace, client=[0, 1])


def test_a_persistent_trace_has_no_client_column():
    spec = ClusterSpec(workers=(WorkerSpec(Exponential(1.0)),) * 3, budget=CommitBudget(50))
    run = simulate_run(spec, 0)
    assert run.trace.client is None and run.trace.n_clients is None and run.clients is None
    assert "client" not in run.trace.columns()


def test_fairness_figures():
    even = selection_fairness(np.full(10, 7))
    assert even["cv"] == 0.0 and even["jain"] == 1.0 and even["chi_square"] == 0.0
    assert even["dof"] == 9 and even["p_value"] == pytest.approx(1.0)
    assert even["p_method"] == "chi-square law"
    one = selection_fairness(np.array([10, 0, 0, 0]))  # 2.5 expected each: drawn
    assert one["jain"] == 0.25 and one["p_value"] == pytest.approx(1 / 2001)
    assert one["p_method"] == "monte carlo (2,000 multinomial draws)"
    weighted = selection_fairness(np.array([0, 10, 20]), np.array([0.0, 1.0, 2.0]))
    assert weighted["chi_square"] == 0.0 and weighted["dof"] == 1
    assert selection_fairness(np.array([1, 1]), np.array([0.0, 1.0]))["chi_square"] == math.inf


def test_the_p_value_holds_its_level_where_each_client_expects_few_selections():
    # 200 clients, 60 selections (0.3 expected each, where the chi-square law does not hold):
    # under uniform selection, p <= 0.1 in about 10 % of runs
    rng = np.random.default_rng(3)
    ps = [selection_fairness(rng.multinomial(60, np.full(200, 1 / 200)))["p_value"]
          for _ in range(200)]  # fmt: skip
    assert 0.04 < np.mean(np.array(ps) <= 0.1) < 0.16


def test_population_summary_of_a_run():
    population = Population(200, speed=LogNormal(1.0, 0.7), churn=CHURN)
    run = simulate_run(_spec(population, k=8, budget=CommitBudget(3000)), seed=5)
    exposure = client_up_seconds(population, 5, run.trace.duration)
    assert np.all((exposure > 0) & (exposure <= run.trace.duration))
    summary = population_summary(run.trace, run.clients, population, exposure=exposure)
    taking = summary["participation"]
    assert taking["tasks_completed"] == 3000 and taking["clients"] == 200
    assert taking["tasks_started"] == 3000 + taking["tasks_lost"] + taking["tasks_in_flight"]
    fairness = summary["fairness"]
    assert 0.5 < fairness["jain"] <= 1.0 and fairness["p_value"] > 1e-4
    deciles = summary["staleness_by_speed_decile"]
    assert [d["decile"] for d in deciles] == list(range(10))
    assert sum(d["commits"] for d in deciles) == 3000
    assert sum(d["clients"] for d in deciles) == 200
    # Slow clients take longer, so more commits land meanwhile: their work is staler.
    assert deciles[0]["staleness_mean"] > deciles[-1]["staleness_mean"]
