"""Numbers the documentation states, recomputed where that is cheap (the timing model alone):
the figures of docs/heterogeneity.md §5.1 are read from the text and checked against the
traces of the scenario they describe."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gemsim import config
from gemsim.app import simulate_timing

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "heterogeneity.md").read_text()
SCENARIO = ROOT / "scenarios" / "data" / "heterogeneous_quadratic.yaml"


def _number(pattern: str) -> tuple[float, ...]:
    text = " ".join(DOC.split())  # the doc's lines are wrapped anywhere
    match = re.search(pattern, text)
    assert match, f"docs/heterogeneity.md no longer says {pattern!r}"
    return tuple(float(g.replace(",", "")) for g in match.groups())


@pytest.fixture(scope="module")
def traces():
    runs = config.expand(config.load_scenario(SCENARIO), str(SCENARIO), base_dir=SCENARIO.parent)
    asynchronous = [r for r in runs if r.scenario.optimizer.rule == "downpour"]
    synchronous = [r for r in runs if r.scenario.optimizer.rule == "sync"]
    return (
        [simulate_timing(r.scenario) for r in asynchronous],
        [simulate_timing(r.scenario) for r in synchronous],
    )


def test_section_5_1_staleness_and_commits(traces):
    asynchronous, _ = traces
    commits, staleness = _number(r"about ([\d,]+) commits, mean staleness (\d+);")
    low, high, mean = _number(
        r"largest staleness of a seed's trace (\d+) to (\d+), (\d+) on average"
    )
    maxima = [int(t.staleness.max()) for t in asynchronous]
    assert (min(maxima), max(maxima), round(np.mean(maxima))) == (low, high, mean)
    assert abs(np.mean([len(t) for t in asynchronous]) - commits) / commits < 0.01
    assert round(np.mean([t.staleness.mean() for t in asynchronous])) == staleness


def test_section_5_1_commit_shares(traces):
    asynchronous, _ = traces
    share = r"(0\.\d+) to (0\.\d+)"
    text = rf"{share} for each fast worker, {share} for each middle one, {share} for each slow one"
    fast_lo, fast_hi, mid_lo, mid_hi, slow_lo, slow_hi = _number(text)
    shares = np.array([np.bincount(t.worker, minlength=12) / len(t) for t in asynchronous])
    for workers, lo, hi in (
        (slice(8, 12), fast_lo, fast_hi),
        (slice(4, 8), mid_lo, mid_hi),
        (slice(0, 4), slow_lo, slow_hi),
    ):
        got = shares[:, workers]
        assert (round(got.min(), 3), round(got.max(), 3)) == (lo, hi)


def test_section_5_1_synchronous_rounds(traces):
    _, synchronous = traces
    (rounds,) = _number(r"a step on the mean of 12 gradients \((\d+) rounds")
    assert round(np.mean([t.round_end.sum() for t in synchronous])) == rounds  # over the seeds
