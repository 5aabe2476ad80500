"""Training an example's model from its scenario file: what the adapter tests share."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gemsim
from gemsim.app import build_problem, run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# A few hundred commits in one compiled scan length (segments of 128 between evaluations).
SHORT = {
    "sweep": {},
    "budget.commits": 256,
    "eval.every": 128,
    "eval.subset": 300,
    "engine.chunk": 128,
}


def train_twice(example: str, **overrides):
    """Two runs of ``examples/<example>/scenario.yaml``, and the loss before training."""
    scenario = gemsim.load_scenario(EXAMPLES / example / "scenario.yaml", {**SHORT, **overrides})
    problem = build_problem(scenario)
    before = float(problem.evaluate(problem.init_params)["train_loss"])
    return before, run(scenario), run(scenario)


def assert_trains_and_repeats(before: float, a, b) -> None:
    assert a.status.value == "ok"
    after = a.manifest["final"]["train_loss"]
    assert after < 0.7 * before, f"loss {before:.3f} -> {after:.3f}"
    assert a.manifest["params_sha256"] == b.manifest["params_sha256"]
    flat = lambda r: {k: np.asarray(v) for k, v in gemsim.app.flat_params(r.params).items()}
    fa, fb = flat(a), flat(b)
    assert all(np.array_equal(fa[k], fb[k]) for k in fa)
