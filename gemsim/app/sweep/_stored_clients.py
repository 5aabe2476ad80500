"""A population's per-client report in the trace store (`_trace_store.py`): the timing model's
`timing.ClientReport` of the run that made the trace (each client's speed and time up, and
the tasks, lost ones included, whose per-client sums are its counts), written beside that
trace as `<key>-<sha256>.clients.npz` (the sha256 the file's own), and read back only if it
is that trace's (each committed task its row, of its client and slot)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from gemsim.trace import CommitTrace

CLIENTS_SUFFIX = ".clients.npz"
"""The end of a stored per-client report's name."""
TASK_COLUMNS = ("client", "slot", "start", "end", "outcome", "commit")
"""The columns of `timing.ClientTasks`, as stored."""
CLIENT_COLUMNS = ("speed", "up_seconds")
"""The per-client arrays stored beside the tasks (the counts are the tasks' sums)."""


def write_client_report(clients: Any, path: Path) -> None:
    """Write a population's per-client report (`timing.ClientReport`, with its tasks) at
    `path` (a seam: the tests make it fail as a full disk does)."""
    import numpy as np

    arrays = {f"task_{name}": getattr(clients.tasks, name) for name in TASK_COLUMNS}
    arrays.update({name: getattr(clients, name) for name in CLIENT_COLUMNS})
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def read_client_report(data: bytes, trace: CommitTrace) -> Any:
    """The `timing.ClientReport` of a stored file's bytes, checked against `trace`: its
    committed tasks are the trace's rows, each of the row's client and slot, and it has a
    speed and a time up for each of the trace's clients. Raises ValueError (or KeyError, for
    a file without the arrays) otherwise."""
    import numpy as np

    from gemsim import timing

    with np.load(io.BytesIO(data), allow_pickle=False) as stored:
        tasks = timing.ClientTasks(**{name: stored[f"task_{name}"] for name in TASK_COLUMNS})
        speed, up = (stored[name] for name in CLIENT_COLUMNS)
    rows = np.flatnonzero(tasks.commit >= 0)
    commit = tasks.commit[rows]
    ours = (
        trace.client is not None
        and len(speed) == len(up) == trace.n_clients
        and np.array_equal(np.sort(commit), np.arange(len(trace)))
        and np.array_equal(trace.client[commit], tasks.client[rows])
        and np.array_equal(trace.worker[commit], tasks.slot[rows])
    )
    if not ours:
        raise ValueError("the stored clients are not those of the trace stored with them")
    return timing.client_report(speed, tasks, up)


def client_report_parts(name: str) -> tuple[str, str] | None:
    """`(key, sha256)` of a stored per-client report's file name, None for any other name."""
    if not name.endswith(CLIENTS_SUFFIX):
        return None
    key, dash, digest = name[: -len(CLIENTS_SUFFIX)].partition("-")
    if not dash or len(key) != 64 or len(digest) != 64:
        return None
    return key, digest
