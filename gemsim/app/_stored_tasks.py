"""A population's tasks in the trace store (`_trace_store.py`): their file, written beside the
trace they came with as `<key>-<sha256>.tasks.parquet` (the sha256 the file's own), and read
back only if they are that trace's (each committed task its row, of its client and slot)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from gemsim.trace import CommitTrace

TASKS_SUFFIX = ".tasks.parquet"
"""The end of a stored tasks file's name."""
TASK_COLUMNS = ("client", "slot", "start", "end", "outcome", "commit")
"""The columns of `timing.ClientTasks`, as stored."""


def write_tasks(tasks: Any, path: Path) -> None:
    """Write a population's tasks (`timing.ClientTasks`) as parquet at `path` (a seam: the
    tests make it fail as a full disk does)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({name: getattr(tasks, name) for name in TASK_COLUMNS})
    pq.write_table(table, path)


def read_tasks(data: bytes, trace: CommitTrace) -> Any:
    """The `timing.ClientTasks` of a stored file's bytes, checked against `trace`: its
    committed tasks are the trace's rows, each of the row's client and slot. Raises
    ValueError (or KeyError, for a file without the columns) otherwise."""
    import numpy as np
    import pyarrow.parquet as pq

    from gemsim import timing

    table = pq.read_table(io.BytesIO(data))
    tasks = timing.ClientTasks(**{name: table.column(name).to_numpy() for name in TASK_COLUMNS})
    rows = np.flatnonzero(tasks.commit >= 0)
    commit = tasks.commit[rows]
    ours = (
        trace.client is not None
        and np.array_equal(np.sort(commit), np.arange(len(trace)))
        and np.array_equal(trace.client[commit], tasks.client[rows])
        and np.array_equal(trace.worker[commit], tasks.slot[rows])
    )
    if not ours:
        raise ValueError("the stored tasks are not those of the trace stored with them")
    return tasks


def task_parts(name: str) -> tuple[str, str] | None:
    """`(key, sha256)` of a stored tasks file's name, None for any other name."""
    if not name.endswith(TASKS_SUFFIX):
        return None
    key, dash, digest = name[: -len(TASKS_SUFFIX)].partition("-")
    if not dash or len(key) != 64 or len(digest) != 64:
        return None
    return key, digest
