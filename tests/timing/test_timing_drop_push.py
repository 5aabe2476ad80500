"""Lost pushes (`workers.failures: {drop_push: p}`, DiLoCo's robustness study): each push that
reaches the server is lost with probability p, decided by its worker's own seeded stream;
the trace's `dropped` column counts the pushes a worker lost before each of its commits;
p = 0 is no failure at all; bad values are refused naming the field."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gemsim import config, timing
from gemsim.app import simulate_timing
from gemsim.config import ScenarioError


def _doc(failures, **extra):
    return {
        "name": "drops",
        "seed": 11,
        "workers": {
            "count": 3,
            "compute": {"dist": "lognormal", "median": 1.0, "sigma": 0.4},
            "failures": failures,
        },
        "budget": {"commits": 3000},
        "optimizer": {"rule": "local", "window": 2},
        **extra,
    }


def flags_of(trace, w):
    """Worker w's push outcomes in order, read from the trace: before each of its commits,
    `dropped` lost pushes, then the one that was committed."""
    out = []
    for d in trace.dropped[trace.worker == w].tolist():
        out += [True] * d + [False]
    return out


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_pushes_are_lost_at_their_rate_by_each_workers_own_draws(p):
    trace = simulate_timing(config.parse_scenario(_doc({"drop_push": p}), "d"))
    lost = int(trace.dropped.sum())
    pushes = lost + len(trace)
    assert abs(lost / pushes - p) < 4 * math.sqrt(p * (1 - p) / pushes)
    for w in range(3):
        flags = flags_of(trace, w)
        draw = timing.drop_draw(11, w, p)
        assert flags == [draw() for _ in flags]


def test_a_lost_push_is_computed_again_from_a_new_pull():
    """A commit after lost pushes took at least one more cycle: its worker's previous commit
    was at least a compute time and a fresh pull earlier, and it pulled after that commit."""
    trace = simulate_timing(config.parse_scenario(_doc({"drop_push": 0.5}), "d"))
    for w in range(3):
        rows = np.flatnonzero(trace.worker == w)
        for a, b in zip(rows[:-1], rows[1:], strict=True):
            if trace.dropped[b]:
                assert trace.pulled_version[b] >= a + 1
                assert trace.time[b] - trace.time[a] > trace.compute_time[b]


def test_no_loss_is_no_failure_at_all():
    plain = simulate_timing(config.parse_scenario(_doc([]), "d"))
    zero = simulate_timing(config.parse_scenario(_doc({"drop_push": 0.0}), "d"))
    assert zero.dropped is None and zero.sha256() == plain.sha256()
    again = simulate_timing(config.parse_scenario(_doc({"drop_push": 0.2}), "d"))
    assert (
        again.sha256()
        == simulate_timing(config.parse_scenario(_doc({"drop_push": 0.2}), "d")).sha256()
    )
    assert again.sha256() != plain.sha256()


def test_crashes_and_lost_pushes_together():
    failures = {"crashes": [{"worker": 1, "at": 50.0, "restart_after": 10.0}], "drop_push": 0.2}
    trace = simulate_timing(config.parse_scenario(_doc(failures), "d"))
    assert trace.dropped.sum() > 0
    assert trace.fresh[trace.worker == 1].sum() == 2  # the restart's new life


@pytest.mark.parametrize(
    ("failures", "extra", "field"),
    [
        ({"drop_push": 1.0}, {}, "drop_push"),
        ({"drop_push": -0.1}, {}, "drop_push"),
        (
            {"drop_push": 0.1},
            {"server": {"protocol": {"name": "ssp", "bound": 1}}},
            "workers.failures.drop_push",
        ),
        (
            {"drop_push": 0.1},
            {"server": {"protocol": {"name": "k_sync", "k": 2}}},
            "workers.failures.drop_push",
        ),
        ({"drop_push": 0.1, "crashes": [{"worker": 5, "at": 1.0}]}, {}, "worker 5"),
    ],
)
def test_bad_lost_pushes_are_refused_naming_the_field(failures, extra, field):
    with pytest.raises(ScenarioError) as err:
        config.parse_scenario(_doc(failures, **extra), "d")
    assert field in str(err.value)


@pytest.mark.parametrize("p", [0.2, 0.6])
def test_under_barrier_rounds_a_lost_push_leaves_the_round(p):
    """Synchronous DiLoCo's robustness study: in each barrier round every worker computes
    once; a lost push leaves its pseudo-gradient out of the round, whose rows are the
    workers whose push got through (their own draws decide, in round order), and every
    worker starts the next round from its version. A round whose pushes were all lost has
    no row."""
    doc = _doc({"drop_push": p}, server={"protocol": "sync"})
    doc["budget"] = {"commits": 300}
    trace = simulate_timing(config.parse_scenario(doc, "d"))
    draws = [timing.drop_draw(11, w, p) for w in range(3)]
    rounds, through = [], []
    ends = np.flatnonzero(trace.round_end)
    starts = np.concatenate([[0], ends[:-1] + 1])
    while sum(len(r) for r in rounds) < len(trace):
        got = [w for w in range(3) if not draws[w]()]
        if got:
            rounds.append(got)
        through.append(len(got))
    got_rows = [sorted(trace.worker[a : b + 1].tolist()) for a, b in zip(starts, ends, strict=True)]
    assert got_rows == rounds[: len(got_rows)]
    # Every loss of these rounds precedes a later commit of its worker (the budget ends
    # in a round that lost none here).
    assert 0 < sum(3 - n for n in through) == int(trace.dropped.sum())
    for a, b in zip(starts, ends, strict=True):  # each round computed on its start's version
        assert set(trace.pulled_version[a : b + 1].tolist()) == {a}


def test_a_population_refuses_lost_pushes():
    doc = _doc({"drop_push": 0.1}, clients={"population": 20, "concurrency": 3})
    with pytest.raises(ScenarioError, match="workers.failures"):
        config.parse_scenario(doc, "d")


def test_each_workers_lost_pushes_are_in_its_summary_row(tmp_path):
    """`worker_summary.parquet`'s `lost_pushes`: the pushes each worker lost before its
    commits, counted here from its own draws (the first `commits` successes and the losses
    among them), not from the trace."""
    import yaml

    from gemsim.app import run_file
    from gemsim.results import load_worker_summary

    doc = _doc({"drop_push": 0.3}, problem={"model": {"name": "quadratic", "dim": 3}})
    doc["budget"] = {"commits": 60}
    path = tmp_path / "drops.yaml"
    path.write_text(yaml.safe_dump(doc))
    run_file(path, out=tmp_path / "out", quiet=True)
    summary = load_worker_summary(tmp_path / "out").sort_values("worker")
    for w, commits, lost in summary[["worker", "commits", "lost_pushes"]].itertuples(index=False):
        draw, seen, want = timing.drop_draw(11, int(w), 0.3), 0, 0
        while seen < commits:
            if draw():
                want += 1
            else:
                seen += 1
        assert lost == want, w
    assert summary["lost_pushes"].sum() > 0 and summary["commits"].sum() == 60
