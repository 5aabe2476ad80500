"""The heterogeneity measures as run summary columns, from real runs: the manifest's `final`
block against a recomputation from the run's own metrics.parquet and workers.parquet;
load_summary and load_results carry them; `gemsim ls` sorts by them (an old folder without
them still listed, last); `gemsim show RUN` prints them with the workers by speed decile;
`eval.targets` out of (0, 1] is refused with exit 2, and left out changes no identity."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from scenario_docs import write_doc
from typer.testing import CliRunner

from gemsim import config, problems, results, timing
from gemsim.app import run
from gemsim.app.report._speed_deciles import decile_rows
from gemsim.cli import app

TARGETS = [0.5, 0.7, 0.95]
GROUPS = {"classes_0": [0], "other_classes": [1, 2]}  # worker 0 alone holds class 0
DOC = {
    "name": "summary",
    "seed": 3,
    "workers": {
        "count": 4,
        "compute": {"dist": "exponential", "mean": 0.1},
        "groups": [{"count": 1, "speed": 0.2, "data": {"classes": [0]}}],
    },
    "budget": {"commits": 60},
    "problem": {
        "model": "logistic",
        "dataset": {"name": "synthetic", "n_train": 400, "n_test": 120, "dim": 6, "classes": 3},
        "batch_size": 8,
        "partition": {"name": "dirichlet", "alpha": 0.5, "min_size": 16},
    },
    "optimizer": {"rule": "downpour", "lr": 0.1},
    "eval": {"every": 6, "per_worker": 24, "targets": TARGETS},
    "sweep": {"optimizer.lr": [0.03, 0.3]},
}
runner = CliRunner()


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two runs (lr 0.03 and 0.3) in a results folder, written by `gemsim run`."""
    root = tmp_path_factory.mktemp("summary")
    path = write_doc(root, DOC)
    done = runner.invoke(app, ["run", str(path), "--out", str(root / "out"), "--json", "--quiet"])
    assert done.exit_code == 0, done.output
    return root / "out", [row["run_id"] for row in _lines(done.stdout)]


def recomputed(run_dir) -> dict[str, float]:
    """The summary values written from the run's per-commit and per-worker frames alone."""
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    evals = metrics.dropna(subset=["test_accuracy"]).sort_values("commit")
    workers = pd.read_parquet(run_dir / "workers.parquet").groupby("commit")["accuracy"]
    summaries = {"worst": workers.min(), "p10": workers.quantile(0.1), "mean": workers.mean()}
    last = evals.iloc[-1]
    out = {"best_test_accuracy": evals["test_accuracy"].max()}
    for k in range(3):
        out[f"final_test_accuracy_class_{k}"] = last[f"test_accuracy_class_{k}"]
    accuracy = {"": evals["test_accuracy"]}
    for name, classes in GROUPS.items():
        accuracy[f"_{name}"] = evals[[f"test_accuracy_class_{k}" for k in classes]].mean(axis=1)
        out[f"final_test_accuracy_{name}"] = accuracy[f"_{name}"].iloc[-1]
    for name, values in summaries.items():
        out[f"final_worker_accuracy_{name}"] = values.loc[last["commit"]]
        out[f"best_worker_accuracy_{name}"] = values.max()
    for target in TARGETS:
        for suffix, values in accuracy.items():
            reached = evals["time"][values >= target]
            first = reached.iloc[0] if len(reached) else math.nan
            out[f"time_to_accuracy_{target:g}{suffix}"] = first
    return out


def test_the_manifest_holds_the_measures_of_the_saved_frames(sweep):
    out, ids = sweep
    reached = never = 0
    for run_id in ids:
        manifest = results.read_manifest(out / run_id)
        got = results.summary_values(manifest)
        want = recomputed(out / run_id)
        assert set(want) <= set(got)
        for column, value in want.items():
            if math.isnan(value):
                assert math.isnan(got[column]), column
                assert manifest["final"][results.final_key(column)] is None  # null in the JSON
                never += column.startswith("time_to_")
            else:
                assert got[column] == pytest.approx(value, rel=1e-6, abs=1e-12), column
                reached += column.startswith("time_to_")
        # the final evaluation's own values, as the evaluation gives them
        assert got["final_worker_loss_worst"] == manifest["final"]["worker_loss_worst"]
    assert reached and never  # the targets tell the runs apart: some reached, some not


def test_evaluations_every_virtual_period_time_the_targets_alike(tmp_path):
    """With `eval.every_seconds`, the times to a target are those of the commits after which
    the periodic evaluations were taken, as the saved frames have them."""
    doc = {k: v for k, v in DOC.items() if k != "sweep"}
    doc["eval"] = {"every_seconds": 0.25, "per_worker": 24, "targets": TARGETS}
    result = run(config.parse_scenario(doc, "summary"))
    folder = result.write(tmp_path)
    got = results.summary_values(results.read_manifest(folder))
    evals = pd.read_parquet(folder / "metrics.parquet").dropna(subset=["test_accuracy"])
    assert len(evals) >= 5
    for column, value in recomputed(folder).items():
        np.testing.assert_allclose(got[column], value, rtol=1e-6, err_msg=column)


