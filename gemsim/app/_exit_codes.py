"""The exit codes of every verb, in one place: the command line returns them, `gemsim --help`
prints `EXIT_CODES_HELP`, and a test holds the README's table to them."""

from __future__ import annotations

import signal
from enum import IntEnum

# From the signal to the end of `gemsim run`, every process it started gone: the documented
# bounds (measured figures in benchmarks/RESULTS.md, "Figures the code cites"). Stopping a local Ray
# instance takes seconds; one still starting is abandoned at once (gemsim/_ray_local.py).
SHUTDOWN_BOUND_S = 10.0
RAY_SHUTDOWN_BOUND_S = 20.0


class ExitCode(IntEnum):
    """How a `gemsim` command ends."""

    OK = 0
    """Every run finished `ok` or `diverged` (a divergence is a result)."""
    CHECK_FAILED = 1
    """A `gemsim validate` check failed."""
    USER_ERROR = 2
    """A user error (file, field, value, argument), found before anything runs."""
    RUN_FAILED = 3
    """Some run `failed`: its id and first error line on stderr, the error in its manifest."""
    SIGINT = 128 + signal.SIGINT
    """Interrupted by SIGINT (Ctrl-C), as shells report a death by that signal."""
    SIGTERM = 128 + signal.SIGTERM
    """Interrupted by SIGTERM (what Slurm, Kubernetes and Ray send)."""


EXIT_CODES_HELP = (
    f"Exit codes: {ExitCode.OK} every run ok or diverged; {ExitCode.CHECK_FAILED} a validate "
    f"check failed; {ExitCode.USER_ERROR} a user error\n(bad file, field, value or argument); "
    f"{ExitCode.RUN_FAILED} some run failed; {ExitCode.SIGINT}/{ExitCode.SIGTERM} interrupted "
    f"by SIGINT/SIGTERM\n(within {SHUTDOWN_BOUND_S:g} s on the process backend, "
    f"{RAY_SHUTDOWN_BOUND_S:g} s on Ray; no process left; finished runs kept)."
)
