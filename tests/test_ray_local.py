"""Starting Ray for a command (`gemsim/_ray_local.py`), with a stand-in for Ray whose start
never returns until the test says so: a signal during the start abandons it at once, its
processes killed, and the start's thread cleans up after `ray.init` once that returns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gemsim._ray_local import running

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

TIMEOUT_S = 60.0  # bounds a broken start or clean-up, on a machine 3x slower and loaded


class Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise Stop(signum)


@pytest.fixture
def ray(tmp_path):
    fake = FakeRay(tmp_path)
    yield fake
    fake.returns.set()
    if fake.child is not None and not _gone(fake.child):  # a failed test's
        fake.child.kill()


@pytest.fixture
def raising_handlers():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in before:
        signal.signal(s, _raise_stop)
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


class FakeRay:
    """`init` starts a process that looks like one of Ray's (its command line holds /ray/),
    then waits until `returns` is set."""

    def __init__(self, folder: Path):
        self.script = folder / "ray" / "gcs_server.py"
        self.script.parent.mkdir()
        self.script.write_text("import time\ntime.sleep(600)\n")
        self.returns = threading.Event()
        self.started = threading.Event()
        self.child: psutil.Process | None = None
        self.initialized = False
        self.shutdowns = 0

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs) -> None:
        self.child = psutil.Process(subprocess.Popen([sys.executable, str(self.script)]).pid)
        # Popen returns once the child's exec has begun, maybe before its command line is set
        deadline = time.monotonic() + TIMEOUT_S
        while str(self.script) not in " ".join(self.child.cmdline()):
            assert time.monotonic() < deadline, "the child never showed its command line"
            time.sleep(0.01)
        self.started.set()
        self.returns.wait(TIMEOUT_S)
        self.initialized = True

    def shutdown(self) -> None:
        self.initialized = False
        self.shutdowns += 1


def _signal_once_started(ray: FakeRay, signum: int) -> None:
    def send():
        ray.started.wait(TIMEOUT_S)
        os.kill(os.getpid(), signum)

    threading.Thread(target=send, daemon=True).start()


def _gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_abandons_a_start_that_has_not_returned(signum, raising_handlers, ray):
    _signal_once_started(ray, signum)
    ran = []
    with pytest.raises(Stop) as stopped, running(ray, num_cpus=1):
        ran.append("the block")
    assert stopped.value.args == (signum,) and ran == []
    assert not ray.returns.is_set(), "the start had not returned"  # nor will it, until told
    assert _gone(ray.child), "the start's process was killed"
    assert signal.getsignal(signal.SIGTERM) is _raise_stop
    ray.returns.set()  # the start returns late, connected: its thread shuts it down
    deadline = time.monotonic() + TIMEOUT_S
    while ray.shutdowns == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ray.shutdowns == 1 and not ray.initialized


def test_a_start_that_returned_runs_the_block_then_is_shut_down(raising_handlers, ray):
    ray.returns.set()
    with running(ray, num_cpus=1):
        assert ray.initialized and not _gone(ray.child)
    assert ray.shutdowns == 1 and _gone(ray.child)  # left over after the shutdown: killed
    assert signal.getsignal(signal.SIGTERM) is _raise_stop


def test_ray_already_initialised_is_left_as_it_is(ray):
    ray.initialized = True
    with running(ray):
        pass
    assert ray.child is None and ray.shutdowns == 0
