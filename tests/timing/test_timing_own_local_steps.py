"""Local steps per worker in the timing model and the scenario: DyLU's counts against its
formula (Liu et al. 2024, eq. 6) on drawn speeds and laws, group windows, each commit's
compute time the sum of its own steps, a steps budget counted per worker, the trace's
`local_steps` column through parquet, and bad input refused naming the field."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gemsim import config, timing
from gemsim.app import simulate_timing
from gemsim.config import ScenarioError
from gemsim.trace import CommitTrace


def _scenario(optimizer, groups, *, budget=None, count=None, compute=None, **extra):
    doc = {
        "name": "own-windows",
        "seed": 7,
        "workers": {
            "count": count or sum(g["count"] for g in groups),
            "compute": compute or {"dist": "constant", "value": 1.0},
            "groups": groups,
        },
        "budget": budget or {"commits": 40},
        "optimizer": optimizer,
        **extra,
    }
    return config.parse_scenario(doc, "own-windows.yaml")


def _mean(law: dict) -> float:
    """A law's mean from its parameters, written from the laws' definitions."""
    if law["dist"] == "constant":
        return law["value"]
    if law["dist"] == "lognormal":
        return law["median"] * math.exp(law["sigma"] ** 2 / 2)
    if law["dist"] == "gamma":
        return law["mean"]
    return law["mean"]  # exponential


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dynamic_windows_follow_dylu_on_drawn_speeds_and_laws(seed):
    rng = np.random.default_rng(seed)
    h = int(rng.integers(5, 60))
    groups = []
    for _ in range(int(rng.integers(2, 7))):
        kind = rng.choice(["constant", "lognormal", "gamma", "exponential"])
        law = {
            "constant": {"dist": "constant", "value": float(rng.uniform(0.1, 4))},
            "lognormal": {"dist": "lognormal", "median": float(rng.uniform(0.1, 2)), "sigma": 0.4},
            "gamma": {"dist": "gamma", "mean": float(rng.uniform(0.1, 3)), "shape": 2.0},
            "exponential": {"dist": "exponential", "mean": float(rng.uniform(0.1, 3))},
        }[str(kind)]
        groups.append(
            {"count": int(rng.integers(1, 4)), "compute": law, "speed": float(rng.uniform(0.2, 5))}
        )
    scenario = _scenario({"rule": "local", "window": {"dynamic": h}}, groups)
    rates = [g["speed"] / _mean(g["compute"]) for g in groups for _ in range(g["count"])]
    expected = [max(1, math.floor(v / max(rates) * h)) for v in rates]
    spec = config.build_cluster(scenario)
    assert list(spec.windows) == expected
    assert max(expected) == h
    trace = simulate_timing(scenario)
    assert trace.local_steps.tolist() == [expected[w] for w in trace.worker.tolist()]


def test_the_toys_speeds_give_the_papers_counts():
    """The asyncdiloco toy's workers (0.58, 0.75, 1.51, 3.33 s a step) with H = 20."""
    groups = [
        {"count": 1, "compute": {"dist": "constant", "value": v}} for v in (0.58, 0.75, 1.51, 3.33)
    ]
    spec = config.build_cluster(_scenario({"rule": "local", "window": {"dynamic": 20}}, groups))
    assert spec.windows == (20, 15, 7, 3)


