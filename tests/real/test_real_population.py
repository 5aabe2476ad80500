"""A population on the process backend (on Ray: test_real_ray.py): K worker processes are
slots serving tasks of N clients that the server chooses among those up (the timing model's
calendar, speeds and selection). The recorded trace names each commit's client, and the
engine replays it to the same bits: each task read its client's batches from the client's own
counter and started from a fresh rule state. Clients an availability file holds down are
never chosen; slots with no client up wait for one to come up."""

from __future__ import annotations

import math

import numpy as np
import pytest
from real_helpers import flat, wait_no_children

from gemsim import engine, timing
from gemsim.app import run
from gemsim.config import Scenario
from gemsim.real._clients import ClientPool

N_CLIENTS, N_SLOTS = 30, 3


def population_scenario(
    *, commits: int, clients: dict, optimizer: dict | None = None, compute: dict | None = None
):
    """The heterogeneous quadratic (each client its own optimum and noise): another client's
    batches, or another counter, give another gradient."""
    return Scenario.model_validate(
        {
            "name": "real-population",
            "seed": 3,
            "workers": {
                "compute": compute or {"dist": "exponential", "mean": 0.02},
                "emulate_latency": True,  # the quadratic's gradient takes microseconds
            },
            "clients": {"population": N_CLIENTS, "concurrency": N_SLOTS, **clients},
            "budget": {"commits": commits},
            "problem": {
                "model": {"name": "quadratic", "dim": 8, "noise": 0.1, "heterogeneity": 1.0}
            },
            "optimizer": optimizer or {"rule": "gem", "lr": 0.05},
        }
    )


# Up and down about every 0.3 s: some tasks (0.02 s / speed each) are lost, slots start anew.
CHURN = {
    "uptime": {"dist": "exponential", "mean": 0.3},
    "downtime": {"dist": "exponential", "mean": 0.3},
}
SPEED = {"dist": "lognormal", "median": 1.0, "sigma": 0.5}


@pytest.fixture(scope="module")
def churned(computed_once):
    """GEM, uniform selection among 30 churning clients of various speeds, 60 commits: the
    real run and its replay."""
    scenario = population_scenario(commits=60, clients={"churn": CHURN, "speed": SPEED})

    def compute():
        real = run(scenario, backend="process")
        return real, run(scenario, trace=real.trace)

    return computed_once("real-population-churn", compute)


@pytest.mark.slow
@pytest.mark.bitexact
def test_a_population_run_replays_bit_exactly(churned):
    real, replay = churned
    assert real.status.value == "ok" and len(real.trace) == 60
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))
    np.testing.assert_array_equal(replay.metrics["update_norm"], real.metrics["update_norm"])
    assert wait_no_children() == []


@pytest.mark.slow
def test_a_population_runs_trace_is_one_the_engine_plans(churned):
    real, _ = churned
    trace = real.trace
    assert (trace.n_clients, trace.n_workers) == (N_CLIENTS, N_SLOTS)
    client = trace.client
    assert client.min() >= 0 and client.max() < N_CLIENTS
    # No client in two tasks at once: each task of a client pulled a version created after
    # its previous task's commit.
    for c in np.unique(client):
        commits = np.flatnonzero(client == c)
        assert np.all(trace.pulled_version[commits[1:]] > commits[:-1]), f"client {c}"
    # A slot's task that does not pull at its own commit is fresh (a loss, a wait, the first).
    last = np.full(N_SLOTS, -1)
    for k, w in enumerate(trace.worker):
        at_own_commit = last[w] >= 0 and trace.pulled_version[k] == last[w] + 1
        assert trace.fresh[k] or at_own_commit, k
        last[w] = k
    # Each client's batches follow its commits, as the engine's plan counts them (that the
    # workers read those very batches, the replay's bits show: the clients' noise differs).
    plan = engine.plan_of(trace, window=1)
    for c in np.unique(client):
        commits = np.flatnonzero(client == c)
        np.testing.assert_array_equal(plan.first_step[commits], np.arange(commits.size))
    # The per-client counts the server kept: every task started is committed, lost or still in
    # flight at the end (one per slot at most).
    summary = real.worker_summary
    np.testing.assert_array_equal(summary.commits, np.bincount(client, minlength=N_CLIENTS))
    in_flight = summary.started.sum() - summary.commits.sum() - summary.lost.sum()
    assert 0 <= in_flight <= N_SLOTS
    population = timing.Population(N_CLIENTS, speed=timing.LogNormal(median=1.0, sigma=0.5))
    np.testing.assert_array_equal(summary.speed, timing.client_speeds(population, 3))
    assert np.all(summary.up_seconds <= trace.duration)


