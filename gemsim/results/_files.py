"""The files of a run folder, by name (one home: readers and writers import them here)."""

MANIFEST_FILE = "manifest.json"
"""What ran and how it ended."""
TRACE_FILE = "trace.parquet"
"""The commit trace, one row per commit."""
METRICS_FILE = "metrics.parquet"
"""Per-commit metrics written by the engine."""
PARAMS_FILE = "params.npz"
"""Final central parameters, one array per leaf, keyed by its path."""
RUN_FILES = (MANIFEST_FILE, TRACE_FILE, METRICS_FILE, PARAMS_FILE)
"""Every file of a finished run's folder."""
WORKER_EVALS_FILE = "workers.parquet"
"""The central variable on each worker's own data at each evaluation, one row per (commit,
worker); only in the folders of runs whose workers have data of their own."""
WORKER_SUMMARY_FILE = "worker_summary.parquet"
"""One row per worker: its share of the commits and accepted commits, mean compute time, and
what it holds (shard size; the heterogeneous quadratic's optimum)."""
CLIENT_TASKS_FILE = "clients_tasks.parquet"
"""A population's tasks, one row per task: client, slot, start, end, outcome (committed, lost,
in flight at the end), commit and staleness; only in the folders of population runs."""
OPTIONAL_FILES = (WORKER_EVALS_FILE, WORKER_SUMMARY_FILE, CLIENT_TASKS_FILE)
"""Files a finished run's folder may hold (written since gemsim 0.3; `RUN_FILES` alone tell
whether a run finished)."""
