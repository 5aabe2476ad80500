"""`gemsim replay` of traces whose workers pulled before their gradient was applied
(`server.pull: before_apply`: each worker's next gradient on the version its commit was
applied to), and of traces the engine cannot execute: refused before anything runs, exit
code 2, the file, the commit and the reason, never a traceback."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from scenario_docs import quadratic_doc
from typer.testing import CliRunner

from gemsim.cli import app
from gemsim.results import read_manifest
from gemsim.trace import CommitTrace

runner = CliRunner()
DOC = quadratic_doc(name="pulls", seed=2, workers=3, commits=60, dim=4, every=30)


@pytest.mark.bitexact
def test_a_trace_pulled_before_apply_replays_as_its_simulation(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(DOC))
    before = ["--set", "server.pull=before_apply"]
    traced = runner.invoke(app, ["trace", str(path), *before, "--out", str(tmp_path / "t")])
    assert traced.exit_code == 0, traced.output
    trace = CommitTrace.from_parquet(tmp_path / "t" / "trace.parquet")
    assert trace.staleness[3:].min() >= 1
    out = tmp_path / "out"
    ran = runner.invoke(app, ["run", str(path), *before, "--out", str(out), "--json", "--quiet"])
    assert ran.exit_code == 0, ran.output
    sim = read_manifest(out / json.loads(ran.stdout.splitlines()[0])["run_id"])
    replayed = runner.invoke(
        app,
        ["replay", str(tmp_path / "t" / "trace.parquet"), str(path), "--out", str(out), "--json"],
    )  # the scenario's own server.pull does not matter: the trace says who pulled what
    assert replayed.exit_code == 0, replayed.output
    replay = read_manifest(out / json.loads(replayed.stdout.splitlines()[0])["run_id"])
    assert replay["replayed_trace_sha256"] == sim["trace_sha256"] == trace.sha256()
    assert replay["params_sha256"] == sim["params_sha256"]


def test_a_trace_the_engine_cannot_replay_exits_2_with_the_reason(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(DOC))
    n = 5
    bad = CommitTrace.from_columns(
        time=np.arange(1.0, n + 1),
        worker=[0, 1, 0, 2, 0],
        pulled_version=[0, 0, 1, 0, 1],  # commit 4: older than its previous commit 2's
        compute_time=np.ones(n),
        queue_time=np.zeros(n),
        service_time=np.zeros(n),
        n_workers=3,
        duration=float(n),
    )
    file = tmp_path / "bad.parquet"
    bad.to_parquet(file)
    out = tmp_path / "out"
    result = runner.invoke(app, ["replay", str(file), str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {file}: the engine cannot replay this trace: commit 4: worker 0 computed on "
        "version 1, older than the one its previous commit 2 was applied to; one snapshot slot "
        "per worker cannot replay that\n"
    )
    assert "Traceback" not in result.output and not out.exists()
