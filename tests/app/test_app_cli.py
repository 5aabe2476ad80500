"""The command line as a lab uses it: run identities that never collide, exit codes that tell
what happened, strict JSON Lines, provenance, and the show / ls / schema verbs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml
from scenario_docs import quadratic_doc
from typer.testing import CliRunner

from gemsim.cli import _exit_status, app
from gemsim.config import read_document
from gemsim.results import read_manifest

REPO = Path(__file__).resolve().parents[2]
QUAD = quadratic_doc(name="cli", seed=5, workers=3, commits=60, dim=4, every=30)
runner = CliRunner()


def _write(folder: Path, doc: dict, name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _lines(text: str) -> list[dict]:
    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    return [json.loads(line, parse_constant=refuse) for line in text.splitlines() if line]


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """One simulated run in a results folder: (scenario file, results folder, its run id)."""
    root = tmp_path_factory.mktemp("sim")
    path = _write(root, QUAD)
    result = runner.invoke(app, ["run", str(path), "--out", str(root / "out"), "--json"])
    assert result.exit_code == 0, result.output
    (line,) = _lines(result.stdout)
    return path, root / "out", line["run_id"]


def test_a_replay_into_the_folder_of_its_simulation_keeps_both(sim_run, tmp_path):
    path, out, sim_id = sim_run
    before = (out / sim_id / "manifest.json").read_bytes()
    result = runner.invoke(
        app, ["replay", str(out / sim_id), str(path), "--out", str(out), "--json", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    replay_id = _lines(result.stdout)[0]["run_id"]
    assert replay_id != sim_id
    assert (out / sim_id / "manifest.json").read_bytes() == before  # untouched
    sim, replay = read_manifest(out / sim_id), read_manifest(out / replay_id)
    assert (sim["kind"], replay["kind"]) == ("sim", "replay")
    assert replay["replayed_trace_sha256"] == sim["trace_sha256"]
    assert replay["params_sha256"] == sim["params_sha256"]  # the same computation
    assert sim["identity"] != replay["identity"] and sim["config_hash"] == replay["config_hash"]
    # --resume takes neither for the other: the simulation is skipped, not redone or replaced
    resumed = runner.invoke(app, ["run", str(path), "--out", str(out), "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    (row,) = _lines(resumed.stdout)
    assert row["skipped"] and row["run_id"] == sim_id and row["kind"] == "sim"
    assert read_manifest(out / replay_id)["kind"] == "replay"
    # the replay of the same trace again is its own finished run: same identity, same folder
    again = runner.invoke(
        app, ["replay", str(out / sim_id), str(path), "--out", str(out), "--json", "--quiet"]
    )
    assert _lines(again.stdout)[0]["run_id"] == replay_id


def test_manifests_carry_provenance(sim_run):
    _, out, run_id = sim_run
    manifest = read_manifest(out / run_id)
    prov = manifest["provenance"]
    for key in ("gemsim", "commit", "dirty", "python", "platform", "cpu", "jax_backend"):
        assert key in prov, key
    for key in ("device_kind", "packages", "started_at", "ended_at", "command"):
        assert key in prov, key
    assert prov["jax_backend"] == "cpu" and prov["packages"]["jax"] and prov["packages"]["simpy"]
    assert prov["started_at"] <= prov["ended_at"]
    assert prov["command"] == " ".join(sys.argv)  # the process that ran it (here, pytest)
    assert manifest["identity"].startswith(run_id) and manifest["kind"] == "sim"


def test_show_and_ls_describe_a_sweep(sim_run, tmp_path):
    path, out, run_id = sim_run
    doc = {**QUAD, "sweep": {"optimizer.lr": [0.05, 0.1]}}
    sweep = _write(tmp_path, doc)
    shown = runner.invoke(app, ["show", str(sweep), "--out", str(out), "--json"])
    assert shown.exit_code == 0, shown.output
    rows = _lines(shown.stdout)
    assert [r["sweep"] for r in rows] == [{"optimizer.lr": 0.05}, {"optimizer.lr": 0.1}]
    # the lr 0.05 point resolves to the configuration already run (same identity): skipped
    assert [r["resume_skips"] for r in rows] == [True, False]
    assert rows[0]["run_id"] == run_id
    text = runner.invoke(app, ["show", str(path), "--out", str(out)])
    assert text.exit_code == 0 and f"* {run_id}" in text.output and "lr: 0.05" in text.output
    card = runner.invoke(app, ["show", str(out / run_id)])
    assert card.exit_code == 0 and "provenance" in card.output and "jax" in card.output
    listed = runner.invoke(app, ["ls", str(out), "--json", "--sort", "wall_seconds"])
    assert listed.exit_code == 0, listed.output
    ls_rows = _lines(listed.stdout)
    assert run_id in {r["run_id"] for r in ls_rows} and all("status" in r for r in ls_rows)
    assert runner.invoke(app, ["ls", str(out), "--sort", "nope"]).exit_code == 2
    assert runner.invoke(app, ["ls", str(tmp_path / "missing")]).exit_code == 2


FAILING_RULE = """
from gemsim import rules

