"""`gemsim ARGS` with the signal dispositions a test relies on, whatever launched the suite.

    python launch_cli.py [--sigint ignored|default] [--signal-at-write NAME:N] -- ARGS

A background job of a non-interactive shell starts with SIGINT ignored, every child inherits
that, and Python then installs no KeyboardInterrupt handler: a test that sends SIGINT must say
which disposition it means. `--sigint default` (the default) is a terminal's; `ignored` is a
background job's. `--signal-at-write SIGTERM:2` sends the signal while the second run folder
of the sweep is being written (its trace is in the hidden folder, the rest is not): SIGINT to
the process group, as a terminal's Ctrl-C, SIGTERM to this process, as `kill` does. Writing
a folder takes milliseconds, too short a window to hit from outside.
"""

from __future__ import annotations

import os
import signal
import sys
import time

SENT = "launch_cli: signal sent at"


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    split = argv.index("--")
    head, args = argv[:split], argv[split + 1 :]
    return dict(zip(head[::2], head[1::2], strict=True)), args


def _signal_at_write(name: str, nth: int) -> None:
    from gemsim.trace import CommitTrace

    original = CommitTrace.to_parquet
    written = []

    def to_parquet(self, path):
        original(self, path)
        folder = os.path.basename(os.path.dirname(os.fspath(path)))
        if folder.startswith(".") and ".tmp-" in folder:  # a run folder being written
            written.append(folder)
            if len(written) == nth:
                signum = signal.Signals[name]
                # The system-wide monotonic clock: the test measures the shutdown from here.
                print(f"{SENT} {time.monotonic()!r}", file=sys.stderr, flush=True)
                if signum == signal.SIGINT:
                    os.killpg(0, signum)
                else:
                    os.kill(os.getpid(), signum)

    CommitTrace.to_parquet = to_parquet


def main() -> None:
    options, args = _options(sys.argv[1:])
    sigint = options.get("--sigint", "default")
    signal.signal(
        signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler
    )
    if "--signal-at-write" in options:
        name, nth = options["--signal-at-write"].split(":")
        _signal_at_write(name, int(nth))
    from gemsim.cli import app

    app(args=args, prog_name="gemsim")


if __name__ == "__main__":  # the workers import this file too (as `__mp_main__`)
    main()
