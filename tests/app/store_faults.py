"""Work for a timing process that stalls half-way through storing a trace (module level: a
spawned process imports it by name), for tests/app/test_app_trace_store.py."""

from __future__ import annotations

import time
from pathlib import Path


def stalled_store(task, progress) -> str:
    """Store a trace whose write stops after its temporary file is on disk; `reached` is
    created then, and the process waits there to be stopped."""
    from gemsim.app.sweep import _trace_store

    store, inputs, reached = task

    def stalled(trace, path) -> None:
        Path(path).write_bytes(b"half a trace")
        Path(reached).touch()
        time.sleep(600)

    _trace_store._write_trace = stalled
    return store.ensure(inputs)