@pytest.mark.slow
@pytest.mark.bitexact
def test_clients_down_are_never_chosen_and_slots_wait_for_one_to_come_up(tmp_path):
    """An availability file: clients 0..19 are down the whole run, 20..29 from 0.15 s to
    0.45 s. The slots take clients 20..29 in turn (round robin; tasks of equal length, so a
    client's turn never comes while it is busy: their counts of tasks differ by one at most),
    lose the tasks in flight at 0.15 s, wait, and at 0.45 s start anew on the version of that
    moment. Local steps (window 2): each client's counter moves by two batches a commit. The
    replay gives the same bits."""
    rows = [f"{c},0,inf" for c in range(20)] + [f"{c},0.15,0.45" for c in range(20, 30)]
    (tmp_path / "down.csv").write_text("worker,down_at,up_at\n" + "\n".join(rows) + "\n")
    scenario = population_scenario(
        commits=40,
        clients={"availability": {"file": str(tmp_path / "down.csv")}, "selection": "round_robin"},
        optimizer={"rule": "local", "lr": 0.01, "window": 2},
        compute={"dist": "constant", "value": 0.02},
    )
    real = run(scenario, backend="process")
    trace = real.trace
    assert real.status.value == "ok" and len(trace) == 40
    assert set(trace.client.tolist()) <= set(range(20, 30))
    summary = real.worker_summary
    started = summary.started.to_numpy()
    assert not started[:20].any() and started[20:].max() - started[20:].min() <= 1
    assert summary.lost.sum() >= 1  # the tasks in flight when every client went down
    # Nothing commits while every client is down (a gradient in service at 0.15 s may end a
    # little later); each slot's first task after the wait pulls the version of 0.45 s, fresh.
    assert not np.any((trace.time >= 0.3) & (trace.time < 0.45))
    before = int(np.sum(trace.time < 0.45))
    for w in range(N_SLOTS):
        first = np.flatnonzero((trace.worker == w) & (trace.time >= 0.45))[0]
        assert trace.fresh[first] and trace.pulled_version[first] == before, w
    replay = run(scenario, trace=trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))


@pytest.mark.slow
def test_a_real_population_runs_tasks_are_its_traces_rows_and_sum_to_its_counts(churned):
    """The server's pool keeps every task (`clients_tasks.parquet`): the committed ones are
    the trace's rows, in order (client, slot, commit time, staleness); the others lost, at
    most one a slot in flight at the end; each client's tasks add up to its counts."""
    real, replay = churned
    tasks, trace, summary = real.tasks, real.trace, real.worker_summary
    committed = tasks[tasks.outcome == "committed"].sort_values("commit")
    np.testing.assert_array_equal(committed.commit, np.arange(len(trace)))
    np.testing.assert_array_equal(committed.client, trace.client)
    np.testing.assert_array_equal(committed.slot, trace.worker)
    np.testing.assert_array_equal(committed.end, trace.time)
    np.testing.assert_array_equal(committed.staleness, trace.staleness)
    # The server's order: a slot's task starts after its previous one ended.
    ends = tasks.end.fillna(np.inf)
    for w in range(N_SLOTS):
        mine = np.flatnonzero(tasks.slot == w)
        assert np.all(tasks.start.to_numpy()[mine[1:]] >= ends.to_numpy()[mine[:-1]] - 1e-9)
    in_flight = tasks.outcome == "in_flight"
    assert in_flight.sum() <= N_SLOTS and tasks[in_flight].slot.is_unique
    for column, outcome in (("started", None), ("commits", "committed"), ("lost", "lost")):
        chosen = tasks if outcome is None else tasks[tasks.outcome == outcome]
        counts = np.bincount(chosen.client, minlength=N_CLIENTS)
        np.testing.assert_array_equal(summary[column], counts, err_msg=column)
    assert replay.tasks is None  # a replay's tasks are not known


# --- the server's pool of clients, alone (no process) ------------------------------------


def pool_of(availability: dict, n: int = 4, slots: int = 2) -> ClientPool:
    population = timing.Population(n, availability=availability)
    return ClientPool(population, seed=0, n_slots=slots)