def test_load_summary_and_load_results_carry_the_columns(sweep):
    out, ids = sweep
    summary = results.load_summary(out).set_index("run_id")
    frame = results.load_results(out)
    assert "final_worker_accuracy_worst" in summary.attrs["summary_columns"]
    assert frame.attrs["sweep_columns"] == ["optimizer.lr"]  # the new columns are not sweeps
    for run_id in ids:
        want = results.summary_values(results.read_manifest(out / run_id))
        rows = frame[frame["run_id"] == run_id]
        for column, value in want.items():
            np.testing.assert_equal(summary.loc[run_id, column], value)
            np.testing.assert_equal(rows[column].unique(), [value])
    picked = results.load_results(out, columns=["test_accuracy", "time_to_accuracy_0.5"])
    assert picked.attrs["summary_columns"] == ["time_to_accuracy_0.5"]


@pytest.fixture
def with_old_run(sweep, tmp_path):
    """The sweep's folder plus a copy of one run as gemsim 0.2 wrote it: a `final` block with
    the three values only and no worker files."""
    out, ids = sweep
    folder = tmp_path / "out"
    shutil.copytree(out, folder)
    old = folder / "0000old0000"
    shutil.copytree(folder / ids[0], old)
    for name in ("workers.parquet", "worker_summary.parquet"):
        (old / name).unlink()
    manifest = results.read_manifest(old)
    final = {k: manifest["final"][k] for k in ("train_loss", "test_loss", "test_accuracy")}
    (old / "manifest.json").write_text(
        results.manifest_to_json({**manifest, "run_id": old.name, "final": final})
    )
    return folder, ids, old.name


def test_ls_sorts_by_a_summary_column_and_lists_an_old_run_last(with_old_run):
    folder, ids, old = with_old_run
    worst = {r: results.read_manifest(folder / r)["final"]["worker_accuracy_worst"] for r in ids}
    for name in ("final_worker_accuracy_worst", "worker_accuracy_worst"):
        listed = runner.invoke(app, ["ls", str(folder), "--json", "--sort", name])
        assert listed.exit_code == 0, listed.output
        rows = _lines(listed.stdout)
        assert [r["run_id"] for r in rows] == [*sorted(ids, key=worst.get), old]
        assert rows[-1]["final_worker_accuracy_worst"] is None  # not recorded: null
    # a time to target: NaN (never reached) sorts after every reached value
    times = {r: results.read_manifest(folder / r)["final"]["time_to_accuracy_0.7"] for r in ids}
    rows = _lines(
        runner.invoke(app, ["ls", str(folder), "--json", "--sort", "time_to_accuracy_0.7"]).stdout
    )
    reached = sorted((t, r) for r, t in times.items() if t is not None)
    assert [r["run_id"] for r in rows][: len(reached)] == [r for _, r in reached]
    text = runner.invoke(app, ["ls", str(folder), "--sort", "time_to_accuracy_0.7"]).output
    header, _, *lines = text.splitlines()
    assert "worst wkr" in header and "time_to_accuracy_0.7" in header
    old_line = next(line for line in lines if line.startswith(old))
    assert " - " in old_line  # the old run shows no value, not 'never'
    if len(reached) < len(ids):
        assert "never" in text


def test_ls_refuses_an_unknown_column_listing_the_allowed_ones(sweep):
    out, _ = sweep
    refused = runner.invoke(app, ["ls", str(out), "--sort", "final_worker_acc"])
    assert refused.exit_code == 2
    for allowed in ("final_worker_accuracy_worst", "time_to_accuracy_0.95_classes_0"):
        assert allowed in refused.output
    assert "'final_worker_acc' is not a column" in refused.output


def test_an_old_folder_still_loads_lists_and_shows(with_old_run):
    folder, _, old = with_old_run
    summary = results.load_summary(folder).set_index("run_id")
    assert np.isnan(summary.loc[old, "final_worker_accuracy_worst"])
    assert summary.loc[old, "final_test_accuracy"] > 0
    assert old in set(results.load_results(folder)["run_id"])
    shown = runner.invoke(app, ["show", str(folder / old)])
    assert shown.exit_code == 0, shown.output
    assert "per class" not in shown.output and "by speed decile" not in shown.output
    assert "final           test_accuracy" in shown.output


