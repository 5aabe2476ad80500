"""Every scenario file shipped in the repository loads, expands and builds its cluster."""

from pathlib import Path

import pytest

from gemsim.config import build_cluster, expand, load_scenario, resolved_config

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "scenarios").rglob("*.yaml"))


def test_the_bundled_scenarios_are_found():
    names = {p.relative_to(ROOT / "scenarios").as_posix() for p in FILES}
    assert "quickstart.yaml" in names
    dists = {
        "constant",
        "uniform",
        "exponential",
        "lognormal",
        "gamma",
        "weibull",
        "pareto",
        "empirical",
        "mixture",
    }
    assert {f"timing/{d}.yaml" for d in dists} | {"timing/heterogeneous.yaml"} <= names


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_bundled_scenario_loads_and_expands(path):
    scenario = load_scenario(path)
    runs = expand(scenario, source=str(path), base_dir=path.parent)
    assert runs and len({r.config_hash for r in runs}) == len(runs)
    for run in runs:
        spec = build_cluster(run.scenario)  # sizes from the problem specs, nothing loaded
        assert spec.n_workers == run.scenario.workers.count
        assert resolved_config(run.scenario)["name"] == scenario.name


def test_quickstart_compares_three_rules_at_two_sizes():
    runs = expand(load_scenario(ROOT / "scenarios" / "quickstart.yaml"))
    points = {(r.scenario.workers.count, r.scenario.optimizer.rule) for r in runs}
    assert points == {(n, rule) for n in (8, 32) for rule in ("gem", "downpour", "staleness")}
