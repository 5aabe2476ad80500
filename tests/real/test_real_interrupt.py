"""`gemsim run` interrupted on a real backend, in each state of a run.

SIGINT is sent as a terminal's Ctrl-C sends it (to the process group), SIGTERM as `kill` and
Kubernetes send it (to the command alone). Either way the command must end within the
documented bound with exit code 130 / 143, leave no process and no shared memory behind,
write no folder for the interrupted run and keep the sweep's finished runs intact. Commands
start with a terminal's SIGINT disposition whatever launched the suite (launch_cli.py); one
test starts it as a background job does, with SIGINT ignored.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml
from launch_cli import SENT
from real_helpers import Cli, cmdline, mapped_shm, shm_bytes

from gemsim.app._signals import RAY_SHUTDOWN_BOUND_S, SHUTDOWN_BOUND_S
from gemsim.results import read_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm"),
]

SIGNALS = {"SIGINT": (signal.SIGINT, True), "SIGTERM": (signal.SIGTERM, False)}  # to the group?
LONG = 1_000_000  # commits: a run only a signal ends
SHORT = 30  # commits: the sweep's run that finishes before the interrupted one
WORKERS = 2
# The quiet time that shows an ignored SIGINT was ignored: a handled one ends the command in
# well under a second (it raises at once in the main thread, see SHUTDOWN_BOUND_S).
IGNORED_FOR_S = 3.0


def write_scenario(folder: Path, *, commits, model: str = "quadratic", workers=WORKERS) -> Path:
    doc = {
        "name": "interrupted",
        "seed": 3,
        "workers": {
            "count": workers,
            "compute": {"dist": "exponential", "mean": 0.02},
            "emulate_latency": True,
        },
        "budget": {"commits": commits[-1] if isinstance(commits, list) else commits},
        "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
        "optimizer": {"rule": "gem", "lr": 0.05},
    }
    if model == "cnn":  # its compilations last seconds: the state can be caught from outside
        doc["problem"] = {"model": "cnn", "dataset": "mnist-5k", "batch_size": 64}
        doc["eval"] = {"every": 10_000, "subset": 200}
    if isinstance(commits, list):
        doc["sweep"] = {"budget.commits": commits}
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_args(scenario: Path, backend: str = "process") -> list[str]:
    return ["run", str(scenario), "--backend", backend, "--out", "out", "--quiet"]


# --- the states, each reached from outside except the write (milliseconds long) --------


def reach_starting(cli: Cli, n: int) -> None:
    """Workers spawned, still importing, building or compiling; the server warms up."""
    cli.wait_until(lambda: len(cli.workers()) == n, "worker processes")


def reach_compiling(cli: Cli, n: int) -> None:
    """Every worker has built its CNN and mapped the run's shared memory, so it is compiling
    its gradient (8 s here) before it says ready; the server compiles its commit meanwhile."""

    def compiling() -> bool:
        workers = cli.workers()
        return len(workers) == n and all(len(mapped_shm(w)) == 2 for w in workers)

    cli.wait_until(compiling, "workers compiling (shared memory mapped)")


def reach_running(cli: Cli, n: int) -> None:
    """The sweep's first run is finished; the second one's workers are committing (the
    shared memory they work on has changed three times)."""
    cli.wait_until(lambda: len(finished(cli.folder / "out")) == 1, "the first run finished")
    names: set[str] = set()

    def mapped() -> bool:
        workers = cli.workers()
        if len(workers) == n and len(mapped_shm(workers[0])) == 2:
            names.update(mapped_shm(workers[0]))
        return bool(names)

    cli.wait_until(mapped, "the second run's workers")
    contents = [shm_bytes(names)]

    def committing() -> bool:
        now = shm_bytes(names)
        if now is not None and now != contents[-1]:
            contents.append(now)
        return len(contents) > 3

    cli.wait_until(committing, "commits in the second run")


def reach_writing(cli: Cli, n: int) -> None:
    """launch_cli.py sends the signal while the run folder is written (the sweep's finished
    runs are checked in the `running` state)."""
    cli.wait_until(lambda: SENT in cli.output() or cli.proc.poll() is not None, "the write")
    line = next(x for x in cli.output().splitlines() if x.startswith(SENT))
    cli.sent_at = float(line.split()[-1])


STATES = {
    # state: (commits, model, workers, finished runs expected, how it is reached); one CNN
    # worker: each builds and compiles the CNN for seconds, and the server does too
    "starting": (LONG, "quadratic", WORKERS, 0, reach_starting),
    "compiling": (LONG, "cnn", 1, 0, reach_compiling),
    "running": ([SHORT, LONG], "quadratic", WORKERS, 1, reach_running),
    "writing": (SHORT, "quadratic", WORKERS, 0, reach_writing),
}


@pytest.mark.parametrize("name", SIGNALS)
@pytest.mark.parametrize("state", STATES)
def test_process_backend_ends_cleanly_on_a_signal(state, name, tmp_path):
    commits, model, workers, n_finished, reach = STATES[state]
    signum, group = SIGNALS[name]
    scenario = write_scenario(tmp_path, commits=commits, model=model, workers=workers)
    launcher = ("--signal-at-write", f"{name}:1") if state == "writing" else ()
    with Cli(run_args(scenario), tmp_path, launcher) as cli:
        reach(cli, workers)
        if state != "writing":
            cli.send(signum, group=group)
        assert_ended_cleanly(cli, signum, SHUTDOWN_BOUND_S, n_finished)


def test_an_ignored_sigint_stays_ignored_and_sigterm_still_ends_the_run(tmp_path):
    """A background job of a non-interactive shell starts with SIGINT ignored: its run must
    survive the terminal's Ctrl-C (workers included) and still stop on SIGTERM."""
    scenario = write_scenario(tmp_path, commits=LONG)
    with Cli(run_args(scenario), tmp_path, ("--sigint", "ignored")) as cli:
        reach_starting(cli, WORKERS)
        workers = cli.workers()
        cli.send(signal.SIGINT, group=True)
        time.sleep(IGNORED_FOR_S)
        assert cli.proc.poll() is None, cli.output()
        assert all(w.is_running() for w in workers)
        cli.send(signal.SIGTERM, group=False)
        assert_ended_cleanly(cli, signal.SIGTERM, SHUTDOWN_BOUND_S, 0)