def test_a_commits_compute_time_is_the_sum_of_its_own_steps():
    groups = [{"count": 1, "window": 5, "speed": 2.0}, {"count": 2, "window": 2}, {"count": 1}]
    scenario = _scenario(
        {"rule": "fedbuff", "lr": 0.1, "window": 3},
        groups,
        compute={"dist": "constant", "value": 0.5},
    )
    trace = simulate_timing(scenario)
    windows = np.array([5, 2, 2, 3])  # the last group takes the rule's window
    np.testing.assert_array_equal(trace.local_steps, windows[trace.worker])
    speeds = np.array([2.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(
        trace.compute_time, windows[trace.worker] * 0.5 / speeds[trace.worker]
    )


def test_random_compute_is_the_sum_of_as_many_draws_as_the_worker_has_steps():
    """With a lognormal law, the first commit of a worker with window k takes the sum of its
    stream's first k draws (the worker's stream does not depend on its window's grouping)."""
    law = {"dist": "lognormal", "median": 0.3, "sigma": 0.5}
    one = simulate_timing(_scenario({"rule": "local", "window": 1}, [{"count": 2}], compute=law))
    own = simulate_timing(
        _scenario(
            {"rule": "local", "window": 1},
            [{"count": 1, "window": 4}, {"count": 1, "window": 1}],
            compute=law,
        )
    )
    draws = one.compute_time[one.worker == 0]
    first = own.compute_time[own.worker == 0][0]
    np.testing.assert_allclose(first, draws[:4].sum(), rtol=1e-12)


def test_a_steps_budget_counts_each_workers_own_steps():
    groups = [{"count": 1, "window": 7}, {"count": 1, "window": 3}, {"count": 1, "window": 1}]
    model = {"problem": {"model": {"name": "quadratic", "dim": 4}}}
    scenario = _scenario(
        {"rule": "local", "window": 2}, groups, budget={"epochs_per_worker": 10}, **model
    )
    trace = simulate_timing(scenario)
    counts = np.bincount(trace.worker, minlength=3)
    assert counts.tolist() == [math.ceil(10 / 7), math.ceil(10 / 3), 10]


def test_the_column_round_trips_and_enters_the_hash(tmp_path):
    groups = [{"count": 1, "window": 3}, {"count": 1, "window": 1}]
    trace = simulate_timing(_scenario({"rule": "local", "window": 3}, groups))
    trace.to_parquet(tmp_path / "t.parquet")
    back = CommitTrace.from_parquet(tmp_path / "t.parquet")
    assert back == trace and back.sha256() == trace.sha256()
    plain = CommitTrace(
        **{
            **{k: getattr(trace, k) for k in trace.columns()},
            "local_steps": None,
            "n_workers": 2,
            "duration": trace.duration,
            "busy_time": trace.busy_time,
        }
    )
    assert plain.sha256() != trace.sha256()
    with pytest.raises(ValueError, match="local_steps must be >= 1"):
        CommitTrace.from_columns(
            time=[1.0],
            worker=[0],
            pulled_version=[0],
            compute_time=[1.0],
            queue_time=[0.0],
            service_time=[0.0],
            n_workers=1,
            duration=1.0,
            local_steps=[0],
        )


def test_a_fixed_window_has_no_column():
    trace = simulate_timing(_scenario({"rule": "local", "window": 3}, [{"count": 2}]))
    assert trace.local_steps is None and "local_steps" not in trace.columns()


@pytest.mark.parametrize(
    ("optimizer", "groups", "field"),
    [
        ({"rule": "local", "window": {"dynamic": 0}}, [{"count": 2}], "optimizer.window"),
        (
            {"rule": "gem", "lr": 0.1},
            [{"count": 1, "window": 3}, {"count": 1}],
            "workers.groups[0].window",
        ),
        (
            {"rule": "local", "window": {"dynamic": 4}},
            [{"count": 1}, {"count": 1, "window": 2}],
            "workers.groups[1].window",
        ),
        (
            {"rule": "local", "window": 4},
            [{"count": 1, "window": 0}, {"count": 1}],
            "workers.groups.0.window",
        ),
    ],
)
def test_bad_windows_are_refused_naming_the_field(optimizer, groups, field):
    with pytest.raises(ScenarioError) as err:
        _scenario(optimizer, groups)
    assert field in str(err.value)


def _population(optimizer, *, compute=None, churn=None, commits=60, seed=4):
    clients = {
        "population": 40,
        "concurrency": 4,
        "speed": {"dist": "lognormal", "median": 1.0, "sigma": 0.9},
    }
    if churn:
        clients["churn"] = churn
    workers = {"count": 4, "compute": compute or {"dist": "constant", "value": 0.5}}
    doc = {
        "name": "p",
        "seed": seed,
        "workers": workers,
        "clients": clients,
        "budget": {"commits": commits},
        "optimizer": optimizer,
    }
    return config.parse_scenario(doc, "p.yaml")


@pytest.mark.parametrize("h", [1, 7, 20])
def test_a_populations_clients_take_dylu_counts_from_their_own_speeds(h):
    """DyLU per client (eq. 6 with v_c the client's speed factor: the slots' law is shared),
    from the speeds the timing model draws; each task's compute is its count of batches at
    the slot's constant law divided by the client's speed."""
    scenario = _population({"rule": "local", "window": {"dynamic": h}})
    spec = config.build_cluster(scenario)
    speeds = timing.client_speeds(spec.population, scenario.seed).tolist()
    expected = [max(1, math.floor(v / max(speeds) * h)) for v in speeds]
    assert timing.client_windows(spec.population, scenario.seed, h).tolist() == expected
    trace = simulate_timing(scenario)
    clients = trace.client.tolist()
    assert trace.local_steps.tolist() == [expected[c] for c in clients]
    want = [expected[c] * 0.5 / speeds[c] for c in clients]
    np.testing.assert_allclose(trace.compute_time, want, rtol=1e-12)


def test_a_populations_random_tasks_sum_their_slots_per_batch_draws_in_order():
    """With a lognormal law, slot w's tasks take consecutive draws of its per-batch stream,
    as many as each task's client has steps, lost tasks (churn) included."""
    law = {"dist": "lognormal", "median": 0.3, "sigma": 0.5}
    churn = {
        "uptime": {"dist": "exponential", "mean": 3.0},
        "downtime": {"dist": "exponential", "mean": 1.0},
    }
    scenario = _population({"rule": "local", "window": {"dynamic": 6}}, compute=law, churn=churn)
    spec = config.build_cluster(scenario)
    result = timing.simulate_run(spec, seed=scenario.seed)
    speeds = timing.client_speeds(spec.population, scenario.seed).tolist()
    windows = [max(1, math.floor(v / max(speeds) * 6)) for v in speeds]
    tasks = result.clients.tasks  # every task a slot started, in order, lost ones included
    assert (tasks.outcome == timing.TASK_LOST).any()
    checked = 0
    for w in range(4):
        # Slot w's compute stream (worker key 0, slot w, kind 0 = compute): numpy's lognormal
        # draws follow on from block to block, so one long sample is the stream.
        rng = np.random.default_rng(np.random.SeedSequence(scenario.seed, spawn_key=(0, w, 0)))
        draws = iter(rng.lognormal(math.log(0.3), 0.5, size=8192).tolist())
        for i in np.flatnonzero(tasks.slot == w).tolist():
            c = int(tasks.client[i])
            total = next(draws)
            for _ in range(windows[c] - 1):
                total += next(draws)
            if tasks.outcome[i] == timing.TASK_COMMITTED:
                assert result.trace.compute_time[tasks.commit[i]] == total / speeds[c]
                checked += 1
    assert checked == len(result.trace)


def test_spec_level_checks():
    ws = timing.WorkerSpec(compute=timing.Constant(1.0))
    with pytest.raises(ValueError, match="one per worker"):
        timing.ClusterSpec(workers=(ws, ws), budget=timing.CommitBudget(3), windows=(1,))
    with pytest.raises(ValueError, match=r"windows\[1\]"):
        timing.ClusterSpec(workers=(ws, ws), budget=timing.CommitBudget(3), windows=(1, 0))


def test_runs_with_and_without_group_windows_never_execute_together():
    """Their programs differ (a loop of run-time length): many runs keep them apart."""
    groups = [{"count": 1}, {"count": 1}]
    same = _scenario({"rule": "local", "window": 3}, groups)
    own = _scenario({"rule": "local", "window": 3}, [{"count": 1, "window": 2}, {"count": 1}])
    other = _scenario({"rule": "local", "window": 3}, groups, seed=8)
    assert config.many_runs_signature(same)[0] == config.many_runs_signature(other)[0]
    assert config.many_runs_signature(same)[0] != config.many_runs_signature(own)[0]


def test_agn_refuses_windows_of_their_own():
    """AGN divides each commit by the rule's window: not defined for other counts."""
    with pytest.raises(ScenarioError, match="workers.groups.0..window"):
        _scenario(
            {"rule": "agn", "lr": 0.1, "window": 4}, [{"count": 1, "window": 2}, {"count": 1}]
        )


def test_a_rule_by_import_path_takes_a_dynamic_window_as_a_built_in_one_does():
    """`window: {dynamic: H}` beside `rule: {import: ...}`: the factory gets H and the timing
    model each worker's DyLU count, the same trace as the built-in rule's; a mapping that is
    not `{dynamic: H}` is refused naming the field."""
    groups = [{"count": 2, "speed": 1.0}, {"count": 2, "speed": 0.3}]
    window = {"dynamic": 6}
    built_in = _scenario({"rule": "fedbuff", "lr": 0.1, "window": window}, groups)
    imported = _scenario(
        {"rule": {"import": "gemsim.rules:fedbuff"}, "lr": 0.1, "window": window}, groups
    )
    assert imported.optimizer.kwargs["window"] == 6 and imported.optimizer.build().window == 6
    a, b = simulate_timing(built_in), simulate_timing(imported)
    assert a.sha256() == b.sha256()
    assert set(b.local_steps.tolist()) == {6, 1}  # floor(0.3 * 6) = 1
    with pytest.raises(ScenarioError, match=r"optimizer\.window"):
        _scenario(
            {"rule": {"import": "gemsim.rules:fedbuff"}, "lr": 0.1, "window": {"dynamc": 6}},
            groups,
        )
