"""Speed-data correlation as scenario fields: `order: {by_speed: rho}` on a partition and
`clients.groups` (shares of a population with their own speed law and classes).

The clients' speeds per group against the documented draw formula, the classes each group
holds, the timing model using the groups' speeds, rho = 1 against the string `by_speed`,
identities of scenarios that use neither, the achieved rank correlation as `gemsim trace`
and `gemsim show` give it, and bad input refused before any run (exit 2, naming the field).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import yaml
from scenario_docs import write_doc
from scipy import stats
from typer.testing import CliRunner

from gemsim import config, problems, timing
from gemsim.app import show_file, trace_scenario
from gemsim.cli import app
from gemsim.config import ScenarioError, parse_scenario
from gemsim.timing._calendar import SPEED_CHUNK, stream_key
from gemsim.timing._distributions import LogNormal, Uniform
from gemsim.timing._draws import CLIENT_SPEED

N = 200
LOGNORMAL = {"dist": "lognormal", "median": 1.0, "sigma": 0.5}
POPULATION = {
    "name": "groups",
    "seed": 5,
    "workers": {"compute": {"dist": "constant", "value": 1.0}},
    "clients": {
        "population": N,
        "concurrency": 10,
        "speed": LOGNORMAL,
        "groups": [
            {
                "fraction": 0.25,
                "speed": {"dist": "constant", "value": 0.1},
                "data": {"classes": [0, 1]},
            },
            {"fraction": 0.15, "speed": {"dist": "uniform", "low": 2.0, "high": 3.0}},
        ],
    },
    "budget": {"seconds": 60},
    "problem": {
        "model": "logistic",
        "dataset": {"name": "synthetic", "n_train": 4000, "n_test": 200, "dim": 4, "classes": 5},
        "batch_size": 4,
        "partition": "iid",
    },
    "optimizer": {"rule": "fedbuff", "lr": 0.05, "window": 1, "buffer": 4, "server_lr": 1.0},
    "eval": {"every": 100, "clients": 20},
}
WORKERS = {
    "name": "ordered",
    "seed": 2,
    "workers": {
        "count": 12,
        "compute": {"dist": "exponential", "mean": 0.1},
        "groups": [
            {"count": 4, "speed": 0.2},
            {"count": 3, "speed": 0.5},
            {"count": 2, "speed": 3.0},
        ],
    },
    "budget": {"commits": 30},
    "problem": {
        "model": "logistic",
        "dataset": {"name": "synthetic", "n_train": 1200, "n_test": 100, "dim": 4, "classes": 5},
        "batch_size": 8,
        "partition": {"name": "dirichlet", "alpha": 0.5, "min_size": 16, "order": "by_speed"},
    },
    "optimizer": {"rule": "downpour", "lr": 0.1},
}


def _doc(base: dict, path: str, value) -> dict:
    doc = copy.deepcopy(base)
    *heads, last = path.split(".")
    node = doc
    for head in heads:
        node = node[int(head)] if isinstance(node, list) else node[head]
    node[last] = value
    return doc


def _documented_speeds(law, seed: int, n: int) -> np.ndarray:
    """The speed draws as the timing docs define them: chunk j of SPEED_CHUNK ids is
    ``law.sample(Generator(Philox(key=K_0 << 64 | j)), SPEED_CHUNK)``."""
    high = stream_key(seed, CLIENT_SPEED) << 64
    chunks = [
        law.sample(np.random.Generator(np.random.Philox(key=high | j)), SPEED_CHUNK)
        for j in range(-(-n // SPEED_CHUNK))
    ]
    return np.concatenate(chunks)[:n]


# ----------------------------------------------------------------------------- population groups


def test_each_group_takes_its_ids_and_its_speed_law():
    """Group 0: clients 0-49, speed 0.1; group 1: 50-79, Uniform(2, 3) draws at their ids;
    the rest, 80-199: the population's lognormal, the very draws without groups."""
    scenario = parse_scenario(POPULATION, "groups")
    assert scenario.clients.group_ranges() == [(0, 50), (50, 30)]
    speeds = timing.client_speeds(scenario.clients.build(check_only=True), scenario.seed)
    np.testing.assert_array_equal(speeds[:50], np.full(50, 0.1))
    uniform = _documented_speeds(Uniform(2.0, 3.0), scenario.seed, N)
    np.testing.assert_array_equal(speeds[50:80], uniform[50:80])
    assert ((speeds[50:80] >= 2.0) & (speeds[50:80] <= 3.0)).all()
    lognormal = _documented_speeds(LogNormal(1.0, 0.5), scenario.seed, N)
    np.testing.assert_array_equal(speeds[80:], lognormal[80:])
    plain = parse_scenario(_doc(POPULATION, "clients.groups", []), "plain")
    np.testing.assert_array_equal(
        timing.client_speeds(plain.clients.build(check_only=True), plain.seed), lognormal
    )


