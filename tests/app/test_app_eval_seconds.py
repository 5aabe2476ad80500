"""`eval.every_seconds`: the central variable evaluated as it stood at every multiple of a
period of virtual time (after the last commit made by then) and at the last commit, in both
executors and for runs executed together; exclusive with `eval.every`; absent, a run's
identity is what it was."""

from __future__ import annotations

import numpy as np
import pytest

from gemsim import config
from gemsim.app import run
from gemsim.config import ScenarioError

PERIOD = 0.15
DOC = {
    "name": "eval-seconds",
    "seed": 5,
    "workers": {"count": 3, "compute": {"dist": "exponential", "mean": 0.1}},
    "budget": {"commits": 60},
    "problem": {
        "model": "logistic",
        "dataset": {"name": "synthetic", "n_train": 300, "n_test": 90, "dim": 5, "classes": 3},
        "batch_size": 8,
    },
    "optimizer": {"rule": "downpour", "lr": 0.1},
    "eval": {"every_seconds": PERIOD, "subset": 64},
}


def _expected(times: np.ndarray) -> list[int]:
    """Written out: for t = PERIOD, 2 PERIOD, ... up to the last commit, the last commit at or
    before t; and the last commit."""
    points, j = set(), 1
    while j * PERIOD <= times[-1]:
        made = [k for k, s in enumerate(times) if s <= j * PERIOD]
        if made:
            points.add(made[-1])
        j += 1
    return sorted({*points, len(times) - 1})


def _eval_commits(result) -> list[int]:
    return result.metrics.dropna(subset=["test_loss"])["commit"].astype(int).tolist()


@pytest.mark.parametrize("executor", ["sequential", "wavefront"])
def test_evaluations_fall_at_the_last_commit_of_each_period(executor):
    doc = {**DOC, "engine": {"executor": executor}}
    result = run(config.parse_scenario(doc, "eval-seconds"))
    assert _eval_commits(result) == _expected(result.trace.time)
    assert len(_eval_commits(result)) >= 10


def test_runs_executed_together_evaluate_at_their_own_times(tmp_path):
    from gemsim.app import run_sweep
    from gemsim.trace import CommitTrace

    doc = {**DOC, "repeats": 2, "engine": {"many_runs": 2}}
    frame = run_sweep(config.parse_scenario(doc, "eval-seconds"), out=tmp_path, quiet=True)
    seen = []
    for run_id, rows in frame.groupby("run_id"):
        trace = CommitTrace.from_parquet(tmp_path / run_id / "trace.parquet")
        commits = rows.dropna(subset=["test_loss"])["commit"].astype(int).tolist()
        assert commits == _expected(trace.time)
        seen.append(commits)
    assert len(seen) == 2 and seen[0] != seen[1]


def test_every_and_every_seconds_are_exclusive_and_positive():
    with pytest.raises(ScenarioError, match="every_seconds"):
        config.parse_scenario({**DOC, "eval": {"every": 10, "every_seconds": 1.0}}, "x")
    with pytest.raises(ScenarioError, match="eval.every_seconds"):
        config.parse_scenario({**DOC, "eval": {"every_seconds": 0}}, "x")


def test_left_out_it_changes_no_run_identity():
    plain = {**DOC, "eval": {"every": 20, "subset": 64}}
    expanded = config.expand(config.parse_scenario(plain, "x"), "x")[0]
    assert "every_seconds" not in expanded.config["eval"]
