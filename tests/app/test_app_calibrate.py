"""`gemsim calibrate`: a run folder in, a scenario whose fitted laws reproduce the run's
timing out."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from scenario_docs import QUADRATIC_PROBLEM
from typer.testing import CliRunner

from gemsim._checks import UserError
from gemsim.app import calibrate_run, run_file, simulate_timing, write_calibrated
from gemsim.cli import app
from gemsim.config import build_cluster, load_scenario, parse_scenario, resolved_config
from gemsim.timing import CommitTrace, Gamma, LogNormal, staleness_tv

QUADRATIC = QUADRATIC_PROBLEM
SOURCE = {
    "name": "cal",
    "seed": 5,
    "workers": {
        "count": 4,
        "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.3},
        "groups": [{"count": 2, "compute": {"dist": "gamma", "mean": 0.2, "shape": 4.0}}],
    },
    "network": {"pull": {"dist": "constant", "value": 0.0}},
    "server": {"service": {"dist": "exponential", "mean": 0.002}},
    "budget": {"commits": 3000},
    "problem": QUADRATIC,
    "optimizer": {"rule": "gem", "lr": 0.05},
    "eval": {"every": 1000},
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder written by `gemsim run` (real manifest and trace formats)."""
    tmp = tmp_path_factory.mktemp("calibrate")
    scenario = tmp / "source.yaml"
    scenario.write_text(yaml.safe_dump(SOURCE))
    out, rows = run_file(scenario, out=tmp / "out", quiet=True)
    assert rows[0].status == "ok"
    return out / rows[0].run_id


