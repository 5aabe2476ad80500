"""Progress of long runs: a tqdm bar on a terminal or in Jupyter, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

PLAIN_LINE_EVERY_S = 10.0  # plain lines at most this often, so CI logs stay readable


class ProgressBar:
    """Commits done / total, rate and ETA; `quiet` silences it. Called as `bar(done, total)`;
    `total <= 0` means unknown (a budget in seconds of a real run): no ETA then."""

    def __init__(self, label: str, *, quiet: bool = False, stream: TextIO | None = None):
        self.label, self.quiet = label, quiet
        self.stream = stream or sys.stderr
        self._bar = None
        self._start = time.perf_counter()
        self._last_line = -PLAIN_LINE_EVERY_S

    def __call__(self, done: int, total: int) -> None:
        if self.quiet:
            return
        if _interactive(self.stream):
            self._tqdm(total).update(done - self._tqdm(total).n)
            return
        now = time.perf_counter() - self._start
        last = 0 < total <= done
        if not last and now - self._last_line < PLAIN_LINE_EVERY_S:
            return
        self._last_line = now
        rate = done / now if now > 0 else float("nan")
        if total <= 0:
            line = f"{self.label}: {done} commits, {rate:.0f} commits/s"
        else:
            eta = (total - done) / rate if rate > 0 else float("nan")
            line = f"{self.label}: {done}/{total} commits, {rate:.0f} commits/s, ETA {eta:.0f} s"
        print(line, file=self.stream, flush=True)

    def _tqdm(self, total: int):
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total if total > 0 else None, desc=self.label, unit="commit", file=self.stream
            )
        return self._bar

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _interactive(stream: TextIO) -> bool:
    if "ipykernel" in sys.modules:
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class SweepProgress:
    """The whole sweep at once, for runs that execute elsewhere (worker processes, Ray tasks):
    runs finished out of the runs to do, and the commits of the work under way. A tqdm bar on
    a terminal or in Jupyter, with a line above it per finished run; plain lines otherwise
    (one per finished run, and what is under way at most every PLAIN_LINE_EVERY_S)."""

    def __init__(
        self, total: int, *, label: str = "sweep", quiet: bool = False, stream: TextIO | None = None
    ):
        self.total, self.label, self.quiet = total, label, quiet
        self.stream = stream or sys.stderr
        self.done = 0
        self._running: dict[str, str] = {}  # what is under way -> its commits so far
        self._bar = None
        self._start = time.perf_counter()
        self._last_line = 0.0

    def update(self, key: str, done: int, total: int) -> None:
        """`key` (a run id, or the ids of a unit) has executed `done` of `total` commits."""
        self._running[key] = f"{done}/{total}" if total > 0 else f"{done}"
        self._show()

    def finished(self, key: str, line: str) -> None:
        """`key` is done; `line` says how it ended."""
        self._running.pop(key, None)
        self.done += 1
        if self.quiet:
            return
        text = f"[{self.done}/{self.total}] {line}"
        if _interactive(self.stream):
            from tqdm.auto import tqdm

            tqdm.write(text, file=self.stream)
            self._tqdm().update(1)
        else:
            print(text, file=self.stream, flush=True)
        self._show()

    def _show(self) -> None:
        if self.quiet:
            return
        under_way = ", ".join(f"{k} {v}" for k, v in self._running.items())
        if _interactive(self.stream):
            self._tqdm().set_postfix_str(under_way)
            return
        now = time.perf_counter() - self._start
        if not under_way or now - self._last_line < PLAIN_LINE_EVERY_S:
            return
        self._last_line = now
        line = f"{self.label}: {self.done}/{self.total} runs done; under way {under_way} commits"
        print(line, file=self.stream, flush=True)

    def _tqdm(self):
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=self.label, unit="run", file=self.stream)
        return self._bar

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
