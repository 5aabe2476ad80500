"""Rules from outside gemsim and optax transformations, named in scenario files.

The rule module is written by the test into its own folder (outside the repository), next
to the scenario that names it by import path; every way of getting it wrong exits 2 naming
the field, before anything runs.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from gemsim.cli import app
from gemsim.config import ScenarioError, load_scenario
from gemsim.results import read_run

REPO = Path(__file__).resolve().parents[2]
RULE_MODULE = '''
import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from gemsim import rules


def scaled(lr, scale=1.0):
    """theta <- theta - lr * scale / (1 + tau) * g"""
    if not lr > 0:
        raise ValueError(f"scaled: lr must be > 0, got {lr!r}")

    def commit(theta, server, ws, work, ctx):
        step = lr * scale / (1.0 + ctx.staleness.astype(jnp.float32))
        update = jax.tree.map(lambda g: -step * g, work.acc)
        info = rules.CommitInfo(otu.tree_norm(update), step / lr)
        return jax.tree.map(jnp.add, theta, update), server, ws, info

    return rules.Rule(name="scaled", init=rules.stateless, commit=commit)


def not_a_rule(lr):
    return lr
'''
SCENARIO = {
    "name": "open",
    "seed": 3,
    "workers": {"count": 3, "compute": {"dist": "exponential", "mean": 0.1}},
    "budget": {"commits": 60},
    "problem": {"model": {"name": "quadratic", "dim": 5, "condition": 4.0}},
    "optimizer": {"rule": {"import": "myrules:scaled"}, "lr": 0.1, "scale": 0.5},
    "eval": {"every": 60},
}


@pytest.fixture
def study(tmp_path) -> Path:
    (tmp_path / "myrules.py").write_text(textwrap.dedent(RULE_MODULE))
    return tmp_path


def _write(folder: Path, doc: dict) -> Path:
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _numpy_loop(trace, h, lr, scale) -> np.ndarray:
    theta, versions = np.ones_like(h), []
    versions.append(theta)
    for k in range(len(trace)):
        x = versions[int(trace.pulled_version[k])]
        step = np.float32(lr * scale / (1.0 + int(trace.staleness[k])))
        theta = (theta - step * (h * x)).astype(np.float32)
        versions.append(theta)
    return theta


def test_a_rule_by_import_path_runs_and_matches_a_numpy_loop(study):
    from gemsim.problems import Quadratic, quadratic_curvature

    result = CliRunner().invoke(
        app, ["run", str(_write(study, SCENARIO)), "--out", str(study / "out"), "--quiet", "--json"]
    )
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run_id"]
    record = read_run(study / "out" / run_id)
    ref = record.manifest["config"]["optimizer"]["rule"]
    assert ref["import"] == "myrules:scaled" and ref["path"] == str(study.resolve())
    assert len(ref["sha256"]) == 64
    h = quadratic_curvature(Quadratic(dim=5, condition=4.0))
    expected = _numpy_loop(record.trace, h, 0.1, 0.5)
    np.testing.assert_allclose(record.params["['theta']"], expected, rtol=1e-6)


def test_changed_rule_code_changes_the_run_identity(study):
    path = _write(study, SCENARIO)
    before = load_scenario(path).optimizer.rule.sha256
    (study / "myrules.py").write_text(textwrap.dedent(RULE_MODULE) + "\n# edited\n")
    after = load_scenario(path).optimizer.rule.sha256
    assert before != after
    from gemsim.config import config_hash

    a = config_hash(load_scenario(path))
    (study / "myrules.py").write_text(textwrap.dedent(RULE_MODULE))
    assert config_hash(load_scenario(path)) != a


BAD = [
    ({"rule": {"import": "nowhere:scaled"}, "lr": 0.1}, "module 'nowhere' not found"),
    ({"rule": {"import": "myrules:missing"}, "lr": 0.1}, "no attribute 'missing'"),
    ({"rule": {"import": "myrules:scaled"}, "lr": 0.1, "scael": 2}, "'scael'"),
    ({"rule": {"import": "myrules:scaled"}}, "'lr'"),
    ({"rule": {"import": "myrules:scaled"}, "lr": -1.0}, "lr must be > 0"),
    ({"rule": {"import": "myrules:not_a_rule"}, "lr": 0.1}, "not a gemsim.rules.Rule"),
    ({"rule": {"import": "my rules"}, "lr": 0.1}, "optimizer.rule.import"),
    ({"rule": "local", "inner": {"name": "adamz"}}, "optax has no transformation 'adamz'"),
    ({"rule": "local", "inner": {"name": "adamw", "learning_rat": 0.1}}, "'learning_rat'"),
    ({"rule": "local", "outer": {"name": "sgd"}}, "'learning_rate'"),
    ({"rule": "nosuchrule", "lr": 0.1}, "optimizer"),
]


@pytest.mark.parametrize(("optimizer", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_rule_blocks_exit_2_naming_the_field(study, optimizer, message):
    path = _write(study, {**SCENARIO, "optimizer": optimizer})
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert message in str(err.value) and "optimizer" in str(err.value)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(study / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert not (study / "out").exists()  # nothing ran


# Each error sits at the field it is about, with the bad value and what is allowed: optax
# values are checked when the scenario is loaded (a traced update on a dummy tree), not at
# the first commit of the run.
AT_FIELD = [
    (
        {"rule": "local", "inner": {"name": "adamw", "learning_rate": "abc"}},
        "optimizer.inner.learning_rate",
        ["optax.adamw needs a finite number", "(got 'abc')"],
    ),
    (
        {"rule": "local", "inner": {"name": "adamw", "learning_rate": 1e-3, "b1": "abc"}},
        "optimizer.inner.b1",
        ["a finite number (default 0.9)", "(got 'abc')"],
    ),
    (
        {"rule": "local", "outer": {"name": "sgd", "learning_rate": 0.7, "momentum": "x"}},
        "optimizer.outer.momentum",
        ["optax.sgd needs a finite number or null", "(got 'x')"],
    ),
    (
        {"rule": "local", "outer": {"name": "sgd", "learning_rate": 0.7, "nesterov": "yes"}},
        "optimizer.outer.nesterov",
        ["true or false", "(got 'yes')"],
    ),
    (
        {"rule": "local", "inner": {"name": "adamw", "learning_rate": 1e-3, "mu_dtype": "foo"}},
        "optimizer.inner.mu_dtype",
        ["data type 'foo' not understood"],
    ),
    (
        {"rule": "local", "inner": {"name": "adamw", "learning_rat": 0.1}},
        "optimizer.inner.learning_rat",
        ["unknown argument 'learning_rat' of optax.adamw, which takes learning_rate, b1"],
    ),
    ({"rule": "local", "inner": {"name": "adamz"}}, "optimizer.inner.name", ["'adamz'"]),
    (
        {"rule": {"import": "myrules:scaled"}, "lr": "abc"},
        "optimizer.lr",
        ["myrules:scaled refused it: TypeError: '>' not supported", "(got 'abc')"],
    ),
    (
        {"rule": {"import": "myrules:scaled"}, "lr": -1.0},
        "optimizer.lr",
        ["lr must be > 0, got -1.0"],
    ),
    (
        {"rule": {"import": "myrules:scaled"}, "lr": 0.1, "scael": 2},
        "optimizer.scael",
        ["unknown argument 'scael' of myrules:scaled, which takes lr, scale"],
    ),
    ({"rule": {"import": "myrules:scaled"}}, "optimizer.lr", ["required argument 'lr'"]),
    (
        {"rule": {"import": "myrules:scaled", "bogus": 1}, "lr": 0.1},
        "optimizer.rule.bogus",
        ["unknown field; allowed here: import, path, sha256"],
    ),
    ({"rule": {"import": "myrules:missing"}, "lr": 0.1}, "optimizer.rule", ["'missing'"]),
    ({"rule": {"import": "myrules:not_a_rule"}, "lr": 0.1}, "optimizer.rule", ["not a gemsim"]),
]


@pytest.mark.parametrize(
    ("optimizer", "field", "fragments"), AT_FIELD, ids=[f for _, f, _ in AT_FIELD]
)
def test_errors_name_the_field_the_value_and_what_is_allowed(study, optimizer, field, fragments):
    path = _write(study, {**SCENARIO, "optimizer": optimizer})
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    problems = err.value.problems
    at_field = [p for p in problems if p.startswith(f"{field}: ")]
    assert len(at_field) == 1, problems
    line = at_field[0]
    assert all(f in line for f in fragments), line
    assert not any("target" in p for p in problems)  # the attribute's name, not the file's


def test_a_bad_optax_value_exits_2_before_anything_runs(study):
    optimizer = {"rule": "local", "inner": {"name": "adamw", "learning_rate": 1e-3, "b1": "abc"}}
    path = _write(study, {**SCENARIO, "optimizer": optimizer})
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(study / "out")])
    assert result.exit_code == 2, result.output
    assert "optimizer.inner.b1" in result.output and "Traceback" not in result.output
    assert not (study / "out").exists()


def test_a_module_that_fails_at_import_is_reported(study):
    (study / "broken.py").write_text("raise RuntimeError('oops at import')\n")
    path = _write(study, {**SCENARIO, "optimizer": {"rule": {"import": "broken:f"}}})
    with pytest.raises(ScenarioError, match="RuntimeError: oops at import"):
        load_scenario(path)


def test_optax_transformations_configure_the_local_rule(study):
    doc = {
        **SCENARIO,
        "optimizer": {
            "rule": "local",
            "window": 3,
            "inner": {"name": "adamw", "learning_rate": 0.01, "weight_decay": 0.01},
            "outer": {"name": "sgd", "learning_rate": 0.5, "momentum": 0.9, "nesterov": True},
        },
    }
    scenario = load_scenario(_write(study, doc))
    assert scenario.optimizer.inner.kwargs == {"learning_rate": 0.01, "weight_decay": 0.01}
    rule = scenario.optimizer.build()
    assert rule.name == "local" and rule.window == 3
    defaults = load_scenario(_write(study, {**SCENARIO, "optimizer": {"rule": "local"}}))
    assert defaults.optimizer.inner.name == "adamw" and defaults.optimizer.window == 8
    assert defaults.optimizer.outer.kwargs == {
        "learning_rate": 0.7,
        "momentum": 0.9,
        "nesterov": True,
    }


def test_the_worked_example_of_docs_rules_md_matches_a_numpy_loop():
    """examples/custom_rule: worker momentum, commits damped by staleness; one worker joins
    late (its velocity starts at zero)."""
    from gemsim.app import run
    from gemsim.problems import Quadratic, quadratic_curvature

    scenario = load_scenario(
        REPO / "examples" / "custom_rule" / "scenario.yaml",
        overrides=["budget.commits=120", "problem.model.noise=0.0"],
    )
    result = run(scenario)
    trace = result.trace
    assert trace.fresh[trace.pulled_version > 0].any()  # the late join is in the trace
    h = quadratic_curvature(Quadratic(dim=16, condition=10.0))
    theta, versions, velocity = np.ones_like(h), [np.ones_like(h)], {}
    for k in range(len(trace)):
        w = int(trace.worker[k])
        if trace.fresh[k]:
            velocity[w] = np.zeros_like(h)
        g = h * versions[int(trace.pulled_version[k])]
        velocity[w] = (np.float32(0.9) * velocity[w] + g).astype(np.float32)
        scale = np.float32(0.05 / (1.0 + int(trace.staleness[k])))
        theta = (theta - scale * velocity[w]).astype(np.float32)
        versions.append(theta)
    np.testing.assert_allclose(result.tree()["theta"], theta, rtol=1e-5, atol=1e-7)
