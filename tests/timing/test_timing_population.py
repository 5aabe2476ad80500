"""Client populations: K slots serving N clients (selection, availability, losses, waits)."""

import dataclasses
import math

import numpy as np

from gemsim.timing import (
    Churn,
    ClusterSpec,
    CommitBudget,
    Constant,
    Exponential,
    LogNormal,
    Population,
    SecondsBudget,
    Selection,
    WorkerSpec,
    client_down_intervals,
    simulate,
    simulate_run,
)
from gemsim.timing._calendar import Calendar
from gemsim.timing._population_run import PopulationRun
from gemsim.timing._selection import Selector

LAW = Exponential(1.0)


def _spec(population, k, budget, compute=LAW, **kwargs):
    slots = (WorkerSpec(compute),) * k
    return ClusterSpec(workers=slots, budget=budget, population=population, **kwargs)


def _is_down(population, seed, client, t):
    return any(
        d.start <= t < d.end for d in client_down_intervals(population, seed, client, until=t)
    )


def test_population_of_k_clients_never_down_is_the_persistent_workers_trace():
    persistent = ClusterSpec(
        workers=(WorkerSpec(LogNormal(1.0, 0.5)),) * 6,
        budget=CommitBudget(600),
        pull=Constant(0.1),
        push=LogNormal(0.05, 0.5),
        service=Exponential(0.1),
    )
    run = simulate_run(dataclasses.replace(persistent, population=Population(6)), seed=3)
    trace = run.trace
    assert trace.n_workers == 6 and trace.n_clients == 6
    plain = dataclasses.replace(trace, client=None, n_clients=None)
    assert plain.sha256() == simulate(persistent, seed=3).sha256()
    # Each slot keeps the client it chose first: the one released at its commit is the
    # only one not in a task.
    assert all(len(np.unique(trace.client[trace.worker == w])) == 1 for w in range(6))


def test_uniform_choice_is_uniform_among_the_clients_up_and_idle():
    # The selector alone, on a churning population, against the acceptable set at each time.
    population = Population(30, churn=Churn(Exponential(3.0), Exponential(3.0)))
    calendar = Calendar(population, 5)
    busy = bytearray(30)
    selector = Selector(population, calendar, busy, 5)
    rng = np.random.default_rng(0)
    ranks = []
    for t in np.linspace(0.0, 200.0, 2000):
        busy[:] = (rng.random(30) < 0.3).astype(np.uint8).tobytes()
        ok = np.flatnonzero(~calendar.down_mask(float(t)) & (np.frombuffer(busy, np.uint8) == 0))
        pick = selector.select(float(t))
        if not ok.size:
            assert pick is None
            continue
        c, down = pick
        assert c in ok and down > t and _is_down(population, 5, c, down)
        # Uniform on [0, 1) if the choice is uniform among `ok` (a randomised rank).
        ranks.append((np.searchsorted(ok, c) + rng.random()) / ok.size)
    counts = np.histogram(ranks, bins=10, range=(0.0, 1.0))[0]
    expected = len(ranks) / 10
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 27.9  # the 0.999 quantile of chi-square with 9 degrees of freedom


def test_selection_counts_pass_a_chi_square_test_with_equal_availability():
    run = simulate_run(_spec(Population(40), 3, CommitBudget(6000)), seed=2)
    counts = run.clients.started
    expected = counts.sum() / 40
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    # 39 degrees of freedom: mean 39, sd 8.8 (a client in a task cannot be chosen again
    # meanwhile, which only makes counts more even).
    assert 39 - 4 * 8.8 < chi2 < 39 + 4 * 8.8
    assert run.clients.completed.sum() == 6000


def test_weighted_choice_is_proportional_to_the_weights():
    weights = tuple(float(w) for w in range(10))  # client 0 has weight 0
    population = Population(10, selection=Selection.WEIGHTED, weights=weights)
    selector = Selector(population, Calendar(population, 0), bytearray(10), 1)
    counts = np.bincount([selector.select(0.0)[0] for _ in range(9000)], minlength=10)
    assert counts[0] == 0
    expected = 9000 * np.array(weights[1:]) / sum(weights)
    chi2 = float(np.sum((counts[1:] - expected) ** 2 / expected))
    assert chi2 < 27.9  # 9 degrees of freedom, 0.999 quantile
    # In a run, clients of weight 0 are never chosen and heavy ones more often.
    run = simulate_run(_spec(population, 2, CommitBudget(2000)), seed=4)
    assert run.clients.started[0] == 0
    assert run.clients.started[9] > 3 * run.clients.started[2]


def test_round_robin_takes_the_next_ids_in_turn_and_skips_those_down():
    run = simulate_run(
        _spec(Population(10, selection=Selection.ROUND_ROBIN), 3, CommitBudget(40), Constant(1.0)),
        seed=0,
    )
    np.testing.assert_array_equal(run.trace.client, np.arange(40) % 10)
    # Client 4 is down during [0.5, 7.5): the turn passes it by until it is back.
    down = Population(10, selection=Selection.ROUND_ROBIN, availability={4: ((0.5, 7.5),)})
    trace = simulate(_spec(down, 3, CommitBudget(40), Constant(1.0)), seed=0)
    order = trace.client.tolist()
    assert order[:9] == [0, 1, 2, 3, 5, 6, 7, 8, 9] and 4 in order[9:]