def test_speeds_of_a_large_population_cross_chunks_per_group():
    """Group bounds inside a chunk of draws: each client's speed is its law's draw at its id."""
    n = 3 * SPEED_CHUNK + 17
    doc = _doc(POPULATION, "clients.population", n)
    doc["clients"]["groups"] = [
        {"fraction": 0.3, "speed": {"dist": "uniform", "low": 2, "high": 3}}
    ]
    scenario = parse_scenario(doc, "big")
    ((first, count),) = scenario.clients.group_ranges()
    assert (first, count) == (0, round(0.3 * n))
    speeds = timing.client_speeds(scenario.clients.build(check_only=True), scenario.seed)
    np.testing.assert_array_equal(speeds[:count], _documented_speeds(Uniform(2, 3), 5, n)[:count])
    np.testing.assert_array_equal(
        speeds[count:], _documented_speeds(LogNormal(1, 0.5), 5, n)[count:]
    )


@pytest.mark.parametrize(
    "partition",
    ["iid", {"name": "inner_dirichlet", "alpha": 0.5, "samples": 12}],
    ids=["iid", "samples"],
)
def test_a_group_alone_holds_its_classes(partition):
    """Clients 0-49 hold classes 0 and 1 only (with `iid`: every example of them, split
    evenly); the other clients none of them."""
    scenario = parse_scenario(_doc(POPULATION, "problem.partition", partition), "classes")
    shards, labels, n_classes = config.scenario_shards(scenario)
    held = [labels[shards.shard(c)] for c in range(N)]
    assert all(np.isin(h, [0, 1]).all() for h in held[:50])
    assert not any(np.isin(h, [0, 1]).any() for h in held[50:])
    if partition == "iid":
        group = np.concatenate([shards.shard(c) for c in range(50)])
        np.testing.assert_array_equal(np.sort(group), np.flatnonzero(np.isin(labels, [0, 1])))
        assert np.ptp(shards.sizes[:50]) <= 1
    else:
        assert (shards.sizes == 12).all()


@pytest.mark.parametrize("own_law", [True, False], ids=["population-law", "groups-only"])
def test_the_timing_model_runs_the_groups_speeds(own_law):
    """Compute is the slot's constant 1 s over the client's speed: 10 s for group 0's
    clients; also where only a group has a speed law (the others then run at speed 1)."""
    doc = copy.deepcopy(POPULATION)
    if not own_law:
        del doc["clients"]["speed"]
    scenario = parse_scenario(doc, "timing")
    simulation = timing.simulate_run(config.build_cluster(scenario), scenario.seed)
    trace, speeds = simulation.trace, simulation.clients.speed
    np.testing.assert_array_equal(speeds[:50], 0.1)
    np.testing.assert_allclose(trace.compute_time, 1.0 / speeds[trace.client], rtol=1e-12)
    assert np.isin(trace.client, np.arange(50)).any()
    if not own_law:
        np.testing.assert_array_equal(speeds[80:], 1.0)


def test_a_population_without_groups_resolves_as_before():
    doc = _doc(POPULATION, "clients.groups", [])
    scenario = parse_scenario(doc, "plain")
    without = copy.deepcopy(doc)
    del without["clients"]["groups"]
    assert "groups" not in scenario.model_dump(mode="json")["clients"]
    assert config.config_hash(scenario) == config.config_hash(parse_scenario(without, "plain"))
    assert scenario.clients.build(check_only=True).groups == ()


# ----------------------------------------------------------------------------- order rho


