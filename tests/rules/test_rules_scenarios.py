"""Rules from scenario files: their blocks take the rules' parameter names, each
resolved config validates again and builds the same rule (what a real run's workers do),
the bundled scenarios under scenarios/rules/ name every rule, and a run's diagnostics are
columns of `load_results`."""

from pathlib import Path

import jax
import numpy as np
import pytest
import yaml

from gemsim import rules
from gemsim.app import run_file
from gemsim.config import Scenario, ScenarioError, build_rule, expand, load_scenario
from gemsim.config import resolved_config as resolved
from gemsim.results import load_results, load_summary

ROOT = Path(__file__).resolve().parents[2]
# The rules with a scenario of their own under scenarios/rules/, each reproducing its paper.
REPRODUCED = (
    "delay_adaptive",
    "ringmaster",
    "rennala",
    "fedbuff",
    "fedasync",
    "server_momentum",
    "gap_aware",
    "eamsgd",
    "local",
)

BLOCKS = [
    {"rule": "delay_adaptive", "lr": 0.1, "tau_c": 3.0},
    {"rule": "ringmaster", "lr": 0.1, "threshold": 3},
    {"rule": "rennala", "lr": 0.1, "batch": 5},
    {"rule": "fedbuff", "lr": 0.1, "window": 3, "buffer": 4, "server_lr": 0.5},
    {"rule": "fedasync", "lr": 0.1, "window": 2, "alpha": 0.5, "rho": 0.01, "weight": "constant"},
    {"rule": "fedasync", "lr": 0.1, "weight": {"kind": "hinge", "a": 10, "b": 4}},
    {"rule": "server_momentum", "lr": 0.1, "momentum": 0.8, "implicit_correction": True},
    {"rule": "gap_aware", "lr": 0.1},
    {"rule": "gap_aware", "lr": 0.1, "momentum": 0.9, "ema": 0.99},
    {"rule": "eamsgd", "lr": 0.1, "alpha": 0.2, "window": 4, "momentum": 0.99},
    {"rule": "eamsgd", "lr": 0.1, "rho": 2.0},
    {"rule": "local", "lr": 0.01, "window": 4},
    {"rule": "local", "inner": {"name": "sgd", "learning_rate": 0.1},
     "outer": {"name": "sgd", "learning_rate": 1.0}},
]  # fmt: skip
DEFAULT_WINDOW = {"fedbuff": 8, "fedasync": 8, "eamsgd": 10, "local": 8}


def scenario(optimizer: dict, **extra) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "rules",
            "seed": 1,
            "workers": {"count": 3, "compute": {"dist": "exponential", "mean": 0.1}},
            "budget": {"commits": 60},
            "problem": {"model": {"name": "quadratic", "dim": 4, "noise": 0.1}},
            "optimizer": optimizer,
            "eval": {"every": 30},
            **extra,
        }
    )


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b['rule']}-{i}" for i, b in enumerate(BLOCKS)])
def test_block_round_trips_and_builds_its_rule(block):
    first = scenario(block)
    again = Scenario.model_validate(resolved(first))
    assert again.optimizer == first.optimizer
    rule = build_rule(again)
    assert isinstance(rule, rules.Rule) and rule.name == block["rule"]
    assert rule.window == block.get("window", DEFAULT_WINDOW.get(block["rule"], 1))


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"rule": "ringmaster", "lr": 0.1, "threshold": 0}, "threshold"),
        ({"rule": "rennala", "lr": 0.1, "batch": 1.5}, "batch"),
        ({"rule": "fedbuff", "lr": 0.1, "buffer": 0}, "buffer"),
        ({"rule": "fedasync", "lr": 0.1, "alpha": 1.5}, "alpha"),
        ({"rule": "fedasync", "lr": 0.1, "rho": -1}, "rho"),
        ({"rule": "server_momentum", "lr": 0.1, "momentum": 1.0}, "momentum"),
        ({"rule": "delay_adaptive", "lr": 0.1, "tau_c": 0}, "tau_c"),
        ({"rule": "eamsgd", "lr": 0.1}, "alpha"),
        ({"rule": "local", "lr": 0.1, "inner": {"name": "adamw", "learning_rate": 0.2}}, "lr"),
        ({"rule": "gap_aware", "lr": 0.1, "window": 2}, "window"),
        ({"rule": "gap_aware", "lr": 0.1, "ema": 1.0}, "ema"),
    ],
)
def test_bad_block_is_refused_naming_the_field(block, field):
    with pytest.raises(ValueError, match=field):
        scenario(block)


