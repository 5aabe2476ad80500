"""A `--set` of a budget's unit replaces the budget; a population's explicit `eval.clients`
cannot exceed it; cross-field errors name their fields without dumping the document."""

from pathlib import Path

import pytest

from gemsim.config import ScenarioError, apply_overrides, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
POPULATION = ROOT / "scenarios" / "population" / "fedbuff.yaml"


@pytest.mark.parametrize(
    "override,unit",
    [("budget.commits=500", "commits"), ("budget.seconds=30", "seconds"),
     ("budget.epochs_per_worker=2", "epochs_per_worker")],
)  # fmt: skip
def test_setting_a_budget_unit_replaces_the_budget(override, unit):
    base = ROOT / "scenarios" / "quickstart.yaml"  # budget: {commits: 1024}
    scenario = load_scenario(base, overrides=[override, "sweep={}"])
    given = {k for k in ("commits", "epochs_per_worker", "seconds")
             if getattr(scenario.budget, k) is not None}  # fmt: skip
    assert given == {unit}
    assert apply_overrides({"budget": {"seconds": 5}}, ["budget.commits=9"]) == {
        "budget": {"commits": 9}
    }


def test_a_population_evaluates_at_most_its_clients():
    with pytest.raises(ScenarioError) as err:
        load_scenario(POPULATION, overrides=["eval.clients=20000", "sweep={}"])
    (message,) = err.value.problems
    assert message == (
        "eval.clients: 20000 exceeds the population's 10000 clients (clients.population); "
        "allowed: 1 to 10000"
    )
    assert load_scenario(POPULATION, overrides=["eval.clients=10000", "sweep={}"])


def test_cross_field_errors_do_not_dump_the_document():
    with pytest.raises(ScenarioError) as err:
        load_scenario(POPULATION, overrides=["workers.count=7", "sweep={}"])
    (message,) = err.value.problems
    assert message.startswith("workers.count (7) is the number of slots")
    assert "{'name'" not in message and "(top level)" not in message
    with pytest.raises(ScenarioError) as err:
        workers = {"count": 2, "compute": {"dist": "constant", "value": 1.0}}
        doc = {"name": "x", "seed": 0, "workers": workers, "budget": {"commits": 3}}
        parse_scenario({**doc, "seeds": [1], "repeats": 2}, "x.yaml")
    (message,) = err.value.problems
    assert message == "(top level): give `repeats` or `seeds`, not both"