def test_rho_one_gives_the_string_orders_shards():
    """Persistent workers (disjoint Dirichlet shards) and a population with a group holding
    classes (label mixes drawn with replacement by the others)."""
    sampled = {"name": "inner_dirichlet", "alpha": 0.5, "samples": 12, "order": "by_speed"}
    for doc in (WORKERS, _doc(POPULATION, "problem.partition", sampled)):
        string = config.scenario_shards(parse_scenario(doc, "s"))[0]
        one = _doc(doc, "problem.partition.order", {"by_speed": 1})
        rho = config.scenario_shards(parse_scenario(one, "r"))[0]
        np.testing.assert_array_equal(rho.indices, string.indices)
        np.testing.assert_array_equal(rho.offsets, string.offsets)
        drawn = _doc(doc, "problem.partition.order", "drawn")
        assert not np.array_equal(
            config.scenario_shards(parse_scenario(drawn, "d"))[0].indices, rho.indices
        )


def test_the_string_order_keeps_its_identity_and_rho_round_trips():
    string = parse_scenario(WORKERS, "s")
    assert string.model_dump(mode="json")["problem"]["partition"]["order"] == "by_speed"
    order = string.problem.partition.spec().order
    assert order == "by_speed" and not isinstance(order, problems.BySpeed)
    rho = parse_scenario(_doc(WORKERS, "problem.partition.order", {"by_speed": 1}), "r")
    dumped = rho.model_dump(mode="json")
    assert dumped["problem"]["partition"]["order"] == {"by_speed": 1.0}
    assert parse_scenario(dumped, "again") == rho
    assert config.config_hash(rho) != config.config_hash(string)
    assert rho.problem.partition.spec().order == problems.BySpeed(1.0)


def test_a_sweep_over_rho_expands_to_one_run_each():
    doc = _doc(WORKERS, "problem.partition.order", {"by_speed": 0.0})
    doc["sweep"] = {"problem.partition.order.by_speed": [-1.0, 0.0, 0.5, 1.0]}
    runs = config.expand(parse_scenario(doc, "sweep"))
    assert [r.scenario.problem.partition.order.by_speed for r in runs] == [-1.0, 0.0, 0.5, 1.0]
    assert len({r.config_hash for r in runs}) == 4


# ----------------------------------------------------------------------------- trace and show


def test_trace_and_show_give_the_achieved_rank_correlation(tmp_path):
    """300 clients drawing 30 examples with their own label mix, tied to their lognormal
    speeds at rho 0.6: the figures `show` gives are those the partition's own numbers give
    (scipy's Spearman of slowness and label skew), `trace` prints them, and the achieved
    value lies within Z standard errors of the copula's (6/pi) asin(rho/2)."""
    doc = copy.deepcopy(POPULATION)
    doc["clients"] = {**doc["clients"], "population": 300, "groups": []}
    doc["problem"]["partition"] = {
        "name": "inner_dirichlet", "alpha": 0.5, "samples": 30, "order": {"by_speed": 0.6},
    }  # fmt: skip
    path = write_doc(tmp_path, doc)
    (shown,) = show_file(path)["runs"]
    figures = shown["speed_data"]
    scenario = parse_scenario(doc, "rho")
    shards, labels, n_classes = config.scenario_shards(scenario)
    skew = problems.describe(shards, labels, n_classes).distance
    slowness = np.asarray(config.owner_slowness(scenario))
    expected = stats.spearmanr(slowness, skew).statistic
    assert figures["spearman"] == pytest.approx(expected, abs=1e-12)
    assert figures["ranked_spearman"] == pytest.approx(expected, abs=1e-12)
    assert (figures["quantity"], figures["owners"], figures["rho"]) == ("label skew", 300, 0.6)
    assert figures["target"] == pytest.approx(6 / math.pi * math.asin(0.3))
    z = float(stats.norm.isf(1e-6 / 2))
    assert abs(figures["ranked_spearman"] - figures["target"]) < z / math.sqrt(299)
    (report,) = trace_scenario(path)
    assert report["partition"] == shown["partition"]
    assert f"speed-data rank correlation {figures['spearman']:.3f}" in report["partition"]
    assert "order by_speed, rho 0.6: the copula's (6/pi) asin(rho/2) = 0." in report["partition"]
    result = CliRunner().invoke(app, ["show", str(path)])
    assert (
        result.exit_code == 0 and f"(6/pi) asin(rho/2) = {figures['target']:.3f}" in result.output
    )


