"""`gemsim run` interrupted on a real backend, in each state of a run, on both backends.

SIGINT is sent as a terminal's Ctrl-C sends it (to the process group), SIGTERM as `kill` and
Kubernetes send it (to the command alone) and as Slurm sends it (to the whole process group:
one case per backend, mid-run). Either way the command must end within the documented bound
with exit code 130 / 143, leave no process and no shared memory behind, write no folder for
the interrupted run and keep the sweep's finished runs intact. Commands start with a
terminal's SIGINT disposition whatever launched the suite (launch_cli.py); one test starts
it as a background job does, with SIGINT ignored.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml
from launch_cli import SENT
from real_helpers import Cli, cmdline, mapped_shm, proc_maps, ray_processes_of, shm_bytes

from gemsim.app._exit_codes import RAY_SHUTDOWN_BOUND_S, SHUTDOWN_BOUND_S
from gemsim.results import read_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm"),
]

# name: (signal, to the whole process group?)
SIGNALS = {
    "SIGINT": (signal.SIGINT, True),  # a terminal's Ctrl-C
    "SIGTERM": (signal.SIGTERM, False),  # `kill`, Kubernetes
    "SIGTERM-group": (signal.SIGTERM, True),  # Slurm
}
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
    its gradient (seconds) before it says ready; the server compiles its commit meanwhile."""

    def compiling() -> bool:
        workers = cli.workers()
        return len(workers) == n and all(len(mapped_shm(w)) == 2 for w in workers)

    cli.wait_until(compiling, "workers compiling (shared memory mapped)")


def reach_running(cli: Cli, n: int) -> None:
    """The sweep's first run is finished; the second one's workers are committing."""
    cli.wait_until(lambda: len(finished(cli.folder / "out")) == 1, "the first run finished")
    reach_committing(cli, n)


def reach_committing(cli: Cli, n: int) -> None:
    """The run's workers are committing (the shared memory they work on has changed three
    times)."""
    names: set[str] = set()

    def mapped() -> bool:
        workers = cli.workers()
        if len(workers) == n and len(mapped_shm(workers[0])) == 2:
            names.update(mapped_shm(workers[0]))
        return bool(names)

    cli.wait_until(mapped, "the run's workers")
    contents = [shm_bytes(names)]

    def committing() -> bool:
        now = shm_bytes(names)
        if now is not None and now != contents[-1]:
            contents.append(now)
        return len(contents) > 3

    cli.wait_until(committing, "commits")


def reach_writing(cli: Cli, n: int) -> None:
    """launch_cli.py sends the signal while the run folder is written (the sweep's finished
    runs are checked in the `running` state)."""
    cli.wait_until(lambda: SENT in cli.output() or cli.proc.poll() is not None, "the write")
    line = next(x for x in cli.output().splitlines() if x.startswith(SENT))
    cli.sent_at = float(line.split()[-1])


def ray_processes(marker: str, per_worker: bool) -> Callable[[Cli, int], None]:
    """Reached once the command's family has processes whose command line holds `marker`
    (Ray sets an actor's to `ray::Class.method` while it runs one): one, or one per worker."""

    def reach(cli: Cli, n: int) -> None:
        count = n if per_worker else 1

        def reached() -> bool:
            return sum(marker in cmdline(p) for p in cli.alive()) >= count

        cli.wait_until(reached, f"{count} processes {marker!r}")

    return reach


def reach_ray_stalled(cli: Cli, n: int) -> None:
    """Ray's start-up stalled: its raylet stopped (SIGSTOP) as soon as it is seen, so that
    `ray.init` does not return for as long as its own timeout (about 30 s here, then "The
    current node timed out during startup"), longer than the bound: the start-up of a
    machine too loaded to finish it in any given time. The command must not wait for it."""
    ray_processes("raylet", False)(cli, n)
    for p in cli.alive():
        with suppress(psutil.Error):
            if p.name() == "raylet":
                p.suspend()


XLA_CACHE = "xla-cache"  # a compiling case's own compilation cache, in the test's folder
# Mapped by a worker actor once its constructor starts reading the CNN's data set (gemsim
# imports pandas to parse mnist-5k, and nothing before): a mark that stays, where the file's
# being open lasts a few tenths of a second that a poll on a loaded machine can miss.
READING_MARK = "/pandas/_libs/"


def reach_ray_compiling(cli: Cli, n: int) -> None:
    """Every worker actor is in its constructor and has started building the CNN (it maps
    pandas' libraries to read the data set), and the run's programs are reaching its
    compilation cache: the actor builds the CNN and compiles its gradient (seconds, the
    gradient's program last) before it says ready."""
    cache = cli.folder / XLA_CACHE

    def compiling() -> bool:
        actors = [p for p in cli.alive() if "ray::_Worker.__init__" in cmdline(p)]
        building = len(actors) == n and all(READING_MARK in proc_maps(p) for p in actors)
        return building and cache.is_dir() and any(cache.iterdir())

    cli.wait_until(compiling, "worker actors building the CNN, programs cached")


@dataclass(frozen=True)
class State:
    commits: int | list[int]  # a list: a sweep, whose first run finishes before the signal
    model: str  # the CNN where a compilation must last long enough to be caught
    workers: int
    reach: Callable[[Cli, int], None]