def test_show_prints_the_measures_and_the_workers_by_speed_decile(sweep):
    out, ids = sweep
    run_dir = out / ids[1]
    text = runner.invoke(app, ["show", str(run_dir)]).output
    final = results.read_manifest(run_dir)["final"]
    assert "per class       0: " in text and "class groups    classes_0 " in text
    assert f"worst {final['worker_accuracy_worst']:.4g} (best " in text
    for target in TARGETS:
        value = final[f"time_to_accuracy_{target:g}"]
        shown = "never" if value is None else f"{value:.4g} s"
        assert any(
            line.split() == [f"time_to_accuracy_{target:g}", *shown.split()]
            for line in text.splitlines()
        )
    assert "by speed decile (0: slowest" in text


def test_the_deciles_match_the_trace_the_shards_and_the_last_evaluation(sweep):
    out, ids = sweep
    run_dir = out / ids[0]
    shown = _lines(runner.invoke(app, ["show", str(run_dir), "--json"]).stdout)[0]
    deciles = shown["by_speed_decile"]
    assert deciles["owners"] == "workers"
    trace = pd.read_parquet(run_dir / "trace.parquet")
    by_worker = trace.groupby("worker")
    speed = 1.0 / by_worker["compute_time"].mean()
    # 4 workers: one per occupied decile, slowest first
    order = speed.sort_values().index.tolist()
    assert [row["owners"] for row in deciles["rows"]] == [1, 1, 1, 1]
    assert deciles["rows"][0]["decile"] == 0 and deciles["rows"][-1]["decile"] == 9
    scenario = config.expand(config.parse_scenario(DOC, "summary"))[0].scenario
    labels = problems.load_dataset(config.problem_args(scenario)[1], scenario.seed).y_train
    shards = problems.split_shards(config.data_split(scenario), labels, 4, 3, n_classes=3)
    evals = pd.read_parquet(run_dir / "workers.parquet")
    last = evals[evals["commit"] == evals["commit"].max()].set_index("worker")["accuracy"]
    for row, w in zip(deciles["rows"], order, strict=True):
        mine = trace[trace["worker"] == w]
        assert row["commits"] == len(mine)
        assert row["staleness_mean"] == pytest.approx(mine["staleness"].mean())
        assert row["speed_low"] * (1 - 1e-12) <= speed[w] <= row["speed_high"] * (1 + 1e-12)
        held = labels[shards.indices[shards.offsets[w] : shards.offsets[w + 1]]]
        assert row["shard_size"] == len(held)
        assert row["majority_share"] == pytest.approx(np.bincount(held).max() / len(held))
        assert row["accuracy"] == pytest.approx(float(last[w]))
    assert deciles["rows"][0]["majority_share"] == 1.0  # worker 0, the slowest, holds class 0


def test_a_populations_deciles_are_the_traces():
    """Cut by the clients' speed factors, the deciles' commits and staleness are those
    `gemsim trace` reports (`timing.staleness_by_speed_decile`)."""
    doc = {
        "name": "pop",
        "seed": 5,
        "workers": {"compute": {"dist": "exponential", "mean": 1.0}},
        "clients": {"population": 200, "concurrency": 8},
        "budget": {"commits": 3000},
    }
    doc["clients"]["speed"] = {"dist": "lognormal", "median": 1.0, "sigma": 0.5}
    spec = config.build_cluster(config.parse_scenario(doc, "pop"))
    simulation = timing.simulate_run(spec, seed=5)
    trace, speeds = simulation.trace, simulation.clients.speed
    rows = decile_rows(speeds, trace.client, trace.staleness)
    expected = [r for r in timing.staleness_by_speed_decile(trace, speeds) if r["clients"]]
    assert len(rows) == 10
    for row, want in zip(rows, expected, strict=True):
        assert row["owners"] == want["clients"]
        for key in ("decile", "speed_low", "speed_high", "commits", "staleness_mean"):
            assert row[key] == want[key], key


@pytest.mark.parametrize("targets", [[0.5, 1.5], [0], [-0.2], [], "high"])
def test_eval_targets_out_of_range_exit_2_naming_the_field(tmp_path, targets):
    doc = {k: v for k, v in DOC.items() if k != "sweep"}
    path = write_doc(tmp_path, {**doc, "eval": {**doc["eval"], "targets": targets}})
    for verb in ("show", "trace"):
        result = runner.invoke(app, [verb, str(path)])
        assert result.exit_code == 2, result.output
        assert "eval.targets" in result.output and str(path) in result.output


def test_eval_targets_left_out_change_no_identity():
    doc = {k: v for k, v in DOC.items() if k != "sweep"}
    without = config.parse_scenario({**doc, "eval": {"every": 6, "per_worker": 24}}, "s")
    assert "targets" not in without.model_dump(mode="json")["eval"]
    given = config.parse_scenario(doc, "s")
    assert given.model_dump(mode="json")["eval"]["targets"] == TARGETS
    assert config.config_hash(given) != config.config_hash(without)
