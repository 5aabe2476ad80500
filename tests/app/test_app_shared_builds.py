"""What the runs of a sweep share is built once per process: the problem of runs that differ
only in their optimizer, budget or timing; the worker specs of runs with one workers block;
the plan of runs that share a trace. Sharing changes no result: a run executed alone, with
nothing kept from before, ends where it ended in the sweep."""

from __future__ import annotations

import numpy as np
from scenario_docs import quadratic_doc, write_doc

import gemsim
from gemsim import config, engine, problems, results
from gemsim._lru import Lru
from gemsim.app.execute import _simulated, _stages


def _counting(monkeypatch, owner, name: str) -> list:
    calls: list = []
    real = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _fresh_caches(monkeypatch) -> None:
    from gemsim.config import _worker_specs

    monkeypatch.setattr(_stages, "PROBLEMS", Lru(4))
    monkeypatch.setattr(_simulated, "PLANS", Lru(8))
    monkeypatch.setattr(_worker_specs, "_SPECS", Lru(16))


def test_a_sweeps_runs_build_their_problem_specs_and_plan_once_each(tmp_path, monkeypatch):
    from gemsim.config import _worker_specs

    _fresh_caches(monkeypatch)
    made = _counting(monkeypatch, problems, "make_problem")
    specs = _counting(monkeypatch, _worker_specs, "_specs_of")
    plans = _counting(monkeypatch, engine, "plan_of")
    doc = quadratic_doc(
        commits=60,
        sweep={"optimizer.lr": [0.01, 0.02, 0.05]},
        repeats=2,
        engine={"many_runs": "off"},
    )
    _, rows = gemsim.run_file(write_doc(tmp_path, doc), out=tmp_path / "out", quiet=True)
    assert [r.status for r in rows] == ["ok"] * 6
    assert len(made) == 2  # one problem per seed, the preflight's included
    assert len(specs) == 1  # one workers block: parse, checks, timing and runs share it
    assert len(plans) == 2  # one trace per seed


def test_a_run_alone_ends_where_it_ended_in_the_sweep(tmp_path, monkeypatch):
    doc = quadratic_doc(commits=60, sweep={"optimizer.lr": [0.01, 0.02, 0.05]})
    _, rows = gemsim.run_file(write_doc(tmp_path, doc), out=tmp_path / "sweep", quiet=True)
    _fresh_caches(monkeypatch)
    alone = {**quadratic_doc(commits=60), "optimizer": {"rule": "gem", "lr": 0.02}}
    path = write_doc(tmp_path, alone, "alone.yaml")
    _, [row] = gemsim.run_file(path, out=tmp_path / "alone", quiet=True)
    assert row.run_id == rows[1].run_id
    ours = results.read_run(tmp_path / "alone" / row.run_id)
    theirs = results.read_run(tmp_path / "sweep" / row.run_id)
    assert ours.manifest.params_sha256 == theirs.manifest.params_sha256
    for key, value in ours.params.items():
        np.testing.assert_array_equal(value, theirs.params[key])


def test_a_sweep_passes_the_blocks_it_does_not_enter_as_they_are():
    """And each run is the scenario its point's document validates to from scratch."""
    doc = quadratic_doc(sweep={"optimizer.lr": [0.01, 0.02], "budget.commits": [30, 40]})
    scenario = config.parse_scenario(doc, "doc")
    runs = config.expand(scenario, "doc")
    assert len(runs) == 4
    for r in runs:
        assert r.scenario.workers is scenario.workers and r.scenario.problem is scenario.problem
        assert r.scenario.optimizer is not scenario.optimizer
        again = config.parse_scenario(r.scenario.model_dump(mode="json", by_alias=True), "doc")
        assert again == r.scenario
        assert config.config_hash(again) == r.config_hash
    assert [r.scenario.optimizer.lr for r in runs] == [0.01, 0.01, 0.02, 0.02]
    assert [r.scenario.budget.commits for r in runs] == [30, 40, 30, 40]
