"""A population in a scenario file (`clients:`): what it builds, what `gemsim trace` reports
of it without a gradient, and the bad input it refuses before anything runs (exit 2, naming
the field)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from gemsim import config, timing
from gemsim.app import trace_scenario
from gemsim.cli import app

SLOT = {"dist": "exponential", "mean": 1.0}
CHURN = {
    "uptime": {"dist": "exponential", "mean": 40.0},
    "downtime": {"dist": "exponential", "mean": 20.0},
}


def population_doc(**clients) -> dict:
    return {
        "name": "pop",
        "seed": 5,
        "workers": {"compute": SLOT},
        "clients": {"population": 200, "concurrency": 8, **clients},
        "budget": {"commits": 6000},
    }


def write(tmp_path, doc, name="pop.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_block_builds_the_timing_models_population(tmp_path):
    speed = {"dist": "lognormal", "median": 1.0, "sigma": 0.5}
    scenario = config.load_scenario(write(tmp_path, population_doc(speed=speed, churn=CHURN)))
    assert scenario.workers.count == 8  # the slots: the concurrency, left out in the file
    spec = config.build_cluster(scenario)
    population = spec.population
    assert (population.n_clients, spec.n_workers) == (200, 8)
    assert population.selection is timing.Selection.UNIFORM
    assert population.churn == timing.Churn(timing.Exponential(40.0), timing.Exponential(20.0))
    assert population.speed == timing.LogNormal(median=1.0, sigma=0.5)


def test_trace_reports_participation_fairness_and_staleness_by_speed(tmp_path):
    speed = {"dist": "lognormal", "median": 1.0, "sigma": 0.8}
    path = write(tmp_path, population_doc(speed=speed, churn=CHURN))
    (report,) = trace_scenario(path, out=tmp_path / "out")
    population = report["population"]
    part = population["participation"]
    assert (population["clients"], population["concurrency"]) == (200, 8)
    assert part["tasks_completed"] == report["commits"] == 6000
    assert part["tasks_started"] == 6000 + part["tasks_lost"] + part["tasks_in_flight"]
    # Uniform among the clients up: the counts against each client's time up pass the test
    # that a law-abiding sampler fails once in a thousand runs.
    assert population["fairness"]["p_value"] > 1e-3
    deciles = population["staleness_by_speed_decile"]
    assert sum(d["commits"] for d in deciles) == 6000
    # A slower client's task spans more commits: staleness falls with speed.
    assert deciles[0]["staleness_mean"] > 2 * deciles[9]["staleness_mean"]
    table = pd.read_parquet(tmp_path / "out" / "clients.parquet")
    assert list(table.client) == list(range(200))
    assert table.completed.sum() == 6000 and table.lost.sum() == part["tasks_lost"]
    trace = timing.CommitTrace.from_parquet(tmp_path / "out" / "trace.parquet", n_workers=8)
    np.testing.assert_array_equal(np.bincount(trace.client, minlength=200), table.completed)
    result = CliRunner().invoke(app, ["trace", str(path)])
    assert result.exit_code == 0, result.output
    assert "selection fairness" in result.output and "by client speed decile" in result.output


def test_a_weighted_selection_draws_in_proportion_to_the_shards(tmp_path):
    doc = population_doc(selection={"name": "weighted", "by": "data_size"})
    # One slot: a client is released before the slot chooses again, so no busy client is
    # skipped and the counts follow the weights exactly in law.
    doc["clients"].update(population=40, concurrency=1)
    doc["problem"] = {
        "model": {"name": "logistic"},
        "dataset": {"name": "synthetic", "n_train": 2000, "n_test": 100, "dim": 4, "classes": 2},
        "partition": {"name": "quantity", "dist": {"dist": "lognormal", "median": 1, "sigma": 1}},
        "batch_size": 4,
    }
    doc["budget"] = {"commits": 8000}
    scenario = config.load_scenario(write(tmp_path, doc))
    shards, _, _ = config.scenario_shards(scenario)
    assert config.build_cluster(scenario).population.weights == tuple(
        float(s) for s in shards.sizes
    )
    (report,) = trace_scenario(write(tmp_path, doc))
    assert report["population"]["fairness"]["p_value"] > 1e-3


def quadratic_population(**engine) -> dict:
    doc = population_doc(churn=CHURN, speed={"dist": "lognormal", "median": 1.0, "sigma": 0.5})
    doc["clients"].update(population=60, concurrency=4)
    doc["budget"] = {"commits": 400}
    doc["problem"] = {"model": {"name": "quadratic", "dim": 4, "heterogeneity": 1.0}}
    doc["optimizer"] = {"rule": "gem", "lr": 0.05}
    doc["eval"] = {"every": 100, "clients": 10}
    doc["repeats"] = 2
    doc["engine"] = engine
    return doc


def _run(tmp_path, doc, name):
    from gemsim import results

    out = tmp_path / name
    result = CliRunner().invoke(
        app, ["run", str(write(tmp_path, doc, f"{name}.yaml")), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    runs = [results.read_run(d) for d in out.iterdir() if d.is_dir() and d.name[0] != "."]
    return sorted(runs, key=lambda r: r.trace.sha256())  # the repeats in one order


def test_a_population_runs_its_gradients_by_client_on_every_executor_path(tmp_path):
    alone = _run(tmp_path, quadratic_population(executor="sequential", many_runs="off"), "alone")
    waves = _run(tmp_path, quadratic_population(executor="wavefront", many_runs="off"), "waves")
    together = _run(tmp_path, quadratic_population(executor="sequential", many_runs=2), "many")
    for a, b, c in zip(alone, waves, together, strict=True):
        assert a.run_id == c.run_id  # running together is not part of a run's identity
        for name, value in a.params.items():
            np.testing.assert_array_equal(value, b.params[name])
            np.testing.assert_array_equal(value, c.params[name])
    run = alone[0]
    trace = run.trace
    assert trace.n_clients == 60 and trace.n_workers == 4
    summary = run.worker_summary
    # One row per client (the data owners), not per slot; its commits are the trace's.
    assert list(summary.worker) == list(range(60))
    np.testing.assert_array_equal(summary.commits, np.bincount(trace.client, minlength=60))
    np.testing.assert_array_equal(summary.filter(like="optimum_").to_numpy(), run.worker_optima())
    evals = run.worker_evals
    chosen = sorted(set(evals.worker))
    assert len(chosen) == 10 and set(chosen) <= set(range(60))  # eval.clients of them


def test_a_runs_clients_are_those_gemsim_trace_reports_and_their_plot(tmp_path):
    from gemsim import results

    doc = quadratic_population(executor="sequential", many_runs="off")
    doc["repeats"] = 1
    (run,) = _run(tmp_path, doc, "run")
    (report,) = trace_scenario(write(tmp_path, doc, "t.yaml"), out=tmp_path / "t")
    assert report["trace_sha256"] == run.trace.sha256()
    traced = pd.read_parquet(report["clients_path"])
    summary = run.worker_summary
    for column in ("speed", "started", "lost", "up_seconds"):
        np.testing.assert_array_equal(summary[column], traced[column])
    np.testing.assert_array_equal(summary.commits, traced.completed)
    assert summary.started.sum() == 400 + summary.lost.sum() + 4  # 4 slots busy at the end
    # The plot: a point per client, and each speed decile's mean tasks (6 clients a decile).
    frame = results.load_worker_summary(tmp_path / "run")
    ax = results.plot_participation(frame)
    assert len(ax.collections[0].get_offsets()) == 60
    order = np.argsort(frame.speed.to_numpy(), kind="stable")
    deciles = frame.commits.to_numpy()[order].reshape(10, 6).mean(axis=1)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), deciles)
    written = results.plot_run_folder(tmp_path / "run")
    assert "participation_vs_speed.png" in {p.name for p in written}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"concurrency": 300}, "concurrency 300 exceeds the population 200"),
        ({"concurrency": 0}, "clients.concurrency"),
        ({"population": 0}, "clients.population"),
        ({"speed": {"dist": "uniform", "low": 0.0, "high": 2.0}}, "speed"),
        ({"speed": {"dist": "constant", "value": 0.0}}, "speed"),
        ({"selection": "random"}, "clients.selection"),
        ({"selection": {"name": "weighted"}}, "clients.selection: weighted by data_size"),
        ({"churn": CHURN, "availability": {"file": "down.csv"}}, "not both"),
        ({"availability": {"file": "outside.csv"}}, "names client 500"),
        ({"availability": {"file": "gone.csv"}}, "down for good"),
    ],
)
def test_bad_populations_exit_2_naming_the_field(tmp_path, change, field):
    (tmp_path / "down.csv").write_text("worker,down_at,up_at\n3,1.0,5.0\n")
    (tmp_path / "outside.csv").write_text("worker,down_at,up_at\n500,1.0,5.0\n")
    gone = "".join(f"{c},0,inf\n" for c in range(200))
    (tmp_path / "gone.csv").write_text("worker,down_at,up_at\n" + gone)
    path = write(tmp_path, population_doc(**change))
    result = CliRunner().invoke(app, ["trace", str(path)])
    assert result.exit_code == 2, result.output
    assert "pop.yaml" in result.output and field in result.output


@pytest.mark.parametrize(
    ("workers", "field"),
    [
        ({"count": 5}, "workers.count (5) is the number of slots"),
        ({"churn": CHURN}, "workers.churn"),
        ({"failures": [{"worker": 0, "at": 1.0}]}, "workers.failures"),
    ],
)
def test_the_slots_have_no_life_of_their_own(tmp_path, workers, field):
    doc = population_doc()
    doc["workers"].update(workers)
    result = CliRunner().invoke(app, ["trace", str(write(tmp_path, doc))])
    assert result.exit_code == 2, result.output
    assert field in result.output


def test_a_population_runs_the_async_protocol_only(tmp_path):
    doc = population_doc()
    doc["server"] = {"protocol": "sync"}
    result = CliRunner().invoke(app, ["trace", str(write(tmp_path, doc))])
    assert result.exit_code == 2 and "allowed: async" in result.output
