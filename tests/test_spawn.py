"""Starting a child process: the parent's SIGINT/SIGTERM handlers wait until the start has
returned (an exception half-way through a spawn leaves the child reading a truncated pipe),
then run as they would have."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys

import pytest

from gemsim._spawn import signals_deferred, starting_child

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


class Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise Stop(signum)


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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_in_the_block_is_handled_when_it_ends(signum, raising_handlers):
    reached = []
    with pytest.raises(Stop) as stopped, signals_deferred():
        os.kill(os.getpid(), signum)
        reached.append("after the signal")  # the handler did not raise here
    assert reached == ["after the signal"] and stopped.value.args == (signum,)
    assert signal.getsignal(signum) is _raise_stop  # the handler is back


def test_no_signal_changes_nothing(raising_handlers):
    with signals_deferred():
        pass
    assert signal.getsignal(signal.SIGTERM) is _raise_stop
    assert signal.getsignal(signal.SIGINT) is _raise_stop


def test_default_and_ignored_dispositions_are_left_alone():
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with signals_deferred():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)  # ignored, as before
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def _exit_quietly():
    return None


def test_a_child_started_while_a_signal_comes_starts_whole(raising_handlers):
    """The signal arrives during the start: the child still gets its start-up data (it runs
    its target and exits 0), and the parent's handler raises after the start."""
    process = multiprocessing.get_context("spawn").Process(target=_exit_quietly)
    with pytest.raises(Stop), starting_child():
        os.kill(os.getpid(), signal.SIGTERM)
        process.start()
        started = process.pid
    assert started is not None
    process.join(60)  # a fresh interpreter's start-up, on a machine 3x slower and loaded
    assert process.exitcode == 0
