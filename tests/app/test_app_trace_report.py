"""`gemsim trace` reports the protocol, time blocked, cancelled work, availability and lost
work per worker, from the simulator's own per-worker figures."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from gemsim import config, timing
from gemsim.app import render_trace_report, trace_scenario
from gemsim.cli import app

BASE = {
    "name": "report",
    "seed": 2,
    "workers": {"count": 4, "compute": {"dist": "exponential", "mean": 1.0}},
    "budget": {"seconds": 400},
}


def _write(tmp_path, **blocks):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, **blocks}))
    return path


def test_report_holds_the_simulators_per_worker_figures(tmp_path):
    workers = {
        **BASE["workers"],
        "churn": {
            "uptime": {"dist": "exponential", "mean": 40},
            "downtime": {"dist": "exponential", "mean": 10},
        },
    }
    path = _write(
        tmp_path,
        workers=workers,
        server={"protocol": {"name": "k_sync", "k": 2}},
        optimizer={"rule": "sync", "lr": 0.1},
    )
    (report,) = trace_scenario(path)
    expected = timing.simulate_run(config.build_cluster(config.load_scenario(path)), seed=2)
    assert report["trace_sha256"] == expected.trace.sha256()
    rows = report["per_worker"]
    figures = expected.workers
    np.testing.assert_allclose([r["availability"] for r in rows], figures.availability)
    np.testing.assert_allclose([r["waited_seconds"] for r in rows], figures.waited_seconds)
    assert [r["lost"] for r in rows] == figures.lost.tolist()
    assert [r["cancelled"] for r in rows] == figures.cancelled.tolist()
    assert report["protocol"] == "k_sync"
    assert report["cancelled"] == figures.cancelled.sum() > 0
    assert report["lost"] == figures.lost.sum() > 0
    assert 0.7 < report["availability_mean"] < 0.9
    text = render_trace_report(report)
    for line in ("protocol            k_sync", "availability mean", "cancelled (k_sync)"):
        assert line in text
    header = next(line for line in text.splitlines() if line.startswith("  worker  commits"))
    assert "up %" in header and "waited s" in header and "cancelled" in header


def test_ssp_report_shows_time_blocked_and_plain_runs_stay_plain(tmp_path):
    path = _write(tmp_path, server={"protocol": {"name": "ssp", "bound": 0}})
    (report,) = trace_scenario(path)
    assert report["waited_seconds"] > 0 and report["lost"] == report["cancelled"] == 0
    assert "waited (protocol)" in render_trace_report(report)
    (plain,) = trace_scenario(_write(tmp_path))
    text = render_trace_report(plain)
    assert "protocol            async" in text
    assert "availability" not in text and "waited" not in text and "up %" not in text


@pytest.mark.parametrize("extra", [{}, {"server": {"protocol": "sync"}}])
def test_cli_json_is_strict_and_carries_the_figures(tmp_path, extra):
    result = CliRunner().invoke(app, ["trace", str(_write(tmp_path, **extra)), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    keys = {"protocol", "availability_mean", "waited_seconds", "lost", "cancelled"}
    assert keys <= report.keys()
    assert {"availability", "waited_seconds", "lost_compute_seconds"} <= report["per_worker"][
        0
    ].keys()
