"""`server.protocol`, churn, availability, slowdowns and the shared link in scenario files:
shorthands, defaults, which rules accept which protocols, and errors (exit code 2)."""

import copy
import hashlib
import json
import math
import typing
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from gemsim import timing
from gemsim.cli import app
from gemsim.config import (
    ScenarioError,
    build_cluster,
    config_hash,
    expand,
    load_scenario,
    resolved_config,
    scenario_json_schema,
    validate,
)
from gemsim.config._loader import set_path
from gemsim.config._optimizer import IMPORT_TAG, Optimizer
from gemsim.config._protocol_blocks import ROUND_RULES

BASE = {
    "name": "protocols",
    "seed": 1,
    "workers": {"count": 4, "compute": {"dist": "exponential", "mean": 0.1}},
    "budget": {"commits": 50},
}
PER_COMMIT_RULES = {
    "gem": {"rule": "gem", "lr": 0.1},
    "downpour": {"rule": "downpour", "lr": 0.1},
    "staleness": {"rule": "staleness", "lr": 0.1},
    "softsync": {"rule": "softsync", "lr": 0.1},
    "agn": {"rule": "agn", "lr": 0.1},
    "easgd": {"rule": "easgd", "lr": 0.1, "alpha": 0.5},
    "dcasgd": {"rule": "dcasgd", "lr": 0.1},
    "delay_adaptive": {"rule": "delay_adaptive", "lr": 0.1},
    "ringmaster": {"rule": "ringmaster", "lr": 0.1},
    "rennala": {"rule": "rennala", "lr": 0.1},
    "malenia": {"rule": "malenia", "lr": 0.1},
    "fedbuff": {"rule": "fedbuff", "lr": 0.1},
    "fadas": {"rule": "fadas", "lr": 0.1, "server_lr": 0.01},
    "ca2fl": {"rule": "ca2fl", "lr": 0.1},
    "mifa": {"rule": "mifa", "lr": 0.1},
    "fedasync": {"rule": "fedasync", "lr": 0.1},
    "server_momentum": {"rule": "server_momentum", "lr": 0.1},
    "gap_aware": {"rule": "gap_aware", "lr": 0.1},
    "eamsgd": {"rule": "eamsgd", "lr": 0.1, "alpha": 0.5},
}
ROUND_RULE_BLOCKS = {"sync": {"rule": "sync", "lr": 0.1}, "local": {"rule": "local"}}
# Rules whose scheduler is the scenario's protocol (`server.protocol` left out, or async).
OWN_SCHEDULER_RULES = {"fedcompass": {"rule": "fedcompass", "lr": 0.1, "window": 5}}


def scenario(**blocks):
    data = copy.deepcopy(BASE)
    for key, value in blocks.items():
        head, _, tail = key.partition("__")
        if tail:
            data.setdefault(head, {})[tail] = value
        else:
            data[head] = value
    return validate(data, "test.yaml")


def protocol_of(**blocks):
    return build_cluster(scenario(**blocks), sizes=(1, 0)).protocol


@pytest.mark.parametrize(
    "given,expected",
    [
        ("async", timing.Async()),
        ("sync", timing.Sync()),
        ({"name": "ssp", "bound": 2}, timing.Ssp(2)),
        ({"name": "ssp", "bound": math.inf}, timing.Ssp(math.inf)),
        ({"name": "ssp", "bound": "inf"}, timing.Ssp(math.inf)),
        ({"name": "k_sync", "k": 3}, timing.KSync(3)),
        ({"name": "k_async", "k": 4}, timing.KAsync(4)),
        ({"name": "grace", "seconds": 0.5}, timing.Grace(0.5)),
        ({"name": "grace", "seconds": 0}, timing.Async()),  # no window: async itself
    ],
)
def test_protocol_block_and_bare_name_shorthand(given, expected):
    rule = ROUND_RULE_BLOCKS["sync"]
    assert protocol_of(server={"protocol": given}, optimizer=rule) == expected


def test_default_protocol_is_async_and_sync_for_the_sync_rule():
    assert protocol_of() == timing.Async()
    assert protocol_of(optimizer=PER_COMMIT_RULES["gem"]) == timing.Async()
    assert protocol_of(optimizer=ROUND_RULE_BLOCKS["local"]) == timing.Async()
    assert protocol_of(optimizer=ROUND_RULE_BLOCKS["sync"]) == timing.Sync()
    explicit = protocol_of(optimizer=ROUND_RULE_BLOCKS["sync"], server={"protocol": "async"})
    assert explicit == timing.Async()


