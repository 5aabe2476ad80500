"""Bad input: every invalid scenario fails before anything runs, with exit code 2 and one
message that names the file, the field path, the bad value and what is allowed."""

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gemsim.cli import app
from gemsim.config import ScenarioError, load_scenario

VALID = {
    "name": "valid",
    "seed": 3,
    "workers": {"count": 4, "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.25}},
    "network": {"pull": {"dist": "constant", "value": 0.001}},
    "server": {"service": {"dist": "exponential", "mean": 0.001}, "discipline": "fifo"},
    "budget": {"commits": 50},
    "optimizer": {"rule": "gem", "lr": 0.05},
}


def with_(path: str, value, base=VALID):
    data = copy.deepcopy(base)
    node = data
    *heads, last = path.split(".")
    for head in heads:
        node = node.setdefault(head, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return data


DELETE = object()
C0 = {"dist": "constant", "value": 5e-324}
C1 = {"dist": "constant", "value": 1.0}

# (case id, document, text that must appear in the message: the field path)
CASES = [
    ("count-string", with_("workers.count", "many"), "workers.count"),
    ("count-zero", with_("workers.count", 0), "workers.count"),
    ("count-negative", with_("workers.count", -3), "workers.count"),
    ("seed-float", with_("seed", 1.5), "seed"),
    ("unknown-dist", with_("workers.compute", {"dist": "cauchy", "scale": 1}), "workers.compute"),
    ("lognormal-neg-median", with_("workers.compute.median", -0.1), "workers.compute.median"),
    ("lognormal-zero-median", with_("workers.compute.median", 0), "workers.compute.median"),
    (
        "exp-zero-mean",
        with_("workers.compute", {"dist": "exponential", "mean": 0}),
        "workers.compute.mean",
    ),
    ("constant-negative", with_("network.pull.value", -1), "network.pull.value"),
    (
        "uniform-reversed",
        with_("workers.compute", {"dist": "uniform", "low": 2, "high": 1}),
        "workers.compute",
    ),
    (
        "pareto-alpha",
        with_("workers.compute", {"dist": "pareto", "scale": 1, "alpha": -2}),
        "workers.compute.alpha",
    ),
    (
        "empirical-empty",
        with_("workers.compute", {"dist": "empirical", "samples": []}),
        "workers.compute",
    ),
    (
        "empirical-missing-file",
        with_("workers.compute", {"dist": "empirical", "file": "nope.txt"}),
        "workers.compute.file",
    ),
    (
        "mixture-bad-weight",
        with_(
            "workers.compute",
            {"dist": "mixture", "components": [{"weight": -1, "dist": "constant", "value": 1}]},
        ),
        "workers.compute.components.0.weight",
    ),
    ("two-budgets", with_("budget", {"commits": 10, "seconds": 5.0}), "budget"),
    ("no-budget", with_("budget", {}), "budget"),
    ("budget-missing", with_("budget", DELETE), "budget"),
    ("unknown-top-field", with_("colour", "blue"), "colour"),
    ("unknown-nested-field", with_("workers.cnt", 3), "workers.cnt"),
    ("discipline", with_("server.discipline", "lifo"), "server.discipline"),
    ("failure-worker", with_("workers.failures", [{"worker": 9, "at": 1.0}]), "workers"),
    (
        "failure-negative-time",
        with_("workers.failures", [{"worker": 1, "at": -1.0}]),
        "workers.failures.0.at",
    ),
    ("group-too-many", with_("workers.groups", [{"count": 9}]), "workers"),
    (
        "failure-before-join",
        with_(
            "workers",
            {
                **VALID["workers"],
                "joins": [{"worker": 1, "at": 5.0}],
                "failures": [{"worker": 1, "at": 2.0}],
            },
        ),
        "workers",
    ),
    (
        "constant-zero-compute",
        with_("workers.compute", {"dist": "constant", "value": 0}),
        "workers",
    ),
    ("speed-zero", with_("workers.groups", [{"count": 1, "speed": 0}]), "workers.groups.0.speed"),
    ("bad-sweep-path", with_("sweep", {"workers.cont": [1, 2]}), "workers.cont"),
    ("bad-sweep-value", with_("sweep", {"workers.count": [2, -1]}), "workers.count"),
    ("sweep-not-list", with_("sweep", {"workers.count": 4}), "sweep.workers.count"),
    ("sweep-of-name", with_("sweep", {"name": ["a", "b"]}), "sweep"),
    ("repeats-zero", with_("repeats", 0), "repeats"),
    ("unknown-rule", with_("optimizer", {"rule": "adamw", "lr": 0.1}), "optimizer"),
    ("negative-lr", with_("optimizer.lr", -0.1), "optimizer.lr"),
    (
        "window-zero",
        with_("optimizer", {"rule": "downpour", "lr": 0.1, "window": 0}),
        "optimizer.window",
    ),
    ("pi-max-zero", with_("optimizer.pi_max", 0), "optimizer.pi_max"),
    (
        "unknown-weight",
        with_("optimizer", {"rule": "staleness", "lr": 0.1, "weight": "cubic"}),
        "optimizer.weight",
    ),
    ("momentum-one", with_("optimizer.momentum", 1.0), "optimizer.momentum"),
    (
        "easgd-alpha-and-rho",
        with_("optimizer", {"rule": "easgd", "lr": 0.1, "alpha": 0.1, "rho": 1.0}),
        "optimizer",
    ),
    ("epochs-without-problem", with_("budget", {"epochs_per_worker": 1.0}), "epochs_per_worker"),
    (
        "unknown-model",
        with_("problem", {"model": "vgg16", "dataset": "mnist-5k"}),
        "problem.model",
    ),
    (
        "unknown-dataset",
        with_("problem", {"model": "cnn", "dataset": "imagenet"}),
        "problem.dataset",
    ),
    (
        "batch-zero",
        with_("problem", {"model": "cnn", "dataset": "mnist-5k", "batch_size": 0}),
        "problem.batch_size",
    ),
    ("eval-every-zero", with_("eval", {"every": 0}), "eval.every"),
    # Type-valid numbers whose work would not end: refused before simulating.
    (
        "group-speed-denormal",
        with_("workers.groups", [{"count": 1, "speed": 5e-324}]),
        "groups[0]: compute LogNormal(median=0.1, sigma=0.25) at speed 5e-324",
    ),
    ("group-speed-huge", with_("workers.groups", [{"count": 2, "speed": 1e308}]), "groups[0]"),
    ("count-beyond-memory", with_("workers.count", 10**8), "at most 1,000,000 workers"),
    (
        "churn-periods-tiny",
        with_("workers.churn", {"uptime": {"dist": "constant", "value": 1e-6}, "downtime": C1}),
        "cannot commit",
    ),
    (
        "slowdowns-of-no-length",
        with_("workers.slowdowns", {"every": C0, "factor": C1, "duration": C0}),
        "churn and slowdowns mean about inf events",
    ),
    (
        "epochs-batch-beyond-the-data",
        with_(
            "budget",
            {"epochs_per_worker": 1.0},
            with_("problem", {"model": "logistic", "dataset": "digits", "batch_size": 2000}),
        ),
        "problem.batch_size: 2000 is larger than the training set of 1438 examples",
    ),
]


def write(tmp_path, doc, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("case,doc,field", CASES, ids=[c[0] for c in CASES])
def test_invalid_scenario_exits_2_naming_the_field(tmp_path, case, doc, field):
    path = write(tmp_path, doc)
    result = CliRunner().invoke(app, ["trace", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert str(path) in result.output
    assert field in result.output


def test_message_names_value_and_what_is_allowed(tmp_path):
    path = write(tmp_path, with_("workers.compute.sigma", -0.5))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert (
        "workers.compute.sigma" in text and "-0.5" in text and "greater than or equal to 0" in text
    )


def test_unknown_field_lists_the_allowed_ones(tmp_path):
    path = write(tmp_path, with_("network.latency", 3))
    with pytest.raises(
        ScenarioError,
        match=r"network\.latency: unknown field; allowed here: "
        r"bandwidth_bytes_per_s, pull, push",
    ):
        load_scenario(path)


@pytest.mark.parametrize(
    "text",
    ["workers: [unclosed", "name: a\n  seed: : 2", "- just\n- a list", "42", "{a: 1, a: 2"],
)
def test_malformed_yaml_exits_2(tmp_path, text):
    path = write(tmp_path, text)
    result = CliRunner().invoke(app, ["trace", str(path)])
    assert result.exit_code == 2
    assert str(path) in result.output and "Traceback" not in result.output


def test_malformed_toml_exits_2(tmp_path):
    path = write(tmp_path, "name = 'x'\nseed = [", name="bad.toml")
    result = CliRunner().invoke(app, ["trace", str(path)])
    assert result.exit_code == 2 and "malformed TOML" in result.output


def test_missing_file_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["trace", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "cannot read file" in result.output


@pytest.mark.parametrize(
    "override,field",
    [
        ("workers.count=zero", "workers.count"),
        ("workers.colour=1", "workers.colour"),
        ("seed", "seed"),
        ("budget.commits=-5", "budget.commits"),
        ("=3", "path=value"),
    ],
)
def test_bad_override_exits_2(tmp_path, override, field):
    path = write(tmp_path, VALID, name="ok.yaml")
    result = CliRunner().invoke(app, ["trace", str(path), "--set", override])
    assert result.exit_code == 2, result.output
    assert field in result.output and "Traceback" not in result.output


# --- property: mutate valid scenarios; either valid, or a ScenarioError — never anything else

PATHS = [
    "seed",
    "workers.count",
    "workers.compute",
    "workers.compute.sigma",
    "workers.compute.dist",
    "network.pull",
    "network.pull.value",
    "server.discipline",
    "server.service",
    "budget",
    "budget.commits",
    "optimizer",
    "optimizer.lr",
    "optimizer.rule",
    "optimizer.pi_max",
    "repeats",
    "sweep",
    "name",
    "workers.groups",
    "workers.failures",
]
JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 10**6)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    mutations=st.lists(
        st.tuples(st.sampled_from(PATHS), JUNK | st.just(DELETE)), min_size=1, max_size=3
    )
)
def test_mutated_scenarios_are_valid_or_rejected_cleanly(tmp_path, mutations):
    doc = VALID
    for path, value in mutations:
        try:
            doc = with_(path, value, base=doc)
        except (AttributeError, TypeError):
            return  # the mutation walked into a scalar: not a document we can build
    path = write(tmp_path, doc)
    try:
        load_scenario(path)
    except ScenarioError as exc:
        assert str(path) in str(exc) and exc.problems


def test_cli_never_tracebacks_on_mutations(tmp_path):
    runner = CliRunner()
    for doc in (
        with_("workers.compute", [1, 2]),
        with_("budget", "lots"),
        with_("sweep", [1]),
        with_("optimizer", "gem"),
        with_("workers", {"count": {"n": 1}}),
    ):
        result = runner.invoke(app, ["trace", str(write(tmp_path, doc))])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
