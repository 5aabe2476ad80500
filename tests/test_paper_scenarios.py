"""The GEM paper's scenarios (scenarios/paper/) load, expand and simulate their timing."""

from __future__ import annotations

from pathlib import Path

import pytest

import gemsim
from gemsim.config import expand

PAPER = Path(__file__).resolve().parents[1] / "scenarios" / "paper"
FILES = sorted(PAPER.glob("*.yaml"))

# (workers.count, optimizer.rule, kappa, lr) of every expanded run, per file.
EXPECTED = {
    "fig1": {(n, rule, 1.0, 0.05) for n in (5, 10, 20, 30)
             for rule in ("gem", "downpour", "staleness")},
    "fig2": {(100, rule, 1.0, 0.05) for rule in ("gem", "downpour", "staleness")},
    "fig3": {(n, "gem", 1.0, 0.05) for n in (5, 10, 20, 30, 100)},
    "fig4": {(1, "gem", 1.0, 0.05)},
    "fig5": {(n, rule, 1.0, 0.05) for n in (1, 10) for rule in ("gem", "sync")},
    "fig6": {(20, rule, 1.0, 0.1) for rule in ("gem", "downpour", "sync")},
    "fig8": {(20, "gem", kappa, 0.05) for kappa in (1.0, 2.0, 3.0, 4.0)},
}  # fmt: skip


def _point(run) -> tuple:
    optimizer = run.scenario.optimizer
    kappa = getattr(optimizer, "kappa", 1.0)
    return (run.scenario.workers.count, optimizer.rule, kappa, optimizer.lr)


def test_one_file_per_figure():
    assert [path.stem for path in FILES] == sorted(EXPECTED)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_paper_scenario_loads_and_expands(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"# GEM paper, figure {path.stem[3:]}"), "header: the paper's setting"
    scenario = gemsim.load_scenario(path)
    assert scenario.name == f"paper-{path.stem}"
    assert scenario.problem.dataset.name == "mnist-5k" and scenario.problem.model.name == "cnn"
    runs = expand(scenario, source=str(path), base_dir=path.parent)
    assert {_point(run) for run in runs} == EXPECTED[path.stem]
    assert len({run.config_hash for run in runs}) == len(runs)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_full_mnist_is_one_override_away(path):
    scenario = gemsim.load_scenario(path, overrides=["problem.dataset=mnist"])
    assert scenario.problem.dataset.name == "mnist"
    assert scenario.problem.batch_size == (256 if path.stem == "fig4" else 64)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_paper_scenario_timing_simulates(path):
    scenario = gemsim.load_scenario(path, overrides={"budget": {"commits": 400}})
    for run in expand(scenario, source=str(path), base_dir=path.parent):
        trace = gemsim.simulate_timing(run.scenario)
        assert len(trace) == 400 and trace.n_workers == run.scenario.workers.count


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_fig4_points_validate(n):
    """The documented loop: one (n, b = 256 / n, compute time) point per call."""
    b = 256 // n
    point = (
        f"sweep={{workers.count: [{n}], problem.batch_size: [{b}], "
        f"workers.compute.median: [{0.002 + 0.0015 * b}], eval.every: [{n}]}}"
    )
    scenario = gemsim.load_scenario(PAPER / "fig4.yaml", overrides=[point])
    (run,) = expand(scenario)
    assert run.scenario.workers.count * run.scenario.problem.batch_size == 256
    assert run.scenario.workers.compute.median == pytest.approx(0.002 + 0.0015 * b)
