"""What a bundled scenario is stays what it was: every expanded run's id, and the traces and
parameters of a few runs cut to 200 commits, against the values recorded in
`bundled_identities.json` (ids and traces as `benchmarks/scenario_hashes.py` records them,
whose cut this repeats; parameters as values, compared within a tolerance that every
instruction set meets).
Fields added since (a partition, a group's data, a quadratic's heterogeneity) are left out of
a resolved configuration while they hold their defaults, so they change no run id.
`scenarios/timing/availability.yaml` is left out: its file's absolute path is part of its
identity, and so of where the repository lies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gemsim import config
from gemsim.app import run, simulate_timing

ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((Path(__file__).parent / "bundled_identities.json").read_text())
COMMITS = 200


def _expanded(name: str):
    path = ROOT / name
    return config.expand(config.load_scenario(path), name, base_dir=path.parent)


def _cut(name: str):
    """The file's first run with its budget cut to COMMITS commits (no sweep, one repeat)."""
    path = ROOT / name
    data = _expanded(name)[0].scenario.model_dump(mode="json", by_alias=True)
    data.update(budget={"commits": COMMITS}, sweep={}, repeats=1)
    data.pop("seeds", None)
    if data.get("eval"):
        data["eval"] = {**data["eval"], "every": COMMITS}
    return config.parse_scenario(data, name, base_dir=path.parent)


def test_every_bundled_run_keeps_its_id():
    got = {name: [r.config_hash[:12] for r in _expanded(name)] for name in RECORDED["run_ids"]}
    assert got == RECORDED["run_ids"]


@pytest.mark.parametrize("name", sorted(RECORDED["traces"]))
def test_bundled_traces_are_the_same_commits(name):
    assert simulate_timing(_cut(name)).sha256() == RECORDED["traces"][name]


@pytest.mark.parametrize("name", sorted(RECORDED["param_values"]))
def test_bundled_quadratic_runs_reach_the_same_parameters(name):
    # Values within 1e-5 of their scale, not a hash: XLA's CPU code rounds differently where
    # the instruction set has no FMA (SSE4.2, AVX: these runs' last bits differ from AVX2's
    # and AVX-512's, 5e-7 of the scale after 200 commits), so a recorded hash would hold on
    # some hosts only. A change of behaviour moves them by far more.
    params = run(_cut(name)).params
    for leaf, recorded in RECORDED["param_values"][name].items():
        now, recorded = np.asarray(params[leaf], np.float64).ravel(), np.asarray(recorded)
        assert now.shape == recorded.shape, leaf
        assert np.abs(now - recorded).max() <= 1e-5 * np.abs(recorded).max(), leaf
