"""The process backend runs a user's model: spawned workers import its module by path from
the resolved configuration, and the engine's replay of the recorded trace is bit-exact."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "problems"))
from user_modules import regression_arrays, write_module  # noqa: E402

import gemsim  # noqa: E402
from gemsim.app import flat_params, run  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    folder = tmp_path_factory.mktemp("real-user")
    module = write_module(folder)
    np.savez(folder / "data.npz", **regression_arrays())
    doc = {
        "name": "real-user",
        "seed": 5,
        "workers": {
            "count": 3,
            "compute": {"dist": "exponential", "mean": 0.02},
            "emulate_latency": True,  # the model's own gradient takes microseconds
        },
        "budget": {"commits": 120},
        "problem": {
            "model": {"import": f"{module}:make", "kwargs": {"dim": 3}},
            "dataset": {"name": "arrays", "path": "data.npz"},
            "batch_size": 8,
        },
        "optimizer": {"rule": "gem", "lr": 0.05},
        "eval": {"every": 60, "subset": 40},
    }
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    # The run must not depend on the module being importable from here: only the
    # scenario's folder, recorded in the resolved configuration, leads to it.
    assert str(folder) not in sys.path
    return gemsim.load_scenario(path)


def test_replay_of_a_real_run_on_a_user_model_is_bit_exact(scenario):
    real = run(scenario, backend="process")
    assert real.status.value == "ok" and len(real.trace) == 120
    assert real.trace.staleness.max() > 0  # really asynchronous
    replay = run(scenario, trace=real.trace)
    a, b = flat_params(real.params), flat_params(replay.params)
    assert a.keys() == b.keys() == {"['w']", "['b']"}
    assert all(np.array_equal(a[k], b[k]) for k in a)
