"""`server.pull`, `server.ties` and the rules' stops (`optimizer.stops` for ringmaster,
`optimizer.restarts` for rennala) in scenario files: what they build, that their defaults
leave every resolved configuration (so every run id) as it was, and that every combination
the timing model does not define is refused when the scenario is loaded, naming the field
(exit code 2)."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from gemsim import timing
from gemsim.cli import app
from gemsim.config import (
    ScenarioError,
    build_cluster,
    check_real_backend,
    config_hash,
    parse_scenario,
    resolved_config,
)

BASE = {
    "name": "server-options",
    "seed": 1,
    "workers": {"count": 4, "compute": {"dist": "exponential", "mean": 0.1}},
    "budget": {"commits": 50},
    "problem": {"model": {"name": "quadratic", "dim": 4}},
    "optimizer": {"rule": "downpour", "lr": 0.1},
}
CLIENTS = {"clients": {"population": 10, "concurrency": 4}}


def scenario(**blocks):
    return parse_scenario({**BASE, **blocks}, "s.yaml")


def refused(**blocks) -> str:
    with pytest.raises(ScenarioError) as err:
        scenario(**blocks)
    return str(err.value)


def test_the_defaults_leave_the_resolved_configuration_as_it_was():
    plain = scenario()
    for server in ({"pull": "after_apply"}, {"ties": "by_start"}):
        explicit = scenario(server=server)
        assert resolved_config(explicit) == resolved_config(plain)
        assert config_hash(explicit) == config_hash(plain)
    for optimizer in (
        {"rule": "ringmaster", "lr": 0.1, "stops": False},
        {"rule": "rennala", "lr": 0.1, "restarts": False},
    ):
        bare = {k: v for k, v in optimizer.items() if k not in ("stops", "restarts")}
        assert config_hash(scenario(optimizer=optimizer)) == config_hash(scenario(optimizer=bare))
    chosen = scenario(server={"pull": "before_apply", "ties": "by_worker"})
    assert resolved_config(chosen)["server"] == {
        "discipline": "fifo",
        "protocol": None,
        "service": None,
        "pull": "before_apply",
        "ties": "by_worker",
    }
    assert config_hash(chosen) != config_hash(plain)


def test_what_the_options_build():
    spec = build_cluster(scenario(server={"pull": "before_apply", "ties": "by_worker"}))
    assert (spec.pull_at, spec.ties, spec.stops) == (
        timing.PullAt.BEFORE_APPLY,
        timing.Ties.BY_WORKER,
        None,
    )
    ring = {"rule": "ringmaster", "lr": 0.1, "stops": True}
    assert build_cluster(scenario(optimizer=ring)).stops == timing.DelayStops(4)  # R = n
    ring3 = build_cluster(scenario(optimizer={**ring, "threshold": 3}))
    assert ring3.stops == timing.DelayStops(3)
    rennala = {"rule": "rennala", "lr": 0.1, "restarts": True}
    assert build_cluster(scenario(optimizer=rennala)).stops == timing.BatchRestarts(4)
    assert build_cluster(scenario(optimizer={**rennala, "batch": 2})).stops == timing.BatchRestarts(
        2
    )
    assert build_cluster(scenario()).stops is None


@pytest.mark.parametrize(
    ("server", "field"),
    [({"pull": "sideways"}, "server.pull"), ({"ties": "random"}, "server.ties")],
)
def test_bad_values_name_the_field(server, field):
    message = refused(server=server)
    assert field in message


@pytest.mark.parametrize(
    ("blocks", "words"),
    [
        (
            {"server": {"pull": "before_apply", "protocol": {"name": "ssp", "bound": 1}}},
            "server.pull: before_apply needs server.protocol async, got 'ssp'",
        ),
        (
            {"optimizer": {"rule": "ringmaster", "lr": 0.1, "stops": True}, "server": {
                "protocol": {"name": "k_async", "k": 1}}},
            "optimizer.stops: true needs server.protocol async, got 'k_async'",
        ),
        (
            {"optimizer": {"rule": "rennala", "lr": 0.1, "restarts": True}, "server": {
                "protocol": {"name": "ssp", "bound": 0}}},
            "optimizer.restarts: true needs server.protocol async",
        ),
        (
            {"optimizer": {"rule": "rennala", "lr": 0.1, "restarts": True}, "server": {
                "pull": "before_apply"}},
            "optimizer.restarts: true restarts workers on the version after a commit",
        ),
        ({"server": {"pull": "before_apply"}, **CLIENTS}, "server.pull: before_apply: not "),
        ({"server": {"ties": "by_worker"}, **CLIENTS}, "server.ties: 'by_worker' orders"),
        (
            {"optimizer": {"rule": "ringmaster", "lr": 0.1, "stops": True}, **CLIENTS},
            "optimizer.stops: true: not supported with `clients:`",
        ),
        ({"optimizer": {"rule": "gem", "lr": 0.1, "stops": True}}, "stops"),  # not gem's
    ],
)  # fmt: skip
def test_combinations_the_timing_model_does_not_define_are_refused(blocks, words):
    assert words in refused(**blocks)


def test_the_real_backends_refuse_stops_by_name():
    check_real_backend(scenario(server={"pull": "before_apply", "ties": "by_worker"}))
    stops = scenario(optimizer={"rule": "ringmaster", "lr": 0.1, "stops": True})
    with pytest.raises(ValueError, match="optimizer.stops: true stops computations in flight"):
        check_real_backend(stops)


def test_cli_refuses_stops_on_a_real_backend_before_any_run(tmp_path):
    doc = {**BASE, "optimizer": {"rule": "rennala", "lr": 0.1, "restarts": True}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--backend", "process", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "optimizer.restarts: true stops computations in flight" in result.stderr
    assert "Traceback" not in result.output and not out.exists()


def test_gemsim_trace_reports_the_stopped_work(tmp_path):
    doc = {**BASE, "optimizer": {"rule": "ringmaster", "lr": 0.1, "threshold": 1, "stops": True}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["trace", str(path)])
    assert result.exit_code == 0, result.output
    assert "cancelled (stops)" in result.stdout
    assert "staleness p50/p99   0 / 0   max 0" in result.stdout  # R = 1: only fresh gradients
