"""Scenarios and checks shared by the real-backend tests."""

from __future__ import annotations

import time

import jax
import numpy as np
import psutil

from gemsim.config import Scenario

REPLAY_TOLERANCE = 1e-5


def cnn_scenario(rule: str, *, workers: int = 4, commits: int = 240, **extra):
    """The paper's CNN on mnist-5k (b = 64): the exactness tests' workload."""
    optimizer = {"rule": rule, "lr": 0.05}
    if rule == "gem":
        optimizer["diagnostics_every"] = 8
    return Scenario.model_validate(
        {
            "name": f"real-{rule}",
            "seed": 11,
            "workers": {"count": workers, "compute": {"dist": "exponential", "mean": 0.05}},
            "budget": {"commits": commits},
            "problem": {"model": "cnn", "dataset": "mnist-5k", "batch_size": 64},
            "optimizer": optimizer,
            "eval": {"every": 10_000, "subset": 200},
            **extra,
        }
    )


def quadratic_scenario(*, n: int = 3, commits: int = 120, seed: int = 3, **blocks):
    """A cheap model for protocol tests (deaths, restarts, interrupts)."""
    config = {
        "name": "real-quadratic",
        "seed": seed,
        "workers": {
            "count": n,
            "compute": {"dist": "exponential", "mean": 0.02},
            "emulate_latency": True,  # the quadratic's own gradient takes microseconds
        },
        "budget": {"commits": commits},
        "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
        "optimizer": {"rule": "gem", "lr": 0.05},
    }
    for key, value in blocks.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return Scenario.model_validate(config)


def flat(params) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)])


def assert_replay_matches(real, replay) -> None:
    a, b = flat(real.params), flat(replay.params)
    bar = REPLAY_TOLERANCE * (1.0 + np.max(np.abs(a)))
    diff = np.max(np.abs(a - b))
    assert diff <= bar, f"replay differs from the real run by {diff:.3g} (bar {bar:.3g})"


def wait_no_children(timeout: float = 10.0) -> list:
    """The child processes still alive after `timeout` seconds (none, when all is well).
    Ray's and the resource tracker's helpers are not the run's workers."""
    deadline = time.monotonic() + timeout
    while True:
        children = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and _is_worker(p)
        ]
        if not children or time.monotonic() > deadline:
            return children
        time.sleep(0.2)


def _is_worker(p: psutil.Process) -> bool:
    try:
        return "resource_tracker" not in " ".join(p.cmdline())
    except psutil.Error:
        return False
