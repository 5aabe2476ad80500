"""A population's tasks, one row each (``clients_tasks.parquet``), loaded into a frame.

A population run's K slots serve N clients one task at a time; the trace holds the committed
tasks only, and ``worker_summary.parquet`` each client's counts. ``load_tasks`` reads every
task, lost ones and those still in flight at the end included (``plot_client_timeline`` draws
them).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pandas as pd

from gemsim.results._files import CLIENT_TASKS_FILE
from gemsim.results._run_columns import _DEFAULT_STATUSES
from gemsim.results._worker_frames import _joined, _per_worker
from gemsim.types import Status

TASK_COLUMNS = ("task", "client", "slot", "start", "end", "outcome", "commit", "staleness")
"""The columns of ``clients_tasks.parquet``, in order."""


def load_tasks(
    out_dir: str | os.PathLike[str], *, statuses: Iterable[Status | str] = _DEFAULT_STATUSES
) -> pd.DataFrame:
    """One row per (run, task) of the population runs, from each run's
    ``clients_tasks.parquet``.

    Columns: the run-level and sweep columns (as in :func:`load_results`), then ``task`` (its
    index, in the order the tasks started), ``client``, ``slot`` (the slot, i.e. the trace's
    ``worker``, that ran it), ``start`` (when the slot took the client), ``end`` (its commit's
    time in the trace; the time its client went down, for a lost task; NaN in flight at the
    end), ``outcome`` (``committed``, ``lost``, ``in_flight``), ``commit`` (its row in the
    trace, -1 if not committed) and ``staleness`` (the trace's, -1 if not committed). The
    committed rows are the trace's, row for row, and each client's tasks add up to its
    ``started``, ``commits`` and ``lost`` in :func:`load_worker_summary`.

    Args:
        out_dir: a results folder, or one run folder.
        statuses: run statuses to include (default ``ok`` and ``diverged``).
    """
    return _joined(*_per_worker(out_dir, CLIENT_TASKS_FILE, statuses), TASK_COLUMNS)
