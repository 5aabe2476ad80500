"""`preflight` checks each distinct problem and cluster of a sweep once, and still names every
run that fails."""

from __future__ import annotations

import pytest

from gemsim.app.execute import _stages
from gemsim.app.verbs import _run, _timing_only
from gemsim.config import ScenarioError, expand, parse_scenario

BASE = {
    "name": "checks",
    "seed": 0,
    "workers": {"count": 3, "compute": {"dist": "lognormal", "median": 1.0, "sigma": 0.3}},
    "budget": {"commits": 50},
    "problem": {"model": {"name": "quadratic", "dim": 4}, "batch_size": 1},
    "optimizer": {"rule": "downpour", "lr": 0.1},
}


def counted(monkeypatch):
    calls = {"cluster": 0, "problem": 0}

    def count(name, inner):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return inner(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        _timing_only, "checked_cluster", count("cluster", _timing_only.checked_cluster)
    )
    monkeypatch.setattr(_run, "check_problem", count("problem", _stages.check_problem))
    return calls


def runs_of(sweep: dict, **top):
    scenario = parse_scenario({**BASE, **top, "sweep": sweep}, "checks.yaml")
    return expand(scenario, "checks.yaml")


def test_a_learning_rate_sweep_and_seeds_are_checked_once(monkeypatch):
    calls = counted(monkeypatch)
    _run.preflight(runs_of({"optimizer.lr": [0.1, 0.2, 0.3]}, seeds=[0, 1]), "x", needs=())
    # six runs: the cluster (seeds do not reach it) once, the problem once per seed
    assert calls == {"cluster": 1, "problem": 2}


def test_runs_whose_clusters_differ_are_checked_each_and_named_when_they_fail(monkeypatch):
    calls = counted(monkeypatch)
    up = [{"dist": "constant", "value": v} for v in (1e3, 1e-6, 1e-7)]  # the last two: no commit
    down = {"dist": "constant", "value": 1.0}
    churn = [{"uptime": u, "downtime": down} for u in up]
    runs = runs_of({"workers.churn": churn})
    with pytest.raises(ScenarioError) as err:
        _run.preflight(runs, "checks.yaml", needs=())
    assert calls["cluster"] == 3
    assert [p.split(" {")[0] for p in err.value.problems] == ["run 2/3", "run 3/3"]
    assert all("cannot commit" in p for p in err.value.problems)