def test_a_slot_with_no_client_up_waits_for_the_calendars_next_change():
    pool = pool_of({0: ((0.0, 5.0),), 1: ((0.0, 5.0),), 2: ((0.0, 5.0),), 3: ((0.0, 2.0),)})
    assert pool.take(0, 0.0) is None and pool.take(1, 0.0) is None
    assert pool.wake_at == 2.0 and list(pool.waiting) == [0, 1]
    assert pool.woken(1.0) == []  # not yet
    assert pool.woken(2.0) == [(0, 3)]  # the one client up goes to the first slot waiting
    assert pool.wake_at == 5.0 and list(pool.waiting) == [1]
    ((slot, client),) = pool.woken(5.0)
    assert slot == 1 and client in (0, 1, 2)  # client 3 is busy
    assert not pool.waiting and math.isinf(pool.wake_at)


def test_a_task_whose_client_goes_down_is_lost_and_wakes_a_waiting_slot_when_it_is_up():
    gone = ((0.0, math.inf),)
    pool = pool_of({0: ((3.0, 4.0),), 1: gone, 2: gone, 3: gone})
    assert pool.take(0, 0.0) == 0 and pool.down_at[0] == 3.0
    assert pool.take(1, 0.0) is None and math.isinf(pool.wake_at)  # client 0 is busy
    assert not pool.lost_by(0, 2.9) and pool.lost_by(0, 3.0)
    assert pool.release(0, 3.0, committed=False) == 0
    assert pool.lost.tolist() == [1, 0, 0, 0] and pool.completed.sum() == 0
    assert pool.wake_at == 4.0  # released while down: the waiting slot wakes when it is up
    assert pool.woken(4.0) == [(1, 0)]


def test_the_pool_keeps_each_task_its_start_end_and_outcome():
    pool = pool_of({0: ((3.0, 4.0),)}, n=3, slots=2)
    a, b = pool.take(0, 0.0), pool.take(1, 0.5)
    assert pool.release(1, 1.0, committed=True) == b  # commit 0
    c = pool.take(1, 1.0)
    pool.release(1, 2.5, committed=True)  # commit 1
    assert a == 0 and pool.lost_by(0, 3.2)
    pool.release(0, 3.2, committed=False)  # its client went down at 3.0: lost then
    pool.take(0, 3.2)
    pool.drop(1, 3.5)  # nothing in flight there: nothing changes
    d = pool.take(1, 3.6)
    pool.drop(1, 3.7)  # its process died: lost at that moment
    report = pool.report(5.0)  # the run's span: client 0 was down from 3.0 to 4.0
    np.testing.assert_array_equal(report.up_seconds, [4.0, 5.0, 5.0])
    tasks = report.tasks
    assert tasks.client.tolist()[:3] == [a, b, c] and tasks.slot.tolist() == [0, 1, 1, 0, 1]
    assert tasks.start.tolist() == [0.0, 0.5, 1.0, 3.2, 3.6]
    np.testing.assert_array_equal(tasks.end, [3.0, 1.0, 2.5, np.nan, 3.7])
    ok, lost, flying = timing.TASK_COMMITTED, timing.TASK_LOST, timing.TASK_IN_FLIGHT
    assert tasks.outcome.tolist() == [lost, ok, ok, flying, lost]
    assert tasks.commit.tolist() == [-1, 0, 1, -1, -1] and tasks.client[4] == d
    for name, outcome in (("completed", ok), ("lost", lost)):
        counts = np.bincount(tasks.client[tasks.outcome == outcome], minlength=3)
        np.testing.assert_array_equal(getattr(report, name), counts)
    np.testing.assert_array_equal(report.started, np.bincount(tasks.client, minlength=3))


@pytest.mark.slow
@pytest.mark.bitexact
def test_a_population_run_with_per_client_state_replays_bit_exactly():
    """CA2FL on the process backend: the server keeps every client's cached update (its
    server state, N rows), read and written at each commit's client; the engine's replay of
    the recorded trace gives the same parameters, caches and cached mean."""
    from gemsim import config, real
    from gemsim.app import build_problem, real_job

    scenario = population_scenario(
        commits=40,
        clients={"churn": CHURN, "speed": SPEED},
        optimizer={"rule": "ca2fl", "lr": 0.05, "window": 2, "buffer": 3},
    )
    done = real.run_backend("process", real_job(scenario))
    assert done.result.status.value == "ok" and len(done.trace) == 40
    rule, problem = config.build_rule(scenario), build_problem(scenario)
    executor = engine.SequentialExecutor(
        rule, problem, params=problem.init_params, n_workers=N_SLOTS
    )
    replay = executor.execute(engine.plan_of(done.trace, window=rule.window))
    got, want = done.result.server_state, replay.server_state
    np.testing.assert_array_equal(flat(replay.params), flat(done.result.params))
    caches = got.clients["theta"]
    assert caches.shape == (N_CLIENTS, 8)
    np.testing.assert_array_equal(want.clients["theta"], caches)
    np.testing.assert_array_equal(want.rule.cache_mean["theta"], got.rule.cache_mean["theta"])
    # The rows written are the clients that committed, and only those.
    seen = np.unique(done.trace.client)
    assert np.all(np.abs(caches[seen]).max(axis=1) > 0) and len(seen) < N_CLIENTS
    unseen = np.setdiff1d(np.arange(N_CLIENTS), seen)
    np.testing.assert_array_equal(caches[unseen], 0.0)
    assert wait_no_children() == []


