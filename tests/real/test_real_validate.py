"""`gemsim validate` end to end on the process backend, and the staleness agreement of a
real run that emulates exponential compute times with the simulation of its scenario."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from gemsim import timing
from gemsim.app.verbs._validate import NULL_SEEDS, TV_MODEL_SLACK, simulations
from gemsim.cli import app
from gemsim.config import Scenario, build_cluster

pytestmark = pytest.mark.slow

COMMITS = 300
CONFIG = {
    "name": "validate-exp4",
    "seed": 5,
    # Mean 0.1 s per gradient dwarfs the quadratic's own compute and the server's service
    # (about a millisecond each), so the emulated law is what the workers really follow.
    "workers": {
        "count": 4,
        "compute": {"dist": "exponential", "mean": 0.1},
        "emulate_latency": True,
    },
    "budget": {"commits": COMMITS},
    "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
    "optimizer": {"rule": "gem", "lr": 0.05},
}


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("validate")
    scenario_file = folder / "exp4.yaml"
    scenario_file.write_text(yaml.safe_dump(CONFIG))
    out = folder / "out"
    result = CliRunner().invoke(
        app, ["validate", str(scenario_file), "--out", str(out), "--json", "--quiet"]
    )
    return result, out


def test_validate_passes_and_reports_the_contract_keys(validated):
    result, out = validated
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert report["passed"] is True
    assert report["replay_max_abs_diff"] <= report["replay_bar"]
    assert report["staleness_tv"] <= report["staleness_tv_threshold"]
    assert 0.8 <= report["throughput_ratio"] <= 1.25
    assert json.loads((out / "validation.json").read_text())["passed"] is True
    calibrated = yaml.safe_load((out / "calibrated.yaml").read_text())
    assert calibrated["budget"] == {"commits": COMMITS}


def test_real_staleness_follows_the_simulated_exponential_law(validated):
    """Against the simulation of the scenario itself (no calibration): the real TV must lie
    within the simulator's seed-to-seed spread at this length (95th percentile of
    NULL_SEEDS pairs) plus the same slack `validate` allows for what a law cannot capture."""
    _, out = validated
    real_dir = next(p for p in out.iterdir() if p.is_dir() and _backend(p) == "process")
    real = timing.CommitTrace.from_parquet(real_dir / "trace.parquet")
    spec = build_cluster(Scenario.model_validate(CONFIG))
    sims = simulations(spec, CONFIG["seed"])  # the ones `validate` compares with
    assert len(sims) == NULL_SEEDS + 1
    null = [timing.staleness_tv(sims[0].staleness, s.staleness) for s in sims[1:]]
    threshold = np.quantile(null, 0.95) + TV_MODEL_SLACK
    assert timing.staleness_tv(real.staleness, sims[0].staleness) <= threshold
    # The exponential law's mean staleness is n - 1 (docs/design.md §4).
    assert real.staleness.mean() == pytest.approx(3.0, abs=0.5)


def _backend(folder) -> str:
    return json.loads((folder / "manifest.json").read_text()).get("backend", "")
