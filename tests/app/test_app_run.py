"""`gemsim run` and `gemsim.run`: determinism, divergence as a result, resume after a kill."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from scenario_docs import quadratic_doc, write_doc
from typer.testing import CliRunner

import gemsim
from gemsim.app import exit_code, interruptible
from gemsim.app._signals import Terminated
from gemsim.app.execute._stages import EXECUTORS
from gemsim.cli import app
from gemsim.results import load_results, load_summary, read_run

QUADRATIC = quadratic_doc()


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
        for kind in ("sequential", "wavefront", "auto")
    }
    assert runs["sequential"].manifest["executor"] == "SequentialExecutor"
    assert runs["wavefront"].manifest["executor"] == "WavefrontExecutor"
    assert runs["auto"].manifest["executor"] == "SequentialExecutor"  # CPU: measured faster
    a, b = runs["sequential"].tree()["theta"], runs["wavefront"].tree()["theta"]
    np.testing.assert_allclose(a, b, atol=1e-5 * (1 + np.abs(a).max()), rtol=0)
    assert runs["sequential"].manifest["trace_sha256"] == runs["wavefront"].manifest["trace_sha256"]


def test_only_the_executor_in_use_keeps_its_last_runs_slots(tmp_path):
    """Runs of a process share compiled executors (`ExecutorCache`); the one a run used keeps
    its slots for the next run of its kind, and lets them go once another one is used."""
    scenario = gemsim.load_scenario(write(tmp_path, QUADRATIC))
    other = scenario.model_copy(
        update={"workers": scenario.workers.model_copy(update={"count": 3})}
    )
    gemsim.run(scenario)
    keeping = [e for e in EXECUTORS._items.values() if e._spare is not None]
    assert [e.n_workers for e in keeping] == [4]
    gemsim.run(other)
    assert keeping[0]._spare is None
    assert [e.n_workers for e in EXECUTORS._items.values() if e._spare is not None] == [3]


def test_divergence_is_a_result_and_the_sweep_goes_on(tmp_path):
    # lr 10 on the quadratic (curvatures 1 to 10): each commit multiplies theta's error by up
    # to 99 in size, so float32 overflows to inf, then nan, within a few dozen commits.
    doc = {
        **QUADRATIC,
        "seed": 1,
        "workers": {"count": 4, "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.2}},
        "budget": {"commits": 192},
        "optimizer": {"rule": "downpour", "lr": 10.0},
        "eval": {"every": 64},
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


# Bounds on waiting for the sweep's subprocesses: they take seconds here (start-up and one
# compilation, then about 0.5 s per run); these allow a machine 3x slower and loaded, with
# margin, and only bound how long a broken command is waited for.
SWEEP_TIMEOUT_S = 300


def test_resume_after_kill_redoes_no_finished_run(tmp_path):
    # 10,000 commits a run: about 0.5 s each once compiled, so the four runs left after the
    # second finishes give the kill (sent within a poll, 10 ms) seconds to land mid-sweep.
    doc = {
        **QUADRATIC,
        "budget": {"commits": 10000},
        "eval": {"every": 5000},
        "sweep": {"optimizer.lr": [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]},
    }
    scenario, out = write(tmp_path, doc), tmp_path / "out"
    cmd = [sys.executable, "-m", "gemsim.cli", "run", str(scenario), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while time.monotonic() < deadline and len(_finished(out)) < 2 and proc.poll() is None:
            time.sleep(0.01)  # a run takes 0.5 s: the kill lands within the next one
        proc.send_signal(signal.SIGKILL)
    finally:
        _kill_group(proc)
    before = {p: (p / "manifest.json").read_bytes() for p in _finished(out)}
    assert 2 <= len(before) < 6, "the kill must land in the middle of the sweep"
    resumed = subprocess.Popen(
        [*cmd, "--resume", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = resumed.communicate(timeout=SWEEP_TIMEOUT_S)  # reads both pipes
    finally:
        _kill_group(resumed)
    assert resumed.returncode == 0, stderr
    runs = [json.loads(line) for line in stdout.splitlines()]  # JSON Lines
    assert sum(r["skipped"] for r in runs) == len(before)
    assert {p: (p / "manifest.json").read_bytes() for p in before} == before
    assert len(_finished(out)) == 6
    assert load_results(out)["run_id"].nunique() == 6


def _kill_group(proc: subprocess.Popen) -> None:
    """End the command's whole process group (a no-op once it has exited) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


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


# --- interrupts (gemsim/app/_signals.py; the real backends' shutdown: tests/real) ---------


def test_sigterm_raises_terminated_once_and_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(Terminated) as caught, interruptible() as interrupts:
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            signal.raise_signal(signal.SIGTERM)  # during the clean-up: ignored
            signal.raise_signal(signal.SIGINT)
    assert isinstance(caught.value, KeyboardInterrupt) and caught.value.signum == signal.SIGTERM
    assert interrupts.received == signal.SIGTERM
    assert exit_code(caught.value) == 143 and exit_code(KeyboardInterrupt()) == 130
    # a library that raises its own KeyboardInterrupt (ray.get does) keeps the signal's code
    assert exit_code(KeyboardInterrupt(), interrupts) == 143
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_an_ignored_sigint_stays_ignored_inside_interruptible():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job
    try:
        with interruptible() as interrupts:
            signal.raise_signal(signal.SIGINT)
        assert interrupts.received is None
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_pool_initializer_ignores_sigint_and_raises_on_sigterm():
    # In a child: the initializer changes the dispositions of the whole process for good.
    probe = (
        "import signal\n"
        "from gemsim.app._signals import Terminated, pool_initializer\n"
        "pool_initializer()\n"
        "signal.raise_signal(signal.SIGINT)\n"
        "try:\n"
        "    signal.raise_signal(signal.SIGTERM)\n"
        "except Terminated:\n"
        "    print('terminated')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S
    )
    assert done.returncode == 0 and done.stdout.strip() == "terminated", done.stderr


def test_a_real_sweep_hands_its_address_to_the_backend(tmp_path, monkeypatch):
    """`gemsim run --backend ray --address ADDR`: each run's workers join the cluster at ADDR
    (the run's backend is told it), not a local instance."""
    import gemsim.real

    seen = []

    def backend(name, job, *, progress=None, address=None):
        seen.append((name, address))
        raise RuntimeError("no cluster here")

    monkeypatch.setattr(gemsim.real, "run_backend", backend)
    path = write_doc(tmp_path, quadratic_doc(workers=2, commits=10))
    _, rows = gemsim.run_file(
        path, out=tmp_path / "out", backend="ray", address="ray://head:10001", quiet=True
    )
    assert seen == [("ray", "ray://head:10001")]
    assert [row.status for row in rows] == ["failed"] and "no cluster here" in rows[0].error
