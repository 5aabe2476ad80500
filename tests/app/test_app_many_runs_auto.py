"""`many_runs: auto` on a CPU for commits of a few examples (the quadratics): together where
the estimate says it saves time, one by one (as `off`) where it does not."""

from __future__ import annotations

import math

import jax
import pytest

from gemsim import config
from gemsim.app.sweep import _many_runs_plan as plan

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's rule")


def group(dim: int, *, budget: dict, lrs: int = 1, runs: int = 16):
    """`runs` runs of the quadratic (batch 1) that may execute together: `lrs` learning
    rates, the rest repeats."""
    doc = {
        "name": "auto",
        "seed": 0,
        "workers": {"count": 8, "compute": {"dist": "constant", "value": 0.5}},
        "budget": budget,
        "problem": {"model": {"name": "quadratic", "dim": dim}, "batch_size": 1},
        "optimizer": {"rule": "downpour", "lr": 0.01},
        "sweep": {"optimizer.lr": [0.01 * (k + 1) for k in range(lrs)]} if lrs > 1 else {},
        "repeats": runs // lrs,
    }
    runs_ = config.expand(config.parse_scenario(doc, "auto.yaml"), "auto.yaml")
    scenarios = [r.scenario for r in runs_]
    return plan.unit_size(scenarios[0], len(scenarios), scenarios), scenarios


def test_short_repeats_of_one_rule_run_one_by_one():
    """One program either way, a larger one together: 16 x 300 commits do not pay for it."""
    (size, why), _ = group(64, budget={"commits": 300})
    assert size == 1 and "one by one" in why


def test_a_learning_rate_sweep_runs_together_where_one_by_one_compiles_each_rate():
    (size, why), _ = group(64, budget={"commits": 300}, lrs=16)
    assert size == 16 and "saves" in why


def test_long_repeats_of_a_small_model_run_together():
    (size, _), _ = group(64, budget={"commits": 100_000})
    assert size == 16


def test_a_large_model_runs_one_by_one_even_for_a_sweep():
    """d = 10,000: every parameter's passes cost more together than the runs share."""
    (size, why), _ = group(10_000, budget={"commits": 100_000}, lrs=16)
    assert size == 1 and "would save" in why


def test_a_seconds_budget_counts_the_workers_commits_at_their_pace():
    """8 workers of 0.5 s each for 60 s: 960 commits a run, the estimate `_saving` uses."""
    _, scenarios = group(64, budget={"seconds": 60.0})
    assert math.isclose(plan._commits(scenarios[0]), 8 * 60.0 / 0.5)
    assert plan._commits(group(64, budget={"commits": 123})[1][0]) == 123.0