@pytest.mark.slow
@pytest.mark.bitexact
def test_a_population_with_dylu_runs_each_clients_own_steps_and_replays_bit_exactly():
    """`window: {dynamic: H}` in a population: each task runs its client's DyLU count (from
    the client's speed factor), its emulated compute lasts at least the sum of that many
    per-batch draws of its slot's stream (lost tasks using up theirs, as in the timing
    model), and the engine replays the recorded trace to the same bits."""
    from gemsim import config, real
    from gemsim.app import build_problem, real_job

    h = 4
    scenario = population_scenario(
        commits=36,
        clients={"churn": CHURN, "speed": SPEED},
        optimizer={"rule": "local", "lr": 0.05, "window": {"dynamic": h}},
        compute={"dist": "lognormal", "median": 0.01, "sigma": 0.5},
    )
    done = real.run_backend("process", real_job(scenario))
    trace = done.trace
    assert done.result.status.value == "ok" and len(trace) == 36
    spec = config.build_cluster(scenario)
    speeds = timing.client_speeds(spec.population, scenario.seed).tolist()
    windows = [max(1, math.floor(v / max(speeds) * h)) for v in speeds]
    np.testing.assert_array_equal(trace.local_steps, np.asarray(windows)[trace.client])
    assert len(set(trace.local_steps.tolist())) > 1
    tasks = done.clients.tasks
    for w in range(N_SLOTS):
        rng = np.random.default_rng(np.random.SeedSequence(scenario.seed, spawn_key=(0, w, 0)))
        draws = iter(rng.lognormal(math.log(0.01), 0.5, size=4096).tolist())
        for i in np.flatnonzero(tasks.slot == w).tolist():
            c = int(tasks.client[i])
            target = sum(next(draws) for _ in range(windows[c])) / speeds[c]
            if tasks.commit[i] >= 0:
                assert trace.compute_time[tasks.commit[i]] >= target * (1 - 1e-9)
    rule, problem = config.build_rule(scenario), build_problem(scenario)
    executor = engine.SequentialExecutor(
        rule, problem, params=problem.init_params, n_workers=N_SLOTS
    )
    replay = executor.execute(engine.plan_of(trace, window=rule.window))
    np.testing.assert_array_equal(flat(replay.params), flat(done.result.params))
    assert wait_no_children() == []


@pytest.mark.slow
@pytest.mark.bitexact
def test_a_diverging_real_run_keeps_its_last_finite_state():
    """The real server's commit updates its state in place (the carry is donated), and a
    non-finite commit leaves it as it was: the run ends `diverged` with the parameters and
    server state (CA2FL's per-client rows included) of its last finite commit, the same bits
    as the engine recovers from the recorded trace."""
    from gemsim import config, real
    from gemsim.app import build_problem, real_job

    optimizer = {"rule": "ca2fl", "lr": 500.0, "window": 2, "buffer": 3}
    scenario = population_scenario(commits=60, clients={"speed": SPEED}, optimizer=optimizer)
    done = real.run_backend("process", real_job(scenario))
    assert done.result.status.value == "diverged"
    rule, problem = config.build_rule(scenario), build_problem(scenario)
    executor = engine.SequentialExecutor(
        rule, problem, params=problem.init_params, n_workers=N_SLOTS
    )
    replay = executor.execute(engine.plan_of(done.trace, window=rule.window))
    assert replay.status.value == "diverged" and replay.n_commits == done.result.n_commits
    got, want = flat(done.result.params), flat(replay.params)
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(flat(done.result.server_state), flat(replay.server_state))
    assert wait_no_children() == []