def test_every_worker_as_slow_gives_no_correlation_line(tmp_path):
    doc = copy.deepcopy(WORKERS)
    doc["workers"] = {"count": 6, "compute": {"dist": "exponential", "mean": 0.1}}
    doc["problem"]["partition"] = {"name": "dirichlet", "alpha": 0.5, "min_size": 16}
    (shown,) = show_file(write_doc(tmp_path, doc))["runs"]
    assert "speed_data" not in shown and "speed-data" not in shown["partition"]


# ----------------------------------------------------------------------------- bad input

GROUP = {"fraction": 0.25, "speed": {"dist": "constant", "value": 0.1}, "data": {"classes": [0]}}
ORDER, GROUPS = "problem.partition.order", "clients.groups"
NO_ZERO = {"dist": "uniform", "low": 0, "high": 1}
# (case, field set, its bad value, what the message names, the value it shows)
BAD = [
    ("rho-above-one", ORDER, {"by_speed": 1.5}, ORDER, "1.5"),
    ("rho-below-minus-one", ORDER, {"by_speed": -2}, ORDER, "-2"),
    ("rho-string", ORDER, {"by_speed": "0.5"}, ORDER, "'0.5'"),
    ("rho-bool", ORDER, {"by_speed": True}, ORDER, "True"),
    ("rho-nan", ORDER, {"by_speed": float("nan")}, ORDER, "nan"),
    ("rho-extra-key", ORDER, {"by_speed": 0.5, "rho": 1}, ORDER, "'rho': 1"),
    ("order-unknown", ORDER, "fastest", ORDER, "fastest"),
    ("fractions-above-one", GROUPS, [GROUP, {"fraction": 0.9}], GROUPS, "sum to 1.15"),
    ("fraction-zero", GROUPS, [{"fraction": 0}], "clients.groups.0.fraction", "0"),
    ("fraction-negative", GROUPS, [{"fraction": -0.2}], "clients.groups.0.fraction", "-0.2"),
    ("fraction-string", GROUPS, [{"fraction": "0.2"}], "clients.groups.0.fraction", "'0.2'"),
    ("fraction-above-one", GROUPS, [{"fraction": 1.5}], "clients.groups.0.fraction", "1.5"),
    ("fraction-no-client", GROUPS, [GROUP, {"fraction": 0.001}], "groups[1].fraction", "0.001"),
    ("group-speed-zero", GROUPS, [{"fraction": 0.1, "speed": NO_ZERO}], "groups.0.speed", "draw 0"),
    ("group-unknown-field", GROUPS, [{"fraction": 0.1, "count": 3}], "groups.0.count", "unknown"),
    ("slot-groups", "workers.groups", [{"count": 1}], "workers.groups", "clients.groups"),
    (
        "group-class-absent",
        GROUPS,
        [{"fraction": 0.1, "data": {"classes": [7]}}],
        "clients.groups[0].data.classes",
        "7",
    ),
    (
        "groups-share-a-class",
        GROUPS,
        [GROUP, {"fraction": 0.1, "data": {"classes": [0]}}],
        "clients.groups[1].data.classes",
        "class 0",
    ),
]


@pytest.mark.parametrize(("case", "path", "bad", "field", "value"), BAD, ids=[c[0] for c in BAD])
def test_bad_speed_data_fields_exit_2_naming_the_field(tmp_path, case, path, bad, field, value):
    doc = _doc(POPULATION if path != ORDER else WORKERS, path, bad)
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["trace", str(file)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and str(file) in result.output
    assert field in result.output and value in result.output, result.output


def test_the_loader_refuses_what_the_cli_does():
    with pytest.raises(ScenarioError, match=r"problem\.partition\.order: by_speed: rho must be"):
        parse_scenario(_doc(WORKERS, "problem.partition.order", {"by_speed": 1.01}), "bad")
    with pytest.raises(ScenarioError, match=r"clients\.groups: the groups' fraction fields sum"):
        parse_scenario(
            _doc(POPULATION, "clients.groups", [GROUP, GROUP, GROUP, GROUP, GROUP]), "bad"
        )