def _recorded(monkeypatch, spec, seed):
    """The run, with every task's start and end (committed or lost) as (time, slot, client,
    kind), in the order they happened."""
    log = []
    start, lose, committed = PopulationRun._start, PopulationRun._lose, PopulationRun.committed

    def recording_start(self, w, pick, pull):
        log.append((self.state.env.now, w, pick[0], "start"))
        start(self, w, pick, pull)

    def recording_lose(self, w):
        log.append((self.state.env.now, w, self.client_of[w], "lost"))
        lose(self, w)

    def recording_commit(self, w, k, live):
        log.append((self.state.env.now, w, self.client_of[w], "commit"))
        committed(self, w, k, live)

    monkeypatch.setattr(PopulationRun, "committed", recording_commit)
    monkeypatch.setattr(PopulationRun, "_start", recording_start)
    monkeypatch.setattr(PopulationRun, "_lose", recording_lose)
    return simulate_run(spec, seed), log


def test_no_task_starts_on_a_client_down_or_busy_and_downs_lose_the_work(monkeypatch):
    population = Population(
        25,
        churn=Churn(Exponential(4.0), Exponential(4.0)),
        availability={3: ((0.0, 50.0),), 7: ((20.0, math.inf),)},
        speed=LogNormal(1.0, 0.3),
    )
    spec = _spec(population, 6, SecondsBudget(150.0), service=Exponential(0.15))
    run, log = _recorded(monkeypatch, spec, seed=9)
    trace = run.trace
    holder: dict[int, tuple[int, float]] = {}  # slot -> its task's client and start
    served = iter(trace.time - trace.service_time)  # when each commit's service began
    assert [t for t, *_ in log] == sorted(t for t, *_ in log)
    for t, w, c, kind in log:
        if kind == "start":
            assert w not in holder  # the slot's previous task ended first
            assert not _is_down(population, 9, c, t), (t, c)
            assert c not in {client for client, _ in holder.values()}, (t, c)
            holder[w] = (c, t)
            continue
        client, began = holder.pop(w)
        assert client == c
        downs = [d.start for d in client_down_intervals(population, 9, c, until=t)]
        if kind == "lost":
            assert t in downs  # lost exactly when its client went down
        else:  # committed: its client stayed up from the task's start to its service
            service = next(served)
            assert not any(began <= d <= service for d in downs)
    # The report counts the losses within the budget's span.
    lost = sum(1 for t, *_, kind in log if kind == "lost" and t <= 150.0)
    assert lost == run.workers.lost.sum() == run.clients.lost.sum() > 0
    assert 3 not in trace.client[trace.time < 50.0] and 7 not in trace.client[trace.time > 25.0]
    np.testing.assert_array_equal(np.bincount(trace.client, minlength=25), run.clients.completed)


def test_a_population_all_down_for_a_stretch_waits_without_polling_and_resumes():
    blackout = {c: ((10.0, 1e6),) for c in range(20)}
    spec = _spec(Population(20, availability=blackout), 3, SecondsBudget(1e6 + 20.0))
    run = simulate_run(spec, seed=1)
    trace = run.trace
    assert not np.any((trace.time >= 10.0) & (trace.time < 1e6))
    after = trace.time >= 1e6
    assert after.sum() > 20
    # Every slot lost its task at 10 and waited for the clients until 1e6 exactly.
    np.testing.assert_allclose(run.workers.waited_seconds, 1e6 - 10.0)
    assert run.workers.lost.tolist() == [1, 1, 1]
    first_after = [np.flatnonzero(after & (trace.worker == w))[0] for w in range(3)]
    assert trace.fresh[first_after].all()
    assert trace.fresh.sum() == 6  # each slot's first task, and its first after the wait


def test_clients_gone_for_good_end_the_run_early():
    gone = {c: ((5.0, math.inf),) for c in range(8)}
    run = simulate_run(_spec(Population(8, availability=gone), 2, CommitBudget(10_000)), seed=0)
    assert 0 < len(run.trace) < 100 and run.trace.time[-1] < 5.0


def test_a_seconds_budget_counts_waits_and_tasks_up_to_its_end():
    population = Population(4, churn=Churn(Exponential(2.0), Exponential(6.0)))
    run = simulate_run(_spec(population, 3, SecondsBudget(200.0)), seed=6)
    assert run.trace.duration == 200.0
    assert np.all(run.workers.waited_seconds > 0) and np.all(run.workers.waited_seconds < 200)
    clients = run.clients
    assert np.all(clients.started >= clients.completed + clients.lost)
    assert np.all(clients.started - clients.completed - clients.lost <= 1)
