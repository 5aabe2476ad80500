"""The trace store (app/sweep/_trace_store.py): one trace per distinct timing, in a sweep, across
job processes and across invocations, without changing a bit of any run (hashes with and
without the store, cold and warm); a corrupt stored trace is simulated again, a full disk
leaves the run right and the store consistent; the key is canonical and changes with every
timing input; the timing processes that simulate ahead leave nothing running."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pytest
from scenario_docs import quadratic_doc, write_doc

import gemsim
from gemsim import config, timing
from gemsim.app.sweep import _trace_store
from gemsim.app.sweep._timing_key import canonical, timing_key
from gemsim.app.sweep._trace_ahead import TraceAhead
from gemsim.app.sweep._trace_store import STORE_FOLDER, TimingInputs, TraceStore
from gemsim.app.verbs import _run_sweep
from gemsim.results import read_manifest

# 2 learning rates x 2 seeds: 4 runs, 2 distinct timings (the learning rate is no timing input).
SWEEP = quadratic_doc(
    name="store", commits=120, every=60, sweep={"optimizer.lr": [0.02, 0.05]}, seeds=[1, 2]
)
HASHES = ("trace_sha256", "params_sha256")
ONE_BY_ONE = {"engine": {"many_runs": "off"}}
LAUNCHER = Path(__file__).parents[1] / "real" / "launch_cli.py"


def _manifests(out) -> dict[str, dict]:
    found = {}
    for path in out.glob("*/manifest.json"):
        m = json.loads(path.read_text())
        found[m["run_id"]] = m
    return found


def _counts(manifests) -> Counter:
    return Counter(m["provenance"]["trace_store"]["trace"] for m in manifests.values())


def _stored(out) -> list:
    return sorted(p.name for p in (out / STORE_FOLDER).iterdir() if p.name != ".locks")


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Each run of the sweep through `gemsim.run`: no store at all."""
    path = write_doc(tmp_path_factory.mktemp("alone"), SWEEP)
    scenario = config.load_scenario(path)
    return {
        run.config_hash[:12]: gemsim.run(run).manifest
        for run in config.expand(scenario, source=str(path))
    }


def _same_runs(manifests, alone) -> None:
    assert manifests.keys() == alone.keys()
    for run_id, m in manifests.items():
        assert m["status"] == "ok"
        for key in HASHES:
            assert m[key] == alone[run_id][key], (run_id, key)


@pytest.mark.bitexact
def test_a_sweep_simulates_each_timing_once_and_the_next_invocation_none(tmp_path, alone):
    path, out = write_doc(tmp_path, SWEEP), tmp_path / "out"
    gemsim.run_file(path, out=out, quiet=True)
    cold = _manifests(out)
    _same_runs(cold, alone)
    assert _counts(cold) == {"simulated": 2, "reused within the sweep": 2}
    assert len(_stored(out)) == 2
    # Later invocations: the same runs into a new folder's store (cold again), and runs of
    # new identities (other learning rates) into this one (warm).
    # Job processes share the store: still one simulation per timing.
    gemsim.run_sweep(path, out=tmp_path / "jobs", quiet=True, jobs=2, overrides=ONE_BY_ONE)
    in_jobs = _manifests(tmp_path / "jobs")
    _same_runs(in_jobs, alone)
    assert _counts(in_jobs) == {"simulated": 2, "reused within the sweep": 2}
    assert {m["provenance"]["placement"]["scheduler"] for m in in_jobs.values()} == {"local"}
    other = tmp_path / "other.yaml"  # learning rates 0.03 (new runs) and 0.05 (run again)
    other.write_text(path.read_text().replace("0.02", "0.03"))
    _, rows = gemsim.run_file(other, out=out, quiet=True)
    warm = {r.run_id: read_manifest(out / r.run_id) for r in rows}
    assert _counts(warm) == {"reused from the store": 4} and len(_stored(out)) == 2
    again = {k: m for k, m in warm.items() if k in alone}  # the store warm: the same bits
    assert len(again) == 2
    _same_runs(again, {k: alone[k] for k in again})
    shown = gemsim.app.render_show_run(gemsim.app.show_run(out / next(iter(warm))))
    assert "trace           reused from the store" in shown