def test_calibrated_scenario_keeps_the_run_and_replaces_its_laws(run_dir):
    config = calibrate_run(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert config["name"] == "cal-calibrated"
    assert config["seed"] == 5
    assert config["budget"] == {"commits": 3000}
    assert "network" not in config
    for block in ("problem", "optimizer", "eval", "engine"):
        assert config[block].items() <= manifest["config"][block].items()
    workers = config["workers"]
    assert workers["count"] == 4 and [g["count"] for g in workers["groups"]] == [2]
    slow, fast = workers["groups"][0]["compute"], workers["compute"]
    assert slow["dist"] == "gamma" and fast["dist"] == "lognormal"
    assert (slow["mean"], slow["shape"]) == pytest.approx((0.2, 4.0), rel=0.10)
    assert (fast["median"], fast["sigma"]) == pytest.approx((0.1, 0.3), rel=0.10)
    assert config["server"]["service"]["dist"] == "exponential"
    assert config["server"]["service"]["mean"] == pytest.approx(0.002, rel=0.10)


def test_written_yaml_loads_and_reproduces_staleness_and_throughput(run_dir):
    path = write_calibrated(run_dir)
    assert path == run_dir / "calibrated.yaml"
    text = path.read_text()
    assert text.startswith("# Calibrated by `gemsim calibrate` from run ")
    assert "workers 0-1 compute: gamma(" in text and "KS p=" in text
    scenario = load_scenario(path)
    laws = [w.compute for w in build_cluster(scenario).workers]
    assert isinstance(laws[0], Gamma) and isinstance(laws[3], LogNormal)
    original = CommitTrace.from_parquet(run_dir / "trace.parquet")
    simulated = simulate_timing(scenario)
    assert staleness_tv(original.staleness, simulated.staleness) < 0.08
    rate = len(original) / original.duration
    assert len(simulated) / simulated.duration == pytest.approx(rate, rel=0.05)


def _folder(tmp_path, doc, trace, name="run"):
    """A run folder as a real backend writes it: manifest with the resolved config, trace."""
    folder = tmp_path / name
    folder.mkdir()
    config = resolved_config(parse_scenario(doc, "test"))
    manifest = {"run_id": name, "config": config}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    trace.to_parquet(folder / "trace.parquet")
    return folder


WINDOWED = {
    **SOURCE,
    "name": "windowed",
    "workers": {
        "count": 3,
        "compute": {"dist": "gamma", "mean": 0.1, "shape": 3.0},
        "failures": [{"worker": 2, "at": 20.0, "restart_after": 5.0}],
    },
    "server": {"discipline": "random"},
    "network": {},
    "optimizer": {"rule": "downpour", "lr": 0.05, "window": 2},
}


def test_per_commit_times_are_split_into_per_batch_laws(tmp_path):
    trace = simulate_timing(parse_scenario(WINDOWED, "test"))
    compute = trace.compute_time.copy()
    compute[::10] = np.nan  # unmeasured commits are ignored
    columns = {k: v for k, v in trace.columns().items() if k not in ("commit", "staleness")}
    columns["compute_time"] = compute
    columns["service_time"] = np.full(len(trace), np.nan)
    measured = CommitTrace.from_columns(
        **columns, n_workers=trace.n_workers, duration=trace.duration
    )
    path = write_calibrated(_folder(tmp_path, WINDOWED, measured), tmp_path / "x" / "c.yaml")
    assert "commit holds 2 mini-batches" in path.read_text()
    scenario = load_scenario(path)
    law = scenario.workers.compute
    assert law.dist == "gamma" and not scenario.workers.groups
    assert (law.mean, law.shape) == pytest.approx((0.1, 3.0), rel=0.10)
    assert scenario.server.service is None and scenario.server.discipline == "random"
    assert [(f.worker, f.at, f.restart_after) for f in scenario.workers.failures] == [
        (2, 20.0, 5.0)
    ]
    assert scenario.optimizer.window == 2 and scenario.budget.commits == len(trace)


def _trace(n=200, compute=0.1):
    time = np.arange(1, n + 1) * 0.05
    return CommitTrace.from_columns(
        time=time,
        worker=np.arange(n) % 4,
        pulled_version=np.maximum(0, np.arange(n) - 3),
        compute_time=np.full(n, compute),
        queue_time=np.zeros(n),
        service_time=np.zeros(n),
        n_workers=4,
        duration=float(time[-1]),
    )


def test_unusable_run_folders_name_the_file(tmp_path):
    with pytest.raises(UserError, match="no such run folder") as err:
        calibrate_run(tmp_path / "missing")
    assert str(tmp_path / "missing") in str(err.value)
    assert "invalid scenario" not in str(err.value)  # a folder is not a scenario
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="manifest.json") as err:
        calibrate_run(empty)
    assert "cannot read file" in str(err.value)
    (empty / "manifest.json").write_text(json.dumps({"run_id": "x"}))
    with pytest.raises(UserError, match="config: missing"):
        calibrate_run(empty)
    folder = _folder(tmp_path, SOURCE, _trace())
    (folder / "trace.parquet").unlink()
    with pytest.raises(UserError, match="trace.parquet"):
        calibrate_run(folder)
    pd.DataFrame().to_parquet(folder / "trace.parquet")  # what a failed run leaves
    with pytest.raises(UserError, match="not a readable commit trace: lacks columns"):
        calibrate_run(folder)
    unmeasured = _folder(tmp_path, SOURCE, _trace(compute=np.nan), name="unmeasured")
    with pytest.raises(UserError, match="no measured compute_time"):
        calibrate_run(unmeasured)


def test_constant_times_give_a_constant_law(tmp_path):
    config = calibrate_run(_folder(tmp_path, SOURCE, _trace()))
    assert config["workers"] == {"count": 4, "compute": {"dist": "constant", "value": 0.1}}
    assert "server" in config and "service" not in config["server"]  # never took time


def test_cli_writes_the_scenario_and_prints_the_fits(tmp_path):
    folder = _folder(tmp_path, SOURCE, _trace())
    runner = CliRunner()
    result = runner.invoke(app, ["calibrate", str(folder)])
    assert result.exit_code == 0, result.output
    assert "workers 0-3 compute" in result.output and "constant(value=0.1)" in result.output
    assert (folder / "calibrated.yaml").is_file()
    out = tmp_path / "c.yaml"
    result = runner.invoke(app, ["calibrate", str(folder), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["scenario"] == str(out) and payload["fits"][0]["family"] == "constant"
    assert load_scenario(out).name == "cal-calibrated"


def test_cli_missing_folder_exits_2_with_one_message(tmp_path):
    result = CliRunner().invoke(app, ["calibrate", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such run folder" in result.output and "Traceback" not in result.output
    assert "invalid scenario" not in result.output
