"""Fixtures for the results tests: synthetic run folders written with write_run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
import pytest
from results_fakes import fake_manifest, fake_metrics, fake_params, fake_trace

from gemsim.results import write_run

matplotlib.use("Agg")  # tests never need a display


@pytest.fixture
def make_run() -> Callable[..., Path]:
    """Factory writing one synthetic finished run into a results folder."""

    def make(
        out_dir: Path,
        run_id: str,
        *,
        sweep: dict[str, Any] | None = None,
        n_workers: int = 4,
        n_commits: int = 40,
        gem: bool = True,
        repeat: int = 0,
        **manifest_over: Any,
    ) -> Path:
        trace = fake_trace(n_commits, n_workers, seed=repeat + 10 * n_workers)
        metrics = fake_metrics(trace, gem)
        params = fake_params(scale=1.0 + repeat)
        manifest = fake_manifest(
            run_id, params, sweep=sweep or {}, repeat=repeat, seed=repeat,
            n_commits=n_commits, **manifest_over,
        )  # fmt: skip
        return write_run(out_dir, run_id, manifest, trace, metrics, params)

    return make


@pytest.fixture
def sweep_dir(tmp_path: Path, make_run) -> Path:
    """A results folder: 2 rules (as optimizer sub-tables) x 2 worker counts x 2 repeats.

    Plus one diverged run, one failed run, a hidden half-written folder and a
    folder with a corrupt manifest, which readers must handle.
    """
    out = tmp_path / "out"
    for rule in ("gem", "downpour"):
        for n in (2, 4):
            for repeat in (0, 1):
                sweep = {"workers.count": n, "optimizer": {"rule": rule, "lr": 0.1}}
                make_run(out, f"{rule}-{n}-{repeat}", sweep=sweep, n_workers=n,
                         n_commits=30 + 10 * n, gem=rule == "gem", repeat=repeat)  # fmt: skip
    diverged = {"workers.count": 8, "optimizer": {"rule": "downpour", "lr": 0.1}}
    make_run(out, "downpour-8-0", sweep=diverged, n_workers=8, gem=False, status="diverged")
    failed = {"workers.count": 8, "optimizer": {"rule": "gem", "lr": 0.1}}
    make_run(out, "gem-8-0", sweep=failed, n_workers=8, status="failed", error="boom")
    hidden = make_run(tmp_path / "elsewhere", "half", sweep=diverged)
    hidden.rename(out / ".half.tmp-1-abcd")
    (out / "corrupt").mkdir()
    (out / "corrupt" / "manifest.json").write_text("{not json")
    (out / "notes.txt").write_text("a stray file")
    return out