STATES = {
    "process": {
        "starting": State(LONG, "quadratic", WORKERS, reach_starting),
        # one CNN worker: each builds and compiles the CNN for seconds, the server too
        "compiling": State(LONG, "cnn", 1, reach_compiling),
        "running": State([SHORT, LONG], "quadratic", WORKERS, reach_running),
        # the workers have stopped when the server writes: one is enough
        "writing": State(SHORT, "quadratic", 1, reach_writing),
    },
    # One worker actor in each (Ray kills one or several in the same loop): a Ray run costs
    # seconds of start-up beside its actors.
    "ray": {
        # Ray starting its own processes (its start-up cannot be interrupted half-way: what
        # it started must be found and killed)
        "starting": State(LONG, "quadratic", 1, ray_processes("raylet", False)),
        # Ray's start-up not finishing (what is left of it is killed without waiting for it)
        "stalled": State(LONG, "quadratic", 1, reach_ray_stalled),
        "compiling": State(LONG, "cnn", 1, reach_ray_compiling),
        # the actor committing (one run: each run of a sweep starts and stops its own Ray)
        "running": State(LONG, "quadratic", 1, ray_processes("ray::_Worker.run", True)),
        # Ray is stopped when the driver writes, its SIGTERM handler put back
        "writing": State(SHORT, "quadratic", 1, reach_writing),
    },
}
# Slurm's SIGTERM to the whole group mid-run: one run (the sweep's finished runs are checked
# with the other signals), the workers receive it too.
SLURM = {
    "process": State(LONG, "quadratic", WORKERS, reach_committing),
    "ray": STATES["ray"]["running"],
}
BOUNDS = {"process": SHUTDOWN_BOUND_S, "ray": RAY_SHUTDOWN_BOUND_S}
NO_RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the ray extra")


# Cases another covers (a Ray start costs seconds here). Ray's write comes after Ray has
# stopped, and Ray sets SIGTERM's handler alone (put back, `gemsim/_ray_local.py`): a SIGINT
# while it writes is the process backend's case. A SIGINT while Ray's start-up is stalled is
# the case of a sweep sent to Ray (below), which starts Ray the same way.
COVERED_ELSEWHERE = {("ray", "writing", "SIGINT"), ("ray", "stalled", "SIGINT")}


def cases():
    """Every state with SIGINT and SIGTERM (but `COVERED_ELSEWHERE`), and Slurm's SIGTERM to
    the group mid-run."""
    for backend, states in STATES.items():
        marks = [NO_RAY] if backend == "ray" else []
        names = [
            (state, name)
            for state in states
            for name in ("SIGINT", "SIGTERM")
            if (backend, state, name) not in COVERED_ELSEWHERE
        ]
        for state, name in [*names, ("running", "SIGTERM-group")]:
            yield pytest.param(backend, state, name, marks=marks, id=f"{backend}-{state}-{name}")


@pytest.mark.parametrize(("backend", "state", "name"), list(cases()))
def test_run_ends_cleanly_on_a_signal(backend, state, name, tmp_path):
    at = SLURM[backend] if name == "SIGTERM-group" else STATES[backend][state]
    signum, group = SIGNALS[name]
    scenario = write_scenario(tmp_path, commits=at.commits, model=at.model, workers=at.workers)
    launcher = ("--signal-at-write", f"{name.split('-')[0]}:1") if state == "writing" else ()
    # A compilation cache of the test's own, empty: the workers really compile (a session
    # cache could hold their program), and whether their gradient ever got compiled shows.
    cache = tmp_path / XLA_CACHE
    env = {"JAX_COMPILATION_CACHE_DIR": str(cache)} if state == "compiling" else {}
    with Cli(run_args(scenario, backend), tmp_path, launcher, env) as cli:
        at.reach(cli, at.workers)
        if backend == "ray" and state != "writing":  # the check of what is left sees them
            assert ray_processes_of(cli.proc.pid), "the run's Ray processes not found"
        if state != "writing":
            cli.send(signum, group=group)
        # A run whose folder was being written when the signal came had finished: its folder
        # is completed (written in the background, `app/_folder_writer.py`), never cut off.
        n_finished = 1 if isinstance(at.commits, list) or state == "writing" else 0
        assert_ended_cleanly(cli, signum, BOUNDS[backend], n_finished)
    if state == "compiling":  # the cache was used, and the gradient never reached it
        written = [p.name for p in cache.iterdir()] if cache.is_dir() else []
        assert written and not [x for x in written if x.startswith("jit_gradient-")], written


@NO_RAY
def test_a_sweep_sent_to_ray_ends_cleanly_on_ctrl_c_while_ray_starts(tmp_path):
    """`gemsim run --scheduler ray` starting its own Ray instance (gemsim/_ray_local.py, as the
    Ray backend does): a Ctrl-C while Ray's start-up is stalled ends the command without
    waiting for the start, with 130, no process of Ray left and no run folder."""
    scenario = write_scenario(tmp_path, commits=[SHORT, LONG])
    args = ["run", str(scenario), "--scheduler", "ray", "--out", "out", "--quiet"]
    with Cli(args, tmp_path) as cli:
        reach_ray_stalled(cli, 1)
        assert ray_processes_of(cli.proc.pid), "the run's Ray processes not found"
        cli.send(signal.SIGINT, group=True)
        assert_ended_cleanly(cli, signal.SIGINT, RAY_SHUTDOWN_BOUND_S, 0)


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


# --- checks ----------------------------------------------------------------------------


def assert_ended_cleanly(cli: Cli, signum: int, bound: float, n_finished: int) -> None:
    code, took = cli.wait_exit(bound)
    output = cli.output()
    assert code == 128 + signum, f"exit code {code}:\n{output[-3000:]}"
    assert f"interrupted by {signal.Signals(signum).name}" in output
    assert "Traceback" not in output, output[-3000:]  # no process died of the signal's exception
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
