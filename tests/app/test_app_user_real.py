"""The process backend runs a user's model: workers import its module by path from the
resolved configuration, and the engine's replay of the recorded trace is bit-exact. A worker
builds it in the environment the server had when it started the worker."""

from __future__ import annotations

import multiprocessing.forkserver
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "problems"))
from user_modules import LINEAR, regression_arrays, write_module  # noqa: E402

import gemsim  # noqa: E402
from gemsim.app import run  # noqa: E402
from gemsim.real._worker_processes import _worker_context  # noqa: E402

pytestmark = pytest.mark.slow


def write_scenario(folder: Path, model: str, commits: int = 120) -> Path:
    np.savez(folder / "data.npz", **regression_arrays())
    doc = {
        "name": "real-user",
        "seed": 5,
        "workers": {
            "count": 3,
            "compute": {"dist": "exponential", "mean": 0.02},
            "emulate_latency": True,  # the model's own gradient takes microseconds
        },
        "budget": {"commits": commits},
        "problem": {
            "model": {"import": model, "kwargs": {"dim": 3}},
            "dataset": {"name": "arrays", "path": "data.npz"},
            "batch_size": 8,
        },
        "optimizer": {"rule": "gem", "lr": 0.05},
        "eval": {"every": 60, "subset": 40},
    }
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    folder = tmp_path_factory.mktemp("real-user")
    path = write_scenario(folder, f"{write_module(folder)}:make")
    # The run must not depend on the module being importable from here: only the
    # scenario's folder, recorded in the resolved configuration, leads to it.
    assert str(folder) not in sys.path
    return gemsim.load_scenario(path)


@pytest.mark.bitexact
def test_replay_of_a_real_run_on_a_user_model_is_bit_exact(scenario):
    real = run(scenario, backend="process")
    assert real.status.value == "ok" and len(real.trace) == 120
    assert real.trace.staleness.max() > 0  # really asynchronous
    replay = run(scenario, trace=real.trace)
    a, b = real.params, replay.params  # leaf path -> array
    assert a.keys() == b.keys() == {"['w']", "['b']"}
    assert all(np.array_equal(a[k], b[k]) for k in a)


MARK = "GEMSIM_TEST_WORKER_ENVIRON"
# LINEAR's model, built only where MARK is set: a worker without it dies building its problem.
NEEDS_MARK = (
    LINEAR
    + f"""

import os


def make_marked(dim=3):
    if os.environ.get("{MARK}") != "1":
        raise RuntimeError("{MARK} is not in this process's environment")
    return make(dim)
"""
)


def test_a_worker_takes_the_environment_of_the_moment_it_is_started(tmp_path, monkeypatch):
    """The fork server started before the variable was set (as with a notebook's first run);
    every worker still sees it, so each built its problem and committed."""
    monkeypatch.delenv(MARK, raising=False)
    _worker_context()  # the backend's fork server, preloaded as a run preloads it
    multiprocessing.forkserver.ensure_running()
    monkeypatch.setenv(MARK, "1")
    path = write_scenario(tmp_path, f"{write_module(tmp_path, NEEDS_MARK)}:make_marked", 30)
    real = run(gemsim.load_scenario(path), backend="process")
    assert not real.manifest["worker_events"]  # no worker died
    assert real.status.value == "ok" and set(real.trace.worker.tolist()) == {0, 1, 2}
