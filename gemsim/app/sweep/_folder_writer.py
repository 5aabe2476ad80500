"""Run folders written in the background while the sweep goes on: the driver hands each
record over as it arrives and executes the next unit while threads write (a folder is a few
parquet files, an archive and fsyncs: tens of milliseconds, of which pyarrow's writes and the
fsyncs release the GIL).

Folders are reported in the order the records were handed over, as each is on disk (a sweep's
rows and `--json` lines keep their order). Each folder is still written atomically by
`RunResult.write`; the first error of a write (or of reporting it) is raised by the next
`submit` or by `close`, after the writes under way are done, so nothing half-written is left
behind and the folders already reported stay valid. An interrupt (Ctrl-C, SIGTERM) in the
driver likewise waits for the writes under way: a run whose results were computed is kept,
whole, and the process never ends with a write cut off.

The threads are the writer's own, started before any write: an interrupt can come at any
instruction of the driver, also inside `submit`, and a pool that starts its threads on demand
(`ThreadPoolExecutor`) can then be left with a thread it does not know of, still writing when
the process exits. Here a record is queued before it is handed to a thread, and whichever
takes it first, a thread or the driver ending on an interrupt, writes it.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from pathlib import Path

from gemsim.results import RunResult

THREADS = 4
"""Writing threads: a sweep's last unit (nothing left to overlap) has its folders written
several at once, most of a folder's time being fsyncs, which wait on the disk without the
GIL: 16 folders of 20,000 commits took 0.27-0.37 s with four threads, 0.43-0.60 s with two and
0.62-0.74 s with one (a 2-core machine, benchmarks/fixed_costs.py's study)."""

OnWritten = Callable[[int, RunResult], None]
_Job = tuple[RunResult, Future]


class FolderWriter:
    """Writes records' run folders under `out_dir` in background threads, calling
    `on_written(index, record)` for each, in submission order, once its folder is written.

    Use as a context manager: leaving it waits for every write; leaving it without an
    exception raises the first write error.
    """

    def __init__(self, out_dir: Path, on_written: OnWritten, *, threads: int = THREADS):
        self.out_dir, self.on_written = Path(out_dir), on_written
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._queue: deque[tuple[int, RunResult, Future]] = deque()
        self._lock = threading.Lock()  # one reporter at a time, in order
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        for i in range(max(1, threads)):
            # Daemons: an idle one never holds the interpreter's exit; `_finish` stops them.
            thread = threading.Thread(target=self._work, name=f"gemsim-write-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, index: int, record: RunResult) -> None:
        """Write `record`'s folder in the background (raises an earlier write's error)."""
        self._raise()
        future: Future = Future()
        with self._lock:  # queued first: an interrupt from here on still finds it
            self._queue.append((index, record, future))
        future.add_done_callback(lambda _: self._report())
        self._jobs.put((record, future))

    def close(self) -> None:
        """Wait for every write; raise the first error."""
        self._finish()
        self._raise()

    def __enter__(self) -> FolderWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # the sweep's own error wins; what was computed is still written
            self._drain()

    def _finish(self) -> None:
        """Every write done and reported, even through an interrupt while waiting."""
        try:
            futures.wait(self._futures())
        except BaseException:
            self._drain()
            raise
        self._stop()
        self._report()

    def _drain(self) -> None:
        """After an interrupt (later signals are ignored, `interruptible`): the records no
        thread has taken are written here, those under way waited for, then all reported."""
        for _, record, future in self._snapshot():
            self._write(record, future)
        futures.wait(self._futures())
        self._stop()
        self._report()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._write(*job)

    def _write(self, record: RunResult, future: Future) -> None:
        """Write `record` unless a thread or the driver has taken it already."""
        try:
            claimed = future.set_running_or_notify_cancel()
        except RuntimeError:  # running or done: taken
            return
        if not claimed:
            return
        try:
            result = record.write(self.out_dir)
        except BaseException as exc:  # raised in the driver by submit or close
            future.set_exception(exc)
        else:
            future.set_result(result)

    def _stop(self) -> None:
        """Each thread ends once the jobs before its None are done (nothing waits for it)."""
        for _ in self._threads:
            self._jobs.put(None)

    def _snapshot(self) -> list[tuple[int, RunResult, Future]]:
        with self._lock:
            return list(self._queue)

    def _futures(self) -> list[Future]:
        return [future for _, _, future in self._snapshot()]

    def _report(self) -> None:
        """Report the written folders at the head of the queue, in order; stop at an error."""
        with self._lock:
            while self._queue and self._error is None and self._queue[0][2].done():
                index, record, future = self._queue.popleft()
                try:
                    future.result()
                    self.on_written(index, record)
                except BaseException as exc:  # raised in the driver by submit or close
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