def test_rule_factories_refuse_bad_values_naming_them():
    for factory, kwargs, name in [
        (rules.delay_adaptive, dict(lr=0.1, tau_c=-1.0), "tau_c"),
        (rules.ringmaster, dict(lr=0.1, threshold=0), "threshold"),
        (rules.rennala, dict(lr=0.1, batch=0), "batch"),
        (rules.fedbuff, dict(lr=0.1, server_lr=0.0), "server_lr"),
        (rules.fedasync, dict(lr=0.1, weight="poly"), "weight"),
        (rules.server_momentum, dict(lr=0.1, implicit_correction="yes"), "implicit_correction"),
        (rules.gap_aware, dict(lr=0.1, momentum=1.0), "momentum"),
        (rules.gap_aware, dict(lr=0.1, ema=-0.5), "ema"),
        (rules.eamsgd, dict(lr=0.1, alpha=0.0), "alpha"),
        (rules.local, dict(lr=0.1, inner=rules.sync(0.1)), "lr"),
    ]:
        with pytest.raises(ValueError, match=name):
            factory(**kwargs)


def test_every_reproduced_rule_has_a_scenario_and_a_place_in_the_comparison():
    for name in REPRODUCED:
        runs = expand(load_scenario(ROOT / "scenarios" / "rules" / f"{name}.yaml"))
        assert name in {r.scenario.optimizer.rule for r in runs}
    compared = expand(load_scenario(ROOT / "scenarios" / "rules" / "compare.yaml"))
    assert set(REPRODUCED) <= {r.scenario.optimizer.rule for r in compared}


def test_unknown_rule_is_a_scenario_error_listing_the_rules(tmp_path):
    path = tmp_path / "bad.yaml"
    config = resolved(scenario({"rule": "gap_aware", "lr": 0.1}))
    config["optimizer"] = {"rule": "gap-aware", "lr": 0.1}
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "gap_aware" in str(err.value) and "optimizer" in str(err.value)


def test_diagnostics_are_load_results_columns(tmp_path):
    base = scenario({"rule": "fedbuff", "lr": 0.05, "window": 2, "buffer": 2})
    config = resolved(base)
    config["sweep"] = {
        "optimizer": [
            {"rule": "fedbuff", "lr": 0.05, "window": 2, "buffer": 2},
            {"rule": "gap_aware", "lr": 0.05},
        ]
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(config))
    # The engine packs int32 worker state (fedbuff's timestamps) into float32 rows, a
    # promotion this folder's strict-numerics fixture forbids; runs use the standard rules.
    with jax.numpy_dtype_promotion("standard"):
        run_file(path, out=tmp_path / "out", quiet=True)
    statuses = load_summary(tmp_path / "out")["status"]
    assert list(statuses) == ["ok", "ok"]
    frame = load_results(tmp_path / "out")
    assert {"delay", "gap_max", "frac_penalized", "update_norm", "weight"} <= set(frame.columns)
    by_rule = dict(list(frame.groupby("optimizer.rule")))
    assert by_rule["fedbuff"]["delay"].notna().all() and by_rule["gap_aware"]["delay"].isna().all()
    assert np.all(by_rule["gap_aware"]["gap_max"] >= 1.0)