def test_units_executed_here_share_the_traces_they_read(tmp_path, alone, monkeypatch):
    """Run by run (a unit each), the sweep's four runs of two timings read the store twice,
    not four times: a trace read stays in memory for this process's next units. The runs and
    their notes are those of a sweep that read it each time."""
    reads: Counter = Counter()
    read = TraceStore.read

    def counting(self, key):
        reads[key] += 1
        return read(self, key)

    monkeypatch.setattr(TraceStore, "read", counting)
    path, out = write_doc(tmp_path, SWEEP), tmp_path / "out"
    gemsim.run_file(path, out=out, quiet=True, overrides=ONE_BY_ONE)
    manifests = _manifests(out)
    _same_runs(manifests, alone)
    assert _counts(manifests) == {"simulated": 2, "reused within the sweep": 2}
    assert sorted(reads.values()) == [1, 1] and len(_stored(out)) == 2


def test_a_corrupt_stored_trace_is_simulated_again_never_used(tmp_path, alone):
    path, out = write_doc(tmp_path, SWEEP), tmp_path / "out"
    gemsim.run_file(path, out=out, quiet=True, overrides={"seeds": [1]})
    (stored,) = (out / STORE_FOLDER).glob("*.parquet")
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped bit: the file still parses as parquet
    stored.write_bytes(bytes(data))
    gemsim.run_file(path, out=out, quiet=True, overrides={"seeds": [1]})  # the same runs again
    again = _manifests(out)
    notes = [m["provenance"]["trace_store"] for m in again.values()]
    assert sorted(n["trace"] for n in notes) == ["reused within the sweep", "simulated"]
    assert any("sha256" in n.get("corrupt_copy", "") for n in notes), notes
    _same_runs(again, {k: alone[k] for k in again})
    (fresh,) = (out / STORE_FOLDER).glob("*.parquet")  # the corrupt file is gone
    store = TraceStore(out / STORE_FOLDER)
    assert store.read(fresh.name.split("-")[0])[0] is not None
    # A truncated one likewise.
    fresh.write_bytes(fresh.read_bytes()[:100])
    assert store.read(fresh.name.split("-")[0]) == (None, True)
    assert not fresh.exists()


def test_a_full_disk_while_storing_leaves_the_run_right_and_the_store_consistent(
    tmp_path, alone, monkeypatch
):
    def full_disk(trace, path):
        path.write_bytes(b"PAR1 half a file")  # what a write cut short leaves
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_trace_store, "_write_trace", full_disk)
    path, out = write_doc(tmp_path, SWEEP), tmp_path / "out"
    # One process (no timing process ahead: the patch would not reach it).
    monkeypatch.setattr("gemsim.app.verbs._run_sweep.timing_processes", lambda *a: 0)
    gemsim.run_file(path, out=out, quiet=True, overrides={"seeds": [1]})
    done = _manifests(out)
    _same_runs(done, {k: alone[k] for k in done})
    notes = sorted(
        (m["provenance"]["trace_store"] for m in done.values()), key=lambda n: n["trace"]
    )
    assert [n["trace"] for n in notes] == ["reused within the sweep", "simulated"]
    assert "No space left" in notes[1]["not_stored"]
    assert _stored(out) == []  # nothing half-written, no temporary file left


def test_the_key_is_canonical_and_follows_every_timing_input():
    spec = config.build_cluster(config.parse_scenario(quadratic_doc(), "k"))
    key = timing_key(spec, 11)
    again = config.build_cluster(config.parse_scenario(quadratic_doc(), "k"))
    assert timing_key(again, 11) == key
    # What the timing model does not read leaves the key alone.
    for other in (
        quadratic_doc(optimizer={"rule": "downpour", "lr": 0.3}),
        quadratic_doc(dim=3, every=7),
    ):
        assert timing_key(config.build_cluster(config.parse_scenario(other, "k")), 11) == key
    worker = spec.workers[0]
    changed = [
        dataclasses.replace(spec, workers=spec.workers[:-1]),
        dataclasses.replace(spec, workers=(dataclasses.replace(worker, speed=2.0),) * 4),
        dataclasses.replace(spec, workers=(worker.__class__(timing.Exponential(0.2)),) * 4),
        dataclasses.replace(spec, budget=timing.CommitBudget(201)),
        dataclasses.replace(spec, window=2),
        dataclasses.replace(spec, protocol=timing.Ssp(3)),
        dataclasses.replace(spec, push=timing.Constant(0.01)),
        dataclasses.replace(spec, service=timing.Constant(0.001)),
        dataclasses.replace(spec, discipline=timing.Discipline.RANDOM),
        dataclasses.replace(spec, bandwidth_bytes_per_s=1e6, model_bytes=400),
        dataclasses.replace(spec, pull_at=timing.PullAt.BEFORE_APPLY),
        dataclasses.replace(spec, ties=timing.Ties.BY_WORKER),
        dataclasses.replace(spec, stops=timing.DelayStops(2)),
        dataclasses.replace(spec, stops=timing.BatchRestarts(2)),
    ]
    keys = {timing_key(s, 11) for s in changed} | {timing_key(spec, 12)}
    keys.add(timing_key(spec, 11, schedule_seed=3))
    assert key not in keys and len(keys) == len(changed) + 2
    # Measured samples: by their bytes; one sample changed changes the key.
    samples = tuple(np.linspace(0.1, 0.2, 1000))
    laws = [timing.Empirical(samples), timing.Empirical((*samples[:-1], 0.3))]
    texts = {canonical(law) for law in laws}
    assert len(texts) == 2 and all(len(t) < 120 for t in texts)