MULTI = [
    {"name": "sync"},
    {"name": "k_sync", "k": 2},
    {"name": "k_async", "k": 3},
    {"name": "grace", "seconds": 0.5},
]
SINGLE = [{"name": "async"}, {"name": "ssp", "bound": 1}, {"name": "k_sync", "k": 1}]


@pytest.mark.parametrize("rule", sorted(PER_COMMIT_RULES))
def test_rules_that_apply_each_commit_need_rounds_of_one_commit(rule):
    for protocol in SINGLE:
        scenario(optimizer=PER_COMMIT_RULES[rule], server={"protocol": protocol})
    for protocol in MULTI:
        with pytest.raises(ScenarioError, match=rf"server.protocol: rule '{rule}' applies each"):
            scenario(optimizer=PER_COMMIT_RULES[rule], server={"protocol": protocol})


@pytest.mark.parametrize("rule", sorted(ROUND_RULE_BLOCKS))
def test_rules_that_update_by_rounds_accept_every_protocol(rule):
    for protocol in SINGLE + MULTI:
        scenario(optimizer=ROUND_RULE_BLOCKS[rule], server={"protocol": protocol})


def test_every_built_in_rule_is_in_one_of_the_tables():
    union = typing.get_args(Optimizer)[0]
    tags = {member.__metadata__[0].tag for member in typing.get_args(union)} - {IMPORT_TAG}
    assert tags == set(PER_COMMIT_RULES) | set(ROUND_RULE_BLOCKS) | set(OWN_SCHEDULER_RULES)


@pytest.mark.parametrize("rule", sorted(OWN_SCHEDULER_RULES))
def test_a_rule_with_its_own_scheduler_refuses_every_other_protocol(rule):
    """FedCompass's scheduler is its protocol: `async` (the default's name) or none."""
    block = OWN_SCHEDULER_RULES[rule]
    for server in ({}, {"protocol": {"name": "async"}}):
        protocol = build_cluster(scenario(optimizer=block, server=server)).protocol
        assert protocol == timing.Compass(q_max=5, q_min=1, latest=1.5, speed_momentum=0.9)
    for protocol in [*SINGLE[1:], *MULTI]:
        with pytest.raises(ScenarioError, match=rf"server.protocol: rule '{rule}' runs under"):
            scenario(optimizer=block, server={"protocol": protocol})


def test_the_table_of_round_rules_matches_the_rules_themselves():
    blocks = {**PER_COMMIT_RULES, **ROUND_RULE_BLOCKS}
    for name, block in blocks.items():
        rule = scenario(optimizer=block).optimizer.build()
        assert rule.by_rounds == (name in ROUND_RULES), name


def test_a_rule_by_import_path_says_itself_whether_it_updates_by_rounds():
    k_sync = {"protocol": {"name": "k_sync", "k": 2}}
    scenario(optimizer={"rule": {"import": "gemsim.rules:sync"}, "lr": 0.1}, server=k_sync)
    with pytest.raises(ScenarioError, match="gemsim.rules:staleness"):
        scenario(optimizer={"rule": {"import": "gemsim.rules:staleness"}, "lr": 0.1}, server=k_sync)


def test_k_larger_than_the_cluster_is_refused():
    with pytest.raises(ScenarioError, match=r"server.protocol.k: must be <= workers.count \(4\)"):
        scenario(server={"protocol": {"name": "k_async", "k": 5}})


@pytest.mark.parametrize(
    "server,field",
    [
        ({"protocol": {"name": "ssp", "bound": -1}}, "bound"),
        ({"protocol": {"name": "ssp", "bound": 1.5}}, "bound"),
        ({"protocol": {"name": "k_sync", "k": 0}}, "k"),
        ({"protocol": "bsp"}, "server.protocol"),
    ],
)
def test_bad_protocol_values_name_the_field(server, field):
    with pytest.raises(ScenarioError, match=field):
        scenario(server=server)


