"""Scenarios and checks shared by the real-backend tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import jax
import numpy as np
import psutil

from gemsim.app import real_job, run
from gemsim.config import Scenario
from gemsim.real._worker import use_worker_environment
from gemsim.real._worker_processes import _worker_context

REPLAY_TOLERANCE = 1e-5


# About 43 commits per worker at n = 3: enough for a replay's drift to show; a trace of any
# length replays with one compiled program (the engine's commit loop).
CNN_COMMITS = 128


def cnn_scenario(rule: str, *, workers: int = 3, commits: int = CNN_COMMITS, **extra):
    """The paper's CNN on mnist-5k (b = 64): the exactness tests' workload."""
    optimizer = {"rule": rule, "lr": 0.05}
    if rule == "gem":
        optimizer["diagnostics_every"] = 8
    return Scenario.model_validate(
        {
            "name": f"real-{rule}",
            "seed": 11,
            "workers": {"count": workers, "compute": {"dist": "exponential", "mean": 0.05}},
            "budget": {"commits": commits},
            "problem": {"model": "cnn", "dataset": "mnist-5k", "batch_size": 64},
            "optimizer": optimizer,
            "eval": {"every": 10_000, "subset": 200},
            **extra,
        }
    )


def quadratic_scenario(*, n: int = 3, commits: int = 120, seed: int = 3, **blocks):
    """A cheap model for protocol tests (deaths, restarts, interrupts)."""
    config = {
        "name": "real-quadratic",
        "seed": seed,
        "workers": {
            "count": n,
            "compute": {"dist": "exponential", "mean": 0.02},
            "emulate_latency": True,  # the quadratic's own gradient takes microseconds
        },
        "budget": {"commits": commits},
        "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
        "optimizer": {"rule": "gem", "lr": 0.05},
    }
    for key, value in blocks.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return Scenario.model_validate(config)


# Rules whose worker or server state a join and a restart must carry, each with a late join
# and a scheduled restart (test_real_stateful_rules.py,
# and test_real_ray.py on Ray's instance).
STATEFUL_RULES = {
    "delay_adaptive": {"rule": "delay_adaptive", "lr": 0.05, "tau_c": 2.0},
    "fedbuff": {"rule": "fedbuff", "lr": 0.05, "window": 2, "buffer": 3, "server_lr": 0.9},
    "local": {"rule": "local", "lr": 0.01, "window": 2},
}


def join_and_restart_scenario(optimizer: dict):
    """Three workers on the quadratic: worker 2 joins at 0.5 s, worker 1 is killed at 1 s
    and restarts 0.5 s later (a new process: its pull hook runs fresh). Each worker takes
    150 mini-batch steps (3 s of emulated compute at least), so the run lasts until the
    restarted process has finished its share, however long it takes to start."""
    return quadratic_scenario(
        n=3,
        budget={"commits": None, "epochs_per_worker": 150},
        workers={
            "joins": [{"worker": 2, "at": 0.5}],
            "failures": [{"worker": 1, "at": 1.0, "restart_after": 0.5}],
        },
        optimizer=optimizer,
    )


def assert_join_and_restart_replay_bit_exactly(real, scenario) -> None:
    assert real.status.value == "ok"
    # (the process backend also lists the join, and a worker that has taken all its steps
    # as "died" with code 0; the join is checked on the trace below)
    events = [e for e in real.manifest["worker_events"] if e["event"] in ("killed", "restarted")]
    assert [(e["event"], e["worker"]) for e in events] == [("killed", 1), ("restarted", 1)]
    trace = real.trace
    restarted = events[1]["time"]
    late = np.flatnonzero(trace.fresh & (trace.pulled_version > 0))
    assert set(trace.worker[late].tolist()) == {1, 2}, "the join and the restart pull anew"
    assert np.any((trace.worker == 1) & (trace.time > restarted))
    replay = run(scenario, trace=trace)
    np.testing.assert_array_equal(flat(replay.params), flat(real.params))
    np.testing.assert_array_equal(replay.metrics["update_norm"], real.metrics["update_norm"])


def flat(params) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)])


def assert_replay_matches(real, replay) -> None:
    a, b = flat(real.params), flat(replay.params)
    bar = REPLAY_TOLERANCE * (1.0 + np.max(np.abs(a)))
    diff = np.max(np.abs(a - b))
    assert diff <= bar, f"replay differs from the real run by {diff:.3g} (bar {bar:.3g})"


def wait_no_children(timeout: float = 10.0) -> list:
    """The child processes still alive after `timeout` seconds (none, when all is well),
    which are then killed, so that a failing test leaves nothing running. The resource
    tracker and the fork server (multiprocessing's, kept for this process's later runs) are
    not the run's workers. A run joins its workers before it returns, so none
    should be found at all; the timeout only allows a loaded machine to finish reaping them."""
    deadline = time.monotonic() + timeout
    while True:
        children = [p for p in psutil.Process().children(recursive=True) if _is_worker(p)]
        if not children or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # a look at the process table every 0.2 s costs nothing
    for p in children:
        with suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(children, timeout=timeout)
    return children


def _is_worker(p: psutil.Process) -> bool:
    if not _running(p):
        return False
    line = cmdline(p)
    server = FORK_SERVER in line and not forked_by_fork_server(p)
    return "resource_tracker" not in line and not server


FORK_SERVER = "multiprocessing.forkserver"


def forked_by_fork_server(p: psutil.Process) -> bool:
    """A process backend's worker: a fork of multiprocessing's fork server (both show the
    server's command line; the server's parent is the run's process)."""
    try:
        parent = p.parent()
    except psutil.Error:
        return False
    return parent is not None and FORK_SERVER in cmdline(p) and FORK_SERVER in cmdline(parent)


# Starting a worker process (importing JAX, building its problem) takes seconds here; this
# bounds a broken one, allowing a machine 3x slower and loaded, with margin.
WARM_TIMEOUT_S = 300.0


def warm_worker_cache(scenario: Scenario) -> None:
    """Compile, in one process set up as the process backend sets up its workers (same
    `XLA_FLAGS`), the gradient each worker of `scenario` compiles before it says ready, so
    that the run's workers load it from the session's persistent cache (tests/conftest.py)
    instead of all compiling the same program at once. Worth it where compiling costs more
    than starting a process: the CNN with 3 workers or more."""
    context = _worker_context()  # the backend's fork server: the run's workers fork from it too
    process = context.Process(target=_compile_gradient, args=(real_job(scenario), dict(os.environ)))
    process.start()
    process.join(WARM_TIMEOUT_S)
    if process.is_alive():
        process.kill()
        process.join()
    assert process.exitcode == 0, f"compiling the workers' gradient failed: {process.exitcode}"


def _compile_gradient(job, environ: dict[str, str]) -> None:
    """What a worker compiles before `ready` (gemsim/real/_worker.py), with its settings."""
    from gemsim.real._compiled import Compiled

    use_worker_environment(environ)

    rule, problem = job.build()
    compiled = Compiled.of(rule, problem, job.n_workers)
    compiled.gradient(np.array(compiled.initial_rows()[0]), 0, 0)


# --- a `gemsim` command in a process group of its own, for the interrupt tests -----------

LAUNCHER = Path(__file__).with_name("launch_cli.py")
# Reaching a state (workers spawned, compiling, committing) takes seconds here; this allows
# for a machine 3x slower and loaded, with margin. It only bounds how long a broken run is
# waited for: a test that reaches its state never waits this long.
STATE_TIMEOUT_S = 300.0
POLL_S = 0.1  # how often the family is looked at (each look scans /proc)


class Cli:
    """`gemsim ARGS`, started through launch_cli.py (which sets the SIGINT disposition the
    test relies on) in a session of its own, its output in a file (no pipe to drain). Every
    process seen in its family is remembered: once the command dies they are re-parented and
    no longer found as its children. Leaving the `with` block kills the whole family, so a
    failing test leaves nothing running."""

    def __init__(
        self,
        args: list[str],
        folder: Path,
        launcher: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ):
        self.folder, self.log = folder, folder / "cli.log"
        command = [sys.executable, str(LAUNCHER), *launcher, "--", *args]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                command,
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        self.main = psutil.Process(self.proc.pid)
        self.seen = {self.main.pid: self.main}
        self.worker_pids: set[int] = set()  # told apart at first sight: a worker's parent dies
        self.mapped: dict[int, set[str]] = {}  # worker pid -> the shared memory it maps
        self.sent_at: float | None = None

    def __enter__(self) -> Cli:
        return self

    def __exit__(self, *exc) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for p in self.alive():
            with suppress(psutil.Error):
                p.kill()
        self.proc.wait(timeout=STATE_TIMEOUT_S)  # SIGKILL: at once, unless the kernel is stuck

    # --- looking ----------------------------------------------------------------------

    def look(self) -> list[psutil.Process]:
        """The family now (remembering newcomers and the shared memory they map)."""
        with suppress(psutil.Error):
            for p in self.main.children(recursive=True):
                if p.pid not in self.seen:
                    self.seen[p.pid] = p
                    if forked_by_fork_server(p):
                        self.worker_pids.add(p.pid)
        for p in self.workers():
            if len(self.mapped.get(p.pid, ())) < 2:  # the rows and the outbox, once mapped
                self.mapped[p.pid] = mapped_shm(p)
        return self.alive()

    @property
    def shm(self) -> set[str]:
        """Every shared-memory block a worker of the command was seen to map."""
        return set().union(*self.mapped.values())

    def alive(self) -> list[psutil.Process]:
        return [p for p in self.seen.values() if _running(p)]

    def workers(self) -> list[psutil.Process]:
        """The process backend's workers alive now."""
        return [p for p in self.alive() if p.pid in self.worker_pids]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until(self, reached, what: str, timeout: float = STATE_TIMEOUT_S) -> None:
        """Poll `reached()` until true; fail if the command ends first or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            self.look()
            if reached():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"gemsim ended before {what}:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.0f} s:\n{self.output()[-3000:]}")
            time.sleep(POLL_S)

    # --- signalling -------------------------------------------------------------------

    def send(self, signum: int, *, group: bool) -> None:
        """To the process group (a terminal's Ctrl-C, Slurm) or to the command only (`kill`,
        Kubernetes)."""
        self.look()
        self.sent_at = time.monotonic()
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)

    def wait_exit(self, bound: float) -> tuple[int, float]:
        """`(exit code, seconds since the signal)`; fails past `bound` seconds."""
        start = self.sent_at if self.sent_at is not None else time.monotonic()
        while self.proc.poll() is None:
            self.look()
            if time.monotonic() - start > bound:
                raise AssertionError(
                    f"gemsim still running {bound:.0f} s after the signal:\n{self.output()[-3000:]}"
                )
            time.sleep(POLL_S)
        return self.proc.returncode, time.monotonic() - start

    def left_behind(self, until: float) -> list[psutil.Process]:
        """The family's processes still running at monotonic time `until` (zombies, dead
        but not yet reaped by their new parent, count as gone), and the Ray processes of the
        command's Ray session wherever they are (`ray_processes_of`: also those never seen in
        the family, or re-parented before they were)."""
        while (left := self._left()) and time.monotonic() < until:
            time.sleep(POLL_S)
        return left

    def _left(self) -> list[psutil.Process]:
        alive = self.alive()
        pids = {p.pid for p in alive}
        return alive + [p for p in ray_processes_of(self.proc.pid) if p.pid not in pids]


def ray_processes_of(pid: int) -> list[psutil.Process]:
    """Ray's processes running on this machine (gcs_server, raylet, its Python helpers,
    agents and workers) of the Ray session that process `pid` started: each keeps files open
    in the session's folder, `session_<time>_<pid>`, whatever its parent now and whatever its
    command line says (an agent's names only itself)."""
    session = re.compile(rf"/session_[^/]*_{pid}/")
    found = []
    for p in psutil.process_iter():
        try:
            name = p.name()
            ray = name in ("gcs_server", "raylet") or name.startswith("ray::")
            if not (ray or "/ray/" in cmdline(p)) or not _running(p):
                continue
            if any(session.search(f.path) for f in p.open_files()):
                found.append(p)
        except psutil.Error:
            continue  # gone meanwhile
    return found


def proc_maps(p: psutil.Process) -> str:
    """The process's /proc/PID/maps ("" once it is gone); psutil's memory_maps reads smaps,
    which costs the kernel far more."""
    try:
        return Path(f"/proc/{p.pid}/maps").read_text()
    except OSError:
        return ""


def mapped_shm(p: psutil.Process) -> set[str]:
    """Names of the shared-memory blocks (multiprocessing's `psm_*`) the process maps."""
    return set(re.findall(r"/dev/shm/(psm_\w+)", proc_maps(p)))


def shm_bytes(names: set[str]) -> bytes | None:
    """The blocks' contents now (None once one is gone)."""
    try:
        return b"".join(Path("/dev/shm", n).read_bytes() for n in sorted(names))
    except OSError:
        return None


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""