RAY_STATES = {
    # Ray starting its own processes (its start-up cannot be interrupted half-way: what it
    # started must be found and killed), and actors committing; few cases: Ray is slow.
    "starting": ("SIGTERM", "raylet", 1),
    "running": ("SIGINT", "ray::_Worker.run", WORKERS),
}


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the ray extra")
@pytest.mark.parametrize("state", RAY_STATES)
def test_ray_backend_ends_cleanly_on_a_signal(state, tmp_path):
    name, marker, count = RAY_STATES[state]
    signum, group = SIGNALS[name]
    scenario = write_scenario(tmp_path, commits=LONG)
    with Cli(run_args(scenario, "ray"), tmp_path) as cli:

        def reached() -> bool:
            return sum(marker in cmdline(p) for p in cli.alive()) >= count

        cli.wait_until(reached, f"{count} processes {marker!r}")
        cli.send(signum, group=group)
        assert_ended_cleanly(cli, signum, RAY_SHUTDOWN_BOUND_S, 0)


# --- checks ----------------------------------------------------------------------------


def assert_ended_cleanly(cli: Cli, signum: int, bound: float, n_finished: int) -> None:
    code, took = cli.wait_exit(bound)
    output = cli.output()
    assert code == 128 + signum, f"exit code {code}:\n{output[-3000:]}"
    assert f"interrupted by {signal.Signals(signum).name}" in output
    left = cli.left_behind(until=cli.sent_at + bound)
    assert left == [], f"left running {bound:.0f} s after the signal: {left}"
    assert not [n for n in cli.shm if Path("/dev/shm", n).exists()], "shared memory left"
    out = cli.folder / "out"
    assert not [p.name for p in _entries(out) if p.name.startswith(".")], "half-written folder"
    done = finished(out)
    assert len(done) == n_finished and len(_entries(out)) == n_finished
    for folder in done:  # the sweep's finished run, intact
        record = read_run(folder)
        assert record.manifest["status"] == "ok" and record.manifest["n_commits"] == SHORT
        assert len(record.trace) == SHORT


def finished(out: Path) -> list[Path]:
    return [p for p in _entries(out) if (p / "manifest.json").is_file()]


def _entries(out: Path) -> list[Path]:
    return sorted(out.iterdir()) if out.is_dir() else []
