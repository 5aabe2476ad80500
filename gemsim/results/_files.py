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