def picky(lr):
    base = rules.staleness(lr)

    def commit(theta, server, ws, work, ctx):
        if lr > 1.0:  # fails when the engine traces it, after every check passed
            raise RuntimeError("picky: lr above 1 is not supported by this commit")
        return base.commit(theta, server, ws, work, ctx)

    return base._replace(name="picky", commit=commit)
"""


def test_a_failed_run_exits_3_and_the_others_finish(tmp_path):
    (tmp_path / "picky.py").write_text(textwrap.dedent(FAILING_RULE))
    doc = {
        **QUAD,
        "optimizer": {"rule": {"import": "picky:picky"}, "lr": 0.05},
        "sweep": {"optimizer.lr": [0.05, 2.0, 0.1]},
    }
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(_write(tmp_path, doc)), "--out", str(out), "--json"])
    assert result.exit_code == 3, result.output
    rows = _lines(result.stdout)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    failed = rows[1]["run_id"]
    assert f"run {failed} failed: RuntimeError: picky" in result.stderr
    assert read_manifest(out / failed)["error"].startswith("RuntimeError: picky")
    for row in (rows[0], rows[2]):
        assert read_manifest(out / row["run_id"])["status"] == "ok"
    assert rows[1]["train_loss"] is None  # NaN is null in strict JSON


def test_missing_data_is_found_before_any_run_starts(tmp_path, monkeypatch):
    monkeypatch.delenv("GEMSIM_DATA", raising=False)
    doc = {
        **QUAD,
        "problem": {"model": "logistic", "dataset": "digits", "batch_size": 16},
        "sweep": {"problem.dataset": ["digits", {"name": "mnist", "data_dir": str(tmp_path)}]},
    }
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(_write(tmp_path, doc)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "mnist" in result.output and "Traceback" not in result.output
    assert not out.exists()  # the digits run did not start either


def test_the_json_schema_validates_every_bundled_scenario():
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    files = sorted((REPO / "scenarios").rglob("*.yaml")) + sorted(REPO.glob("examples/**/*.yaml"))
    assert len(files) >= 20
    for path in files:
        errors = list(validator.iter_errors(read_document(path)))  # YAML 1.2, as editors
        assert not errors, f"{path.name}: {errors[0].message}"
    # and it is a schema, not a tautology: it refuses what the loader refuses
    bad = {**QUAD, "workers": {"count": 3, "compute": {"dist": "gamma", "mean": 1.0}}}
    assert list(validator.iter_errors(bad))
    # workers.count may be left out with a population (it is clients.concurrency), not without
    no_count = {**QUAD, "workers": {"compute": QUAD["workers"]["compute"]}}
    assert list(validator.iter_errors(no_count))
    population = {**no_count, "clients": {"population": 50, "concurrency": 5}}
    assert not list(validator.iter_errors(population))


def test_version_help_and_python_dash_m():
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("gemsim 0.")
    done = subprocess.run(
        [sys.executable, "-m", "gemsim", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "Exit codes" in done.stdout
    for verb in ("trace", "run", "replay", "calibrate", "validate", "show", "ls", "schema"):
        helped = runner.invoke(app, [verb, "--help"])
        assert helped.exit_code == 0 and "Example:" in helped.output, verb


def test_the_console_command_ends_with_its_status_and_all_its_output(tmp_path):
    # `gemsim.cli.main` ends the process with os._exit (no interpreter teardown): the exit
    # status and every line printed must survive that, through a pipe (block-buffered).
    doc = {k: v for k, v in QUAD.items() if k not in ("problem", "optimizer")}
    doc["sweep"] = {"workers.count": [2, 3, 4]}
    cmd = [sys.executable, "-m", "gemsim", "trace", str(_write(tmp_path, doc)), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["n_workers"] for line in done.stdout.splitlines()] == [2, 3, 4]
    missing = subprocess.run(
        [sys.executable, "-m", "gemsim", "run", str(tmp_path / "nothing.yaml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 2 and "nothing.yaml" in missing.stderr
    assert [_exit_status(c) for c in (None, 0, 3)] == [0, 0, 3]
    # Under a profiler the interpreter exits as usual, so that the profile gets written.
    stats = tmp_path / "gemsim.prof"
    profiled = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(stats), "-m", "gemsim", "--version"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert profiled.returncode == 0 and stats.stat().st_size > 0, profiled.stderr


def test_trace_json_is_one_line_per_run(tmp_path):
    doc = {k: v for k, v in QUAD.items() if k not in ("problem", "optimizer")}
    doc["sweep"] = {"workers.count": [2, 3]}
    result = runner.invoke(app, ["trace", str(_write(tmp_path, doc)), "--json"])
    assert result.exit_code == 0
    rows = _lines(result.stdout)
    assert [r["n_workers"] for r in rows] == [2, 3] and all("trace_sha256" in r for r in rows)
    single = runner.invoke(app, ["trace", str(_write(tmp_path, QUAD, "one.yaml")), "--json"])
    assert len(_lines(single.stdout)) == 1  # the same shape for one run as for many


def test_terminated_is_rebuilt_from_its_args_through_a_simpy_process():
    # SimPy re-raises a process's exception as type(e)(*e.args): SIGTERM inside a simulation
    # (a churn run is long) must still end as SIGTERM, exit 143, not as a ValueError.
    import signal

    import simpy

    from gemsim.app import exit_code
    from gemsim.app._signals import Terminated

    def worker(env):
        yield env.timeout(1.0)
        raise Terminated(signal.SIGTERM)

    env = simpy.Environment()
    env.process(worker(env))
    with pytest.raises(Terminated) as info:
        env.run()
    assert info.value.signum == signal.SIGTERM and exit_code(info.value) == 143
    assert str(info.value) == "terminated by SIGTERM"


def test_replay_of_a_missing_trace_says_so(sim_run, tmp_path):
    path, _, _ = sim_run
    result = runner.invoke(app, ["replay", str(tmp_path / "nonexistent"), str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'nonexistent'}: no such trace or run folder " \
        "(give a trace.parquet or a run's folder)\n"  # fmt: skip
    empty = runner.invoke(app, ["replay", str(tmp_path), str(path)])
    assert empty.exit_code == 2 and "no trace.parquet in this folder" in empty.stderr


def test_a_batch_larger_than_the_data_is_refused_before_any_run(tmp_path):
    doc = {
        **QUAD,
        "problem": {"model": "logistic", "dataset": "digits", "batch_size": 16},
        "sweep": {"problem.batch_size": [16, 100000]},
    }
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(_write(tmp_path, doc)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "problem.batch_size: 100000 is larger than the training set of 1438" in result.stderr
    assert not out.exists()  # the batch-16 run did not start either
    # `trace` with an epochs budget: an epoch of no full batch used to count as one step.
    one = {**doc, "budget": {"epochs_per_worker": 1.0}, "sweep": {}}
    path = _write(tmp_path, one, "epochs.yaml")
    assert runner.invoke(app, ["trace", str(path)]).exit_code == 0
    refused = runner.invoke(app, ["trace", str(path), "--set", "problem.batch_size=100000"])
    assert refused.exit_code == 2 and "larger than the training set" in refused.stderr


def test_a_run_started_from_python_records_the_call(tmp_path):
    import gemsim
    from gemsim.app.record._provenance import render_call

    scenario = gemsim.load_scenario(_write(tmp_path, QUAD))
    folder = gemsim.run(scenario).write(tmp_path / "out")
    assert read_manifest(folder)["provenance"]["command"] == "gemsim.run(<Scenario 'cli'>)"
    shown = render_call("gemsim.run_sweep", (Path("file.yaml"),), {"jobs": 2})
    assert shown == "gemsim.run_sweep('file.yaml', jobs=2)"


def test_a_marked_call_made_by_the_command_records_the_command_line():
    import typer

    from gemsim.app.record._provenance import api_call, command_line

    @api_call("gemsim.example")
    def example(path, jobs=1):
        return command_line()

    assert example("s.yaml", jobs=2) == "gemsim.example('s.yaml', jobs=2)"
    cli = typer.Typer()

    @cli.command()
    def go():
        typer.echo(example("s.yaml"))

    assert runner.invoke(cli, []).stdout.strip() == " ".join(sys.argv)  # here, pytest's


def test_the_readme_lists_exactly_the_exit_codes_of_the_command():
    """Exit codes have one home (`gemsim.app.ExitCode`); the README's table and `gemsim
    --help` say the same."""
    import re

    from gemsim.app import EXIT_CODES_HELP, ExitCode

    text = (REPO / "README.md").read_text()
    table = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    listed = {
        int(c)
        for row in re.findall(r"^\| ([\d / ]+) \|", table, re.M)
        for c in re.findall(r"\d+", row)
    }
    assert listed == {int(code) for code in ExitCode}
    assert all(str(int(code)) in EXIT_CODES_HELP for code in ExitCode)
    assert runner.invoke(app, ["--help"]).stdout.count("Exit codes") == 1


def test_provenance_names_the_commit_of_the_checkout_gemsim_runs_from():
    """Run from its checkout, a run's provenance holds the checkout's commit (outside one,
    None: an installed gemsim)."""
    from gemsim.app.record._provenance import git_state

    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout, or no git here")
    assert git_state()["commit"] == head
