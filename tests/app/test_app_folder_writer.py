"""Run folders written in the background (`gemsim.app.sweep._folder_writer`): in order, every one
on disk before the sweep returns, and a failed write raised with the others left valid."""

import threading
import time

import pytest
import yaml
from scenario_docs import quadratic_doc

from gemsim.app.sweep import _folder_writer
from gemsim.app.sweep._folder_writer import FolderWriter
from gemsim.app.verbs._run_sweep import run_file
from gemsim.results import RunResult, read_run


class _Record:
    """Stands for a `RunResult`: its write sleeps as long as asked, or fails."""

    def __init__(self, name, seconds=0.0, error=None):
        self.name, self.seconds, self.error = name, seconds, error
        self.written = threading.Event()

    def write(self, out_dir):
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        (out_dir / self.name).write_text("x")
        self.written.set()


def test_folders_are_reported_in_submission_order_once_on_disk(tmp_path):
    seen = []

    def on_written(i, record):
        assert (tmp_path / record.name).is_file()  # reported once written, never before
        seen.append(i)

    # The first write is the slowest: the later ones finish first but wait their turn.
    records = [_Record("a", 0.3), _Record("b", 0.0), _Record("c", 0.1), _Record("d", 0.0)]
    with FolderWriter(tmp_path, on_written) as writer:
        for i, record in enumerate(records):
            writer.submit(i, record)
    assert seen == [0, 1, 2, 3]


def test_a_failed_write_is_raised_after_the_others_are_done(tmp_path):
    seen = []
    records = [_Record("a"), _Record("b", 0.2, OSError(28, "No space left on device"))]
    records.append(_Record("c", 0.3))
    writer = FolderWriter(tmp_path, lambda i, r: seen.append(i))
    for i, record in enumerate(records):
        writer.submit(i, record)
    with pytest.raises(OSError, match="No space left"):
        writer.close()
    # The write under way when the error came is finished, not cut off; only runs before the
    # failed one are reported.
    assert records[2].written.is_set() and seen == [0]
    # The next submit after an error raises it rather than writing on.
    late = FolderWriter(tmp_path, lambda i, r: None)
    late.submit(0, _Record("e", 0.0, ValueError("bad manifest")))
    _folder_writer.futures.wait(late._futures())
    with pytest.raises(ValueError, match="bad manifest"):
        late.submit(1, _Record("f"))
    assert not (tmp_path / "f").exists()


def test_the_sweeps_own_error_wins_and_its_records_are_still_written(tmp_path):
    seen = []
    with pytest.raises(KeyboardInterrupt), FolderWriter(tmp_path, lambda i, r: seen.append(i)) as w:
        w.submit(0, _Record("a", 0.2))
        raise KeyboardInterrupt  # Ctrl-C while the next unit executes
    assert (tmp_path / "a").is_file() and seen == [0]


def test_a_sweep_with_a_failing_write_keeps_the_folders_before_it(tmp_path, monkeypatch):
    doc = {**quadratic_doc(), "seeds": [0, 1, 2], "engine": {"many_runs": "off"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    real_write, calls = RunResult.write, []

    def write(self, out_dir):
        calls.append(self.run_id)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_write(self, out_dir)

    monkeypatch.setattr(RunResult, "write", write)
    with pytest.raises(OSError, match="No space left"):
        run_file(path, out=out, quiet=True)
    folders = sorted(p for p in out.iterdir() if not p.name.startswith("."))
    assert [p.name for p in folders] != [] and calls[1] not in {p.name for p in folders}
    for folder in folders:  # every folder there is whole
        assert read_run(folder).manifest.status == "ok"
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]  # nothing half-written


def test_an_interrupt_while_waiting_still_ends_the_writes_under_way(tmp_path, monkeypatch):
    real_wait, calls = _folder_writer.futures.wait, []

    def wait(pending):  # Ctrl-C arrives while the driver waits for the first time
        calls.append(len(pending))
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_wait(pending)

    monkeypatch.setattr(_folder_writer.futures, "wait", wait)
    seen, record = [], _Record("a", 0.3)
    writer = FolderWriter(tmp_path, lambda i, r: seen.append(i))
    writer.submit(0, record)
    with pytest.raises(KeyboardInterrupt):
        writer.close()
    # Waited again, or written by the driver itself if no thread had taken it yet.
    assert calls[0] == 1 and record.written.is_set() and seen == [0]


class _InterruptedQueue:
    """The writer's job queue, with Ctrl-C arriving inside `submit` as it hands a record
    over: before the hand-over, or once a thread may have taken it."""

    def __init__(self, jobs, after):
        self.jobs, self.after = jobs, after

    def put(self, job):
        if job is not None and self.after:
            self.jobs.put(job)
        if job is not None:
            raise KeyboardInterrupt
        self.jobs.put(job)

    def get(self):
        return self.jobs.get()


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_an_interrupt_inside_submit_still_writes_the_record_whole(tmp_path, after):
    """A Ctrl-C can come at any instruction of the driver, also while it hands a record to a
    thread: the record is written whole (by a thread or by the driver) before the writer is
    left, and reported."""
    seen, record = [], _Record("a", 0.2)
    with pytest.raises(KeyboardInterrupt), FolderWriter(tmp_path, lambda i, r: seen.append(i)) as w:
        w._jobs = _InterruptedQueue(w._jobs, after)
        w.submit(0, record)
    assert record.written.is_set() and seen == [0]
    for thread in w._threads:  # told to stop: none is left waiting for work
        thread.join(timeout=60)
        assert not thread.is_alive()