def test_cli_refuses_a_protocol_the_rule_cannot_follow_with_exit_2(tmp_path):
    path = tmp_path / "bad.yaml"
    doc = {**BASE, "optimizer": PER_COMMIT_RULES["gem"], "server": {"protocol": "sync"}}
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["trace", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "server.protocol: rule 'gem'" in result.output and "allowed: async, ssp" in result.output


def test_churn_availability_and_slowdowns_build_per_worker(tmp_path):
    (tmp_path / "avail.csv").write_text("worker,down_at,up_at\n1,2.0,5.0\n1,9,\n3,0,1.5\n")
    churn = {
        "uptime": {"dist": "exponential", "mean": 30},
        "downtime": {"dist": "constant", "value": 5},
    }
    slow = {
        "every": {"dist": "exponential", "mean": 20},
        "factor": {"dist": "constant", "value": 3},
        "duration": {"dist": "constant", "value": 2},
    }
    workers = {
        **BASE["workers"],
        "churn": churn,
        "slowdowns": slow,
        "availability": {"file": "avail.csv"},
        "groups": [{"count": 1, "churn": {**churn, "downtime": {"dist": "constant", "value": 1}}}],
    }
    s = validate({**BASE, "workers": workers}, "test.yaml", base_dir=tmp_path)
    specs = build_cluster(s, sizes=(1, 0)).workers
    assert specs[0].churn.downtime == timing.Constant(1.0)  # the group's own
    assert all(w.churn.downtime == timing.Constant(5.0) for w in specs[1:])
    assert all(w.slowdowns.factor == timing.Constant(3.0) for w in specs)
    assert specs[1].availability == ((2.0, 5.0), (9.0, math.inf))
    assert specs[3].availability == ((0.0, 1.5),) and specs[0].availability == ()


@pytest.mark.parametrize(
    "text,message",
    [
        ("0,5,2\n", "down_at < up_at"),
        ("0,x,2\n", "times numbers"),
        ("0,1\n", "expected worker,down_at,up_at"),
        ("7,1,2\n", "names worker 7, which does not exist"),
    ],
)
def test_bad_availability_files_name_the_row(tmp_path, text, message):
    (tmp_path / "avail.csv").write_text(text)
    workers = {**BASE["workers"], "availability": {"file": "avail.csv"}}
    with pytest.raises(ScenarioError, match=message):
        validate({**BASE, "workers": workers}, "test.yaml", base_dir=tmp_path)


def test_shared_link_needs_a_bandwidth():
    with pytest.raises(ScenarioError, match="shared_link: true needs bandwidth_bytes_per_s"):
        scenario(network={"shared_link": True})
    spec = build_cluster(
        scenario(network={"shared_link": True, "bandwidth_bytes_per_s": 1e6}), sizes=(1, 0)
    )
    assert spec.shared_link


def test_json_schema_accepts_the_new_blocks_and_the_bare_protocol_name():
    schema = scenario_json_schema()
    doc = {
        **BASE,
        "server": {"protocol": "async"},
        "network": {"shared_link": True, "bandwidth_bytes_per_s": 1e6},
        "workers": {
            **BASE["workers"],
            "churn": {
                "uptime": {"dist": "constant", "value": 3},
                "downtime": {"dist": "constant", "value": 1},
            },
        },
    }
    jsonschema.validate(doc, schema)
    jsonschema.validate({**doc, "server": {"protocol": {"name": "ssp", "bound": 3}}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "server": {"protocol": "bsp"}}, schema)


PROTOCOL_VALUES = [
    "async",
    "sync",
    "ssp",
    "k_sync",
    "k_async",
    "bsp",
    {"name": "ssp", "bound": 0},
    {"name": "ssp", "bound": 3.0},
    {"name": "ssp", "bound": math.inf},
    {"name": "ssp", "bound": "inf"},
    {"name": "ssp", "bound": -math.inf},
    {"name": "ssp", "bound": True},
    {"name": "ssp", "bound": False},
    {"name": "ssp", "bound": 1.5},
    {"name": "ssp", "bound": "3"},
    {"name": "ssp", "bound": -1},
    {"name": "ssp"},
    {"name": "ssp", "bound": 1, "k": 2},
    {"name": "k_sync", "k": 2},
    {"name": "k_sync", "k": 2.0},
    {"name": "k_sync", "k": True},
    {"name": "k_async", "k": 0},
    {"name": "k_async", "k": math.inf},
    {"name": "k_async", "k": "inf"},
]


@pytest.mark.parametrize("value", PROTOCOL_VALUES, ids=repr)
def test_the_json_schema_and_the_loader_agree_on_protocols(value):
    doc = {**BASE, "optimizer": ROUND_RULE_BLOCKS["sync"], "server": {"protocol": value}}
    try:
        validate(copy.deepcopy(doc), "test.yaml")
        loaded = True
    except ScenarioError:
        loaded = False
    schema_ok = jsonschema.Draft202012Validator(SCHEMA).is_valid(doc)
    assert schema_ok == loaded


SCHEMA = scenario_json_schema()


def test_counts_are_integers_not_bools_and_only_bound_may_be_infinite():
    assert protocol_of(server={"protocol": {"name": "ssp", "bound": 3.0}}) == timing.Ssp(3)
    cases = [
        ({"name": "ssp", "bound": True}, r"bound must be an integer >= 0 or inf \(got True\)"),
        ({"name": "k_sync", "k": True}, r"k must be an integer >= 1 \(got True\)"),
        ({"name": "k_async", "k": math.inf}, r"k must be an integer >= 1 \(got inf\)"),
        ("ssp", r"server.protocol.ssp.bound: required field is missing"),
    ]
    for value, message in cases:
        with pytest.raises(ScenarioError, match=message):
            scenario(server={"protocol": value})


def test_the_bundled_timing_scenarios_exist():
    folder = Path(__file__).resolve().parents[2] / "scenarios" / "timing"
    names = ("ssp", "k_async", "churn", "slowdowns", "shared_link")
    for name in names:
        loaded = load_scenario(folder / f"{name}.yaml")
        assert loaded.name
    assert protocol_of_file(folder / "ssp.yaml").name == "ssp"
    assert protocol_of_file(folder / "k_async.yaml").name == "k_async"


def protocol_of_file(path):
    return build_cluster(load_scenario(path)).protocol


def test_the_files_a_scenario_reads_are_part_of_its_identity(tmp_path):
    (tmp_path / "avail.csv").write_text("1,2.0,5.0\n")
    (tmp_path / "other.csv").write_text("1,2.0,6.0\n")
    (tmp_path / "samples.txt").write_text("0.1\n0.3\n")
    workers = {
        **BASE["workers"],
        "compute": {"dist": "empirical", "file": "samples.txt"},
        "availability": {"file": "avail.csv"},
    }
    doc = {**BASE, "workers": workers}
    first = validate(doc, "test.yaml", base_dir=tmp_path)
    resolved = resolved_config(first)
    recorded = (resolved["workers"]["availability"], resolved["workers"]["compute"])
    assert [block["sha256"] for block in recorded] == [
        hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        for name in ("avail.csv", "samples.txt")
    ]
    for name, text in (("avail.csv", "1,2.0,5.25\n"), ("samples.txt", "0.1\n0.45\n")):
        before = config_hash(validate(doc, "test.yaml", base_dir=tmp_path))
        (tmp_path / name).write_text(text)
        assert config_hash(validate(doc, "test.yaml", base_dir=tmp_path)) != before
        # a configuration resolved before the edit no longer matches its file
        with pytest.raises(ScenarioError, match=rf"{name}' changed since this configuration"):
            validate(resolved, "manifest", base_dir=tmp_path)
    # sweep points and --set record the file each one reads
    sweep = {**doc, "sweep": {"workers.availability.file": ["avail.csv", "other.csv"]}}
    runs = expand(validate(sweep, "test.yaml", base_dir=tmp_path), "test.yaml", tmp_path)
    digests = [resolved_config(r.scenario)["workers"]["availability"]["sha256"] for r in runs]
    assert digests[1] == hashlib.sha256(b"1,2.0,6.0\n").hexdigest() != digests[0]
    moved = set_path(resolved, "workers.availability.file", "other.csv")
    moved = set_path(moved, "workers.compute", {"dist": "constant", "value": 0.1})
    assert resolved_config(validate(moved, "r", tmp_path))["workers"]["availability"] == {
        "file": str(tmp_path / "other.csv"),
        "sha256": digests[1],
    }


def test_resume_runs_again_after_the_availability_file_changed(tmp_path):
    (tmp_path / "avail.csv").write_text("worker,down_at,up_at\n1,0.5,1.0\n")
    doc = {
        **BASE,
        "workers": {**BASE["workers"], "availability": {"file": "avail.csv"}},
        "problem": {"model": {"name": "quadratic", "dim": 4}},
        "optimizer": PER_COMMIT_RULES["downpour"],
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    cmd = ["run", str(path), "--out", str(tmp_path / "out"), "--resume", "--json", "--quiet"]

    def run_once():
        result = CliRunner().invoke(app, cmd)
        assert result.exit_code == 0, result.output
        (row,) = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        return row

    first = run_once()
    assert not first["skipped"] and run_once()["skipped"]
    (tmp_path / "avail.csv").write_text("worker,down_at,up_at\n1,0.5,2.25\n")
    again = run_once()
    assert not again["skipped"] and again["run_id"] != first["run_id"]
