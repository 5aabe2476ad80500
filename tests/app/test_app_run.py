"""`gemsim run` and `gemsim.run`: determinism, divergence as a result, resume after a kill."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from typer.testing import CliRunner

import gemsim
from gemsim.cli import app
from gemsim.results import load_results, load_summary, read_run

QUADRATIC = {
    "name": "quad",
    "seed": 11,
    "workers": {"count": 4, "compute": {"dist": "exponential", "mean": 0.1}},
    "budget": {"commits": 200},
    "problem": {
        "model": {"name": "quadratic", "dim": 8, "condition": 10.0, "noise": 0.1},
        "batch_size": 1,
    },
    "optimizer": {"rule": "gem", "lr": 0.05},
    "eval": {"every": 50},
}


def write(tmp_path, doc, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_same_scenario_twice_gives_identical_hashes(tmp_path):
    for doc in (
        QUADRATIC,
        {
            **QUADRATIC,
            "problem": {
                "model": {"name": "mlp", "hidden": [16]},
                "dataset": "digits",
                "batch_size": 16,
            },
            "optimizer": {"rule": "downpour", "lr": 0.05, "window": 2},
        },
    ):
        scenario = gemsim.load_scenario(write(tmp_path, doc))
        a, b = gemsim.run(scenario), gemsim.run(scenario)
        assert a.manifest["trace_sha256"] == b.manifest["trace_sha256"]
        assert a.manifest["params_sha256"] == b.manifest["params_sha256"]
        other = gemsim.run(scenario.model_copy(update={"seed": 12}))
        assert other.manifest["params_sha256"] != a.manifest["params_sha256"]


def test_executor_choice_gives_the_same_run(tmp_path):
    scenario = gemsim.load_scenario(write(tmp_path, QUADRATIC))
    runs = {
        kind: gemsim.run(
            scenario.model_copy(
                update={"engine": scenario.engine.model_copy(update={"executor": kind})}
            )
        )
        for kind in ("sequential", "batched", "auto")
    }
    assert runs["sequential"].manifest["executor"] == "SequentialExecutor"
    assert runs["batched"].manifest["executor"] == "BatchedExecutor"
    assert runs["auto"].manifest["executor"] == "SequentialExecutor"  # CPU: measured faster
    a, b = runs["sequential"].params["theta"], runs["batched"].params["theta"]
    np.testing.assert_allclose(a, b, atol=1e-5 * (1 + np.abs(a).max()), rtol=0)
    assert runs["sequential"].manifest["trace_sha256"] == runs["batched"].manifest["trace_sha256"]


def test_divergence_is_a_result_and_the_sweep_goes_on(tmp_path):
    # seed 1 overflows to nan; (with seed 0 the weights reach 1e24, every relu dies and the
    # loss stays finite: broken, but not non-finite, so not `diverged`)
    doc = {
        "name": "diverge",
        "seed": 1,
        "workers": {"count": 4, "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.2}},
        "budget": {"commits": 192},
        "problem": {"model": "cnn", "dataset": "mnist-5k", "batch_size": 32},
        "optimizer": {"rule": "downpour", "lr": 10.0},
        "eval": {"every": 64, "subset": 200},
        "sweep": {"optimizer.lr": [10.0, 0.01]},
    }
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", str(write(tmp_path, doc)), "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    summary = load_summary(out).set_index("optimizer.lr")
    assert summary.loc[10.0, "status"] == "diverged"
    assert summary.loc[0.01, "status"] == "ok"
    diverged = read_run(out / summary.loc[10.0, "run_id"])
    m = diverged.manifest
    assert 0 <= m["diverged_at"] < 192 and m["n_commits"] == m["diverged_at"]
    assert len(diverged.metrics) == m["diverged_at"] + 1
    assert not diverged.metrics["finite"].iloc[-1] and diverged.metrics["finite"].iloc[:-1].all()
    assert all(np.all(np.isfinite(v)) for v in diverged.params.values())  # last finite theta
    assert "diverged" in result.output


def test_resume_after_kill_redoes_no_finished_run(tmp_path):
    doc = {
        **QUADRATIC,
        "budget": {"commits": 30000},
        "eval": {"every": 10000},
        "sweep": {"optimizer.lr": [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]},
    }
    scenario, out = write(tmp_path, doc), tmp_path / "out"
    cmd = [sys.executable, "-m", "gemsim.cli", "run", str(scenario), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and len(_finished(out)) < 2:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {p: (p / "manifest.json").read_bytes() for p in _finished(out)}
    assert 2 <= len(before) < 6, "the kill must land in the middle of the sweep"
    result = subprocess.run(
        [*cmd, "--resume", "--json"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    runs = [json.loads(line) for line in result.stdout.splitlines()]  # JSON Lines
    assert sum(r["skipped"] for r in runs) == len(before)
    assert {p: (p / "manifest.json").read_bytes() for p in before} == before
    assert len(_finished(out)) == 6
    assert load_results(out)["run_id"].nunique() == 6


def _finished(out: Path) -> list[Path]:
    if not out.exists():
        return []
    # Hidden folders are runs being written (renamed into place when complete).
    return sorted(
        p for p in out.iterdir() if not p.name.startswith(".") and (p / "manifest.json").exists()
    )


def test_replay_of_a_saved_trace_reproduces_the_run(tmp_path):
    scenario_file = write(tmp_path, QUADRATIC)
    runner = CliRunner()
    assert (
        runner.invoke(app, ["trace", str(scenario_file), "--out", str(tmp_path / "t")]).exit_code
        == 0
    )
    result = runner.invoke(
        app,
        [
            "replay",
            str(tmp_path / "t" / "trace.parquet"),
            str(scenario_file),
            "--out",
            str(tmp_path / "r"),
            "--quiet",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run_id"]
    replayed = read_run(tmp_path / "r" / run_id).manifest
    direct = gemsim.run(gemsim.load_scenario(scenario_file)).manifest
    assert replayed["params_sha256"] == direct["params_sha256"]
    assert replayed["trace_sha256"] == direct["trace_sha256"]
    bad = runner.invoke(
        app,
        [
            "replay",
            str(tmp_path / "t" / "trace.parquet"),
            str(scenario_file),
            "--set",
            "workers.count=5",
        ],
    )
    assert bad.exit_code == 2 and "trace has 4 workers" in bad.output