def test_the_canonical_form_is_pinned_and_the_same_in_every_process():
    assert canonical(timing.Exponential(0.1)) == "Exponential(mean_s=0.1,)"
    assert canonical((1, 0.5, None, "a")) == "(1,0.5,None,'a',)"
    assert canonical(timing.Discipline.FIFO) == "Discipline.FIFO"
    assert canonical(np.float64(0.25)) == "0.25"
    digest = hashlib.sha256(bytes([0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0])).hexdigest()
    assert canonical(np.arange(3, dtype=">i4")) == f"array(<i4,[3],{digest})"
    with pytest.raises(TypeError, match="no canonical form for a object"):
        canonical(object())
    spec = config.build_cluster(config.parse_scenario(quadratic_doc(), "k"))
    code = (
        "from gemsim import config; from gemsim.app.sweep._timing_key import timing_key; "
        "from scenario_docs import quadratic_doc; "
        "print(timing_key(config.build_cluster(config.parse_scenario(quadratic_doc(), 'k')), 11))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.path.dirname(__file__) + "/.."}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == timing_key(spec, 11)


def test_timing_processes_leave_nothing_running_whatever_ends_the_sweep(tmp_path):
    store = TraceStore(tmp_path / STORE_FOLDER)
    base = config.build_cluster(config.parse_scenario(quadratic_doc(commits=20_000), "a"))
    units = [[TimingInputs(base, seed)] for seed in range(6)]
    me = psutil.Process()
    with pytest.raises(KeyboardInterrupt), TraceAhead(store, units, processes=1) as ahead:
        ahead.at(0)
        deadline = time.monotonic() + 60
        while not store.keys() and time.monotonic() < deadline:
            time.sleep(0.05)
        helpers = [p for p in me.children() if "spawn_main" in " ".join(p.cmdline())]
        assert helpers and store.keys() <= {u[0].key for u in units[:3]}  # 2 units ahead
        raise KeyboardInterrupt  # Ctrl-C in the executing process
    _, alive = psutil.wait_procs(helpers, timeout=5)
    assert alive == []
    names = _stored(tmp_path)
    assert all(len(name) == 137 for name in names), names  # complete traces only


def test_a_timing_process_stopped_while_it_stores_a_trace_leaves_no_file(tmp_path):
    """SIGTERM (how a sweep stops a timing process under way) ends the store's write as an
    exception would: its temporary file is removed and the store holds nothing (killed at
    once, the process would leave it behind)."""
    from multiprocessing import get_context

    from store_faults import stalled_store

    from gemsim.app.sweep._local_jobs import job_main
    from gemsim.app.sweep._trace_ahead import timing_setup

    store = TraceStore(tmp_path / STORE_FOLDER)
    inputs = TimingInputs(config.build_cluster(config.parse_scenario(quadratic_doc(), "a")), 1)
    reached = tmp_path / "reached"
    ctx = get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(
        target=job_main, args=(child, os.getpid(), stalled_store, timing_setup), daemon=True
    )
    process.start()
    try:
        parent.send(("unit", 0, (store, inputs, str(reached))))
        deadline = time.monotonic() + 120  # a spawn and its imports: seconds on a slow machine
        while not reached.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reached.exists(), "the timing process never began to store its trace"
        assert [p.name for p in store.root.iterdir() if p.suffix == ".tmp"]  # half a trace
        process.terminate()
        process.join(60)
        assert process.exitcode == 128 + signal.SIGTERM  # SystemExit, not the signal's kill
    finally:
        if process.is_alive():
            process.kill()
            process.join()
    assert _stored(tmp_path) == [] and store.keys() == set()


def test_timing_processes_started_before_their_work_take_it_then_stop(tmp_path):
    # A sweep starts its timing processes before its checks (their interpreters come up
    # meanwhile) and assigns the traces once it knows them; they end by themselves once the
    # last unit is under way with every trace handed out.
    store = TraceStore(tmp_path / STORE_FOLDER)
    base = config.build_cluster(config.parse_scenario(quadratic_doc(commits=2000), "a"))
    units = [[TimingInputs(base, seed)] for seed in range(3)]
    me = psutil.Process()
    with TraceAhead(processes=1) as ahead:
        helpers = [p for p in me.children() if "spawn_main" in " ".join(p.cmdline())]
        time.sleep(0.3)
        assert helpers and not store.root.exists()  # nothing to simulate yet
        ahead.assign(store, units, stored=set())
        deadline = time.monotonic() + 60
        while len(store.keys()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.keys() == {u[0].key for u in units}  # the unit under way and 2 ahead
        ahead.at(2)  # the last unit under way, nothing left to simulate: they end now
        _, alive = psutil.wait_procs(helpers, timeout=30)
        assert alive == []


def test_a_sweep_that_fails_its_checks_leaves_no_timing_process(tmp_path, monkeypatch):
    doc = quadratic_doc(seeds=[0, 1, 2])
    doc["problem"] = {"model": {"name": "mlp"}, "dataset": "digits", "batch_size": 10**6}
    started, up_during_checks = [], []
    checks = _run_sweep.preflight

    # The sweep's own TraceAhead names its processes: a child found by its command line could
    # be caught between fork and exec, still showing this process's (seen on a loaded host).
    class Recorded(_run_sweep.TraceAhead):
        def __enter__(self):
            entered = super().__enter__()
            started.extend(psutil.Process(slot.process.pid) for slot in self._slots)
            return entered

    def preflight(*args, **kwargs):  # the timing processes are up while the checks run
        up_during_checks.extend(p for p in started if p.is_running())
        return checks(*args, **kwargs)

    monkeypatch.setattr(_run_sweep, "TraceAhead", Recorded)
    monkeypatch.setattr(_run_sweep, "timing_processes", lambda *a: 1)  # on 1 CPU as well
    monkeypatch.setattr(_run_sweep, "preflight", preflight)
    with pytest.raises(config.ScenarioError, match="batch"):
        gemsim.run_file(write_doc(tmp_path, doc), out=tmp_path / "out", quiet=True)
    assert started and up_during_checks == started
    _, alive = psutil.wait_procs(started, timeout=5)
    assert alive == [] and not (tmp_path / "out").exists()


def test_ctrl_c_stops_the_timing_processes_and_leaves_the_store_whole(tmp_path):
    doc = quadratic_doc(name="ahead", commits=60_000, every=60_000, seeds=list(range(8)))
    path, out = write_doc(tmp_path, {**doc, **ONE_BY_ONE}), tmp_path / "out"
    cmd = [sys.executable, str(LAUNCHER), "--", "run", str(path), "--out", str(out), "--quiet"]
    err = tmp_path / "stderr"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    family: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                family.setdefault(child.pid, child)
            if (out / STORE_FOLDER).is_dir() and _stored(out):
                break  # a timing process has stored a trace ahead of execution
            time.sleep(0.02)
        assert proc.poll() is None and _stored(out), err.read_text()
        assert any("spawn_main" in " ".join(p.cmdline()) for p in family.values())
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) != 0
        assert "Traceback" not in err.read_text(), err.read_text()
        _, alive = psutil.wait_procs(list(family.values()), timeout=30)
        assert alive == []
        assert all(len(name) == 137 for name in _stored(out))  # complete traces only
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in family.values():
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait()


def test_the_key_hashes_every_file_of_the_timing_models_source():
    """A checkout whose timing code changed reuses no stored trace: the key's source digest
    covers `gemsim/timing/*.py`, `gemsim/trace.py` and the trace's own modules, found here
    from the package's location (not from the key's module's)."""
    from gemsim.app.sweep._timing_key import timing_source_sha256

    package = Path(gemsim.__file__).resolve().parent
    files = sorted((package / "timing").glob("*.py")) + [package / "trace.py"]
    files += sorted(package.glob("_trace_*.py"))
    assert len(files) > 20 and all(f.is_file() for f in files)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(package).as_posix().encode() + b"\x00")
        digest.update(path.read_bytes() + b"\x00")
    assert timing_source_sha256() == digest.hexdigest()
