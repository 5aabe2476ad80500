"""Mutated scenarios through the command line: exit 0, or exit 2 with one message; never a
traceback. The numbers include the extremes a typo produces (0, denormals, 1e308, inf, NaN,
negatives) in every distribution family, in compute, network and service laws, in churn,
slowdowns, group speeds and failures, and mixture weights whose sum overflows."""

from __future__ import annotations

import json
import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_docs import quadratic_doc
from typer.testing import CliRunner

from gemsim.cli import app

FAMILIES = {
    "constant": ("value",),
    "uniform": ("low", "high"),
    "exponential": ("mean",),
    "lognormal": ("median", "sigma"),
    "gamma": ("mean", "shape"),
    "weibull": ("scale", "shape"),
    "pareto": ("scale", "alpha"),
}
EXTREMES = [
    0.0,
    5e-324,
    1e-300,
    1e-9,
    0.002,
    0.08,
    1.0,
    3.0,
    1e6,
    1e15,
    1e300,
    1.7976931348623157e308,
]
EXTREMES += [math.inf, math.nan, -1.0, -1e-300]
number = st.sampled_from(EXTREMES) | st.floats(allow_nan=True, allow_infinity=True)
# Weights near the largest float: two of them overflow a plain sum.
weight = number | st.sampled_from([1e300, 1e308, 1.7976931348623157e308])


@st.composite
def law(draw, depth: int = 0):
    family = draw(
        st.sampled_from([*FAMILIES, "mixture", "empirical"] if depth == 0 else [*FAMILIES])
    )
    if family == "mixture":
        parts = draw(st.lists(law(depth=1), min_size=1, max_size=3))
        return {"dist": "mixture", "components": [{"weight": draw(weight), **p} for p in parts]}
    if family == "empirical":
        return {"dist": "empirical", "samples": draw(st.lists(number, min_size=0, max_size=4))}
    return {"dist": family, **{name: draw(number) for name in FAMILIES[family]}}


@st.composite
def scenario(draw):
    doc = {
        "name": "mutated",
        "seed": draw(st.sampled_from([0, 1, 2**32 - 1, 2**32, -1])),
        "workers": {"count": draw(st.sampled_from([1, 3, 16, 0, -2])), "compute": draw(law())},
        "budget": draw(
            st.sampled_from(
                [{"commits": 200}, {"commits": 0}, {"seconds": 5.0}, {"seconds": 1e300}]
            )
        ),
    }
    if draw(st.booleans()):
        doc["network"] = {"pull": draw(law()), "push": draw(law())}
    if draw(st.booleans()):
        doc["server"] = {"service": draw(law())}
    return doc


def _check(result) -> None:
    assert result.exit_code in (0, 2), (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.output.startswith("error: ")
    else:
        for line in result.stdout.splitlines():
            json.loads(line)  # strict JSON Lines


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=scenario())
def test_trace_of_a_mutated_scenario_exits_0_or_2(doc, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    _check(CliRunner().invoke(app, ["trace", str(path), "--json"]))


@st.composite
def lives(draw):
    """A valid base with mutated churn, slowdowns, groups (speeds, laws) and failures."""
    workers = {"count": 3, "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.25}}
    if draw(st.booleans()):
        workers["churn"] = {"uptime": draw(law()), "downtime": draw(law())}
    if draw(st.booleans()):
        workers["slowdowns"] = {k: draw(law()) for k in ("every", "factor", "duration")}
    if draw(st.booleans()):
        group = {"count": draw(st.sampled_from([1, 2, 4])), "speed": draw(number)}
        if draw(st.booleans()):
            group["compute"] = draw(law())
        workers["groups"] = [group]
    if draw(st.booleans()):
        failure = {"worker": draw(st.sampled_from([0, 2, 3])), "at": draw(number)}
        if draw(st.booleans()):
            failure["restart_after"] = draw(number)
        workers["failures"] = [failure]
    budget = draw(st.sampled_from([{"commits": 200}, {"seconds": 2.0}]))
    return {"name": "lives", "seed": 0, "workers": workers, "budget": budget}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=lives())
def test_trace_of_mutated_worker_lives_exits_0_or_2(doc, tmp_path, monkeypatch):
    # Lower the work limits (commits, churn and slowdown events) to 10^5, so that an example
    # that is accepted simulates for a second at most; what is tested is how it ends.
    monkeypatch.setattr("gemsim.timing._cluster_checks.MAX_COMMITS", 10**5)
    monkeypatch.setattr("gemsim.timing._churn.MAX_EVENTS", 10**5)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    _check(CliRunner().invoke(app, ["trace", str(path), "--json"]))


def test_mixture_weights_whose_sum_overflows_trace_like_equal_weights(tmp_path):
    def trace(weights):
        laws = [{"dist": "constant", "value": 1.0}, {"dist": "exponential", "mean": 1.0}]
        parts = [{"weight": w, **law} for w, law in zip(weights, laws, strict=True)]
        doc = {
            "name": "mix",
            "seed": 0,
            "workers": {"count": 4, "compute": {"dist": "mixture", "components": parts}},
            "budget": {"commits": 200},
        }
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(doc))
        result = CliRunner().invoke(app, ["trace", str(path), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["trace_sha256"]

    assert trace([1e308, 1e308]) == trace([1.0, 1.0])


QUADRATIC = quadratic_doc(name="mutated-run", seed=0, workers=2, commits=20, dim=2, every=10)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lr=number,
    momentum=number,
    rule=st.sampled_from(["gem", "downpour", "staleness", "easgd", "dcasgd", "sync"]),
    compute=law(),
)
def test_run_of_a_mutated_scenario_exits_0_or_2(lr, momentum, rule, compute, tmp_path):
    optimizer = {"rule": rule, "lr": lr}
    if rule in ("gem", "sync"):
        optimizer["momentum"] = momentum
    if rule == "easgd":
        optimizer["alpha"] = 0.5
    doc = {**QUADRATIC, "optimizer": optimizer, "workers": {"count": 2, "compute": compute}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    _check(CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--quiet", "--json"]))
