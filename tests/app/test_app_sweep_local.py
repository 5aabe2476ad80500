"""`gemsim run --jobs N` and `gemsim.run_sweep`: the same runs as one by one, whatever ends
the driver (Ctrl-C, a kill) no job process outlives it and no folder is half-written, `--resume`
after a kill redoes no finished run, and a crashed job process fails only its own run."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from scenario_docs import quadratic_doc

import gemsim
from gemsim.app.sweep._local_jobs import LocalPool, Lost, _pick, _Slot
from gemsim.app.sweep._trace_store import STORE_FOLDER
from gemsim.results import RUN_FILES, load_results, read_manifest

LAUNCHER = Path(__file__).parents[1] / "real" / "launch_cli.py"

# Repeats only: every run shares one compiled program, so each job process compiles once.
QUADRATIC = quadratic_doc(
    # One run per unit: these tests are about processes; runs executed together have their
    # own (tests/app/test_app_many_runs.py).
    engine={"many_runs": "off"},
    repeats=4,
)
# About a second per run once compiled, so that a kill lands between runs; whole chunks of
# 512 commits (one compiled segment length).
LONGER = {"budget": {"commits": 80 * 512}, "eval": {"every": 80 * 512}}


def write(tmp_path, doc, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_jobs_2_gives_the_runs_of_one_by_one(tmp_path):
    scenario = write(tmp_path, QUADRATIC)
    _, rows = gemsim.run_file(scenario, out=tmp_path / "one", quiet=True)
    frame = gemsim.run_sweep(scenario, jobs=2, out=tmp_path / "two", quiet=True)
    assert [r.status for r in rows] == ["ok"] * 4
    pids = set()
    for row in rows:
        one, two = (
            read_manifest(tmp_path / "one" / row.run_id),
            read_manifest(tmp_path / "two" / row.run_id),
        )
        for key in ("trace_sha256", "params_sha256", "status", "n_commits", "final"):
            assert one[key] == two[key], key
        placement = two["provenance"]["placement"]
        assert placement["scheduler"] == "local" and placement["pid"] != os.getpid()
        # The driver's CPUs (XLA:CPU's numbers depend on how many a process may use).
        assert placement["cpus"] == one["provenance"]["placement"]["cpus"]
        assert one["provenance"]["placement"]["scheduler"] == "in-process"
        # the driver's call, not the job process's (a run started from Python records its call)
        driver = f"gemsim.run_sweep({str(scenario)!r}, jobs=2, out={str(tmp_path / 'two')!r},"
        assert two["provenance"]["command"] == f"{driver} quiet=True)"
        pids.add(placement["pid"])
    assert len(pids) == 2  # each job process took a unit at once
    order = ["run_id", "commit"]
    expected = load_results(tmp_path / "one").sort_values(order, ignore_index=True)
    pd.testing.assert_frame_equal(frame.sort_values(order, ignore_index=True), expected)
    # A loaded scenario with overrides, in this process: the same first two runs.
    loaded = gemsim.load_scenario(scenario)
    two = gemsim.run_sweep(loaded, overrides={"repeats": 2}, out=tmp_path / "obj", quiet=True)
    assert sorted(two["run_id"].unique()) == sorted(r.run_id for r in rows[:2])


def test_an_idle_job_process_keeps_to_what_it_compiled():
    keys = ["a", "a", "b", "b", "c"]
    me, other = _Slot(), _Slot()
    me.key, other.key = "a", "b"
    queue = [1, 3, 4]
    assert _pick(queue, me, [me, other], keys) == 1  # its own key
    assert _pick(queue, me, [me, other], keys) == 4  # a key no other job process holds
    assert _pick(queue, me, [me, other], keys) == 3 and queue == []  # else any


def crashing_work(unit, progress):
    """Module level, so that spawned job processes import it by name."""
    kind = unit
    if kind == "exit":
        os._exit(3)
    if kind == "raise":
        raise RuntimeError("not a run's error")
    progress(1, 1)
    return kind, os.getpid()


def test_a_crashed_job_process_loses_only_its_unit_and_leaves_no_process():
    seen = []
    pool = LocalPool(2, crashing_work, on_progress=lambda *a: seen.append(a))
    units = ["a", "exit", "b", "raise", "c", "d"]
    got = dict(pool.results(units))
    assert sorted(got) == list(range(len(units)))
    assert isinstance(got[1], Lost) and "exit code 3" in got[1].reason
    assert isinstance(got[3], Lost) and "RuntimeError: not a run's error" in got[3].reason
    assert [got[i][0] for i in (0, 2, 4, 5)] == ["a", "b", "c", "d"]
    assert sorted(i for i, _, _ in seen) == [0, 2, 4, 5]
    assert [c for c in psutil.Process().children() if _is_job_process(c)] == []  # all joined


# Bounds on waiting for the sweep's processes. Here the driver starts its two job processes in a
# few seconds and a run takes about a second once compiled; each bound allows a machine 3x
# slower and loaded, with margin, and only limits how long a broken command is waited for.
START_TIMEOUT_S = 300  # the job processes running and the first runs finished
SWEEP_TIMEOUT_S = 600  # a whole resumed sweep (four runs left at most)
ORPHAN_TIMEOUT_S = 30  # a job process checks every 0.5 s that its driver is alive (WATCHDOG_S)
STOP_TIMEOUT_S = 60  # from Ctrl-C to the driver's exit: job processes killed, nothing written


def test_kill_then_resume_redoes_no_finished_run_and_leaves_no_orphan(tmp_path):
    doc = {**QUADRATIC, **LONGER, "repeats": 5}
    scenario, out = write(tmp_path, doc), tmp_path / "out"
    cmd = [sys.executable, "-m", "gemsim.cli", "run", str(scenario), "--out", str(out)]
    with Command([*cmd, "--jobs", "2", "--quiet"], tmp_path / "killed") as sweep:
        processes = _await(sweep, out, finished=1)
        sweep.proc.kill()
        sweep.proc.wait(timeout=STOP_TIMEOUT_S)
        before = {p: (p / "manifest.json").read_bytes() for p in _finished(out)}
        assert 1 <= len(before) < 5, "the kill must land in the middle of the sweep"
        _, alive = psutil.wait_procs(processes, timeout=ORPHAN_TIMEOUT_S)  # driver gone: exit
        assert alive == []
    with Command([*cmd, "--jobs", "2", "--resume", "--json", "--quiet"], tmp_path / "r") as resume:
        returncode = resume.proc.wait(timeout=SWEEP_TIMEOUT_S)
        assert returncode == 0, resume.stderr()
        runs = [json.loads(line) for line in resume.stdout().splitlines()]
    assert sum(r["skipped"] for r in runs) == len(before) and len(runs) == 5
    assert {p: (p / "manifest.json").read_bytes() for p in before} == before
    assert len(_finished(out)) == 5 and load_results(out)["run_id"].nunique() == 5


def test_ctrl_c_stops_every_job_process_and_writes_nothing_partial(tmp_path):
    doc = {**QUADRATIC, **LONGER}
    scenario, out = write(tmp_path, doc), tmp_path / "out"
    # Through the launcher, which gives SIGINT a terminal's disposition whatever started the
    # suite (a background job inherits it ignored); a session of its own: SIGINT to its
    # process group is what a terminal's Ctrl-C sends.
    cmd = [sys.executable, str(LAUNCHER), "--", "run", str(scenario), "--out", str(out)]
    with Command([*cmd, "--jobs", "2"], tmp_path / "sweep") as sweep:
        processes = _await(sweep, out, finished=0)
        time.sleep(1.0)  # into their imports or compilation (they take seconds)
        os.killpg(sweep.proc.pid, signal.SIGINT)
        returncode = sweep.proc.wait(timeout=STOP_TIMEOUT_S)
        assert returncode != 0
        assert "Traceback" not in sweep.stderr(), sweep.stderr()
        _, alive = psutil.wait_procs(processes, timeout=ORPHAN_TIMEOUT_S)
        assert alive == []
    for folder in out.iterdir() if out.exists() else ():
        if folder.name == STORE_FOLDER:  # the trace store: complete traces only
            assert all(len(p.name) == 137 for p in folder.glob("*.parquet")), list(folder.iterdir())
            continue
        assert not folder.name.startswith("."), f"{folder.name}: a half-written folder"
        assert all((folder / name).is_file() for name in RUN_FILES)


class Command:
    """A command in a session of its own, its output in files (no pipe to fill up while the
    test waits). Leaving the `with` block kills its process group and every process seen in
    its family (job processes re-parented once the driver dies are no longer in its group's tree),
    so a failing test leaves nothing running."""

    def __init__(self, args: list[str], stem: Path):
        self.out, self.err = stem.with_suffix(".out"), stem.with_suffix(".err")
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        self.family: dict[int, psutil.Process] = {}

    def __enter__(self) -> "Command":
        return self

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for p in self.family.values():
            with contextlib.suppress(psutil.Error):
                p.kill()
        self.proc.wait()  # SIGKILL: it ends at once
        psutil.wait_procs(list(self.family.values()), timeout=ORPHAN_TIMEOUT_S)

    def children(self) -> list[psutil.Process]:
        """The family now (remembered, to be killed on exit)."""
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                self.family.setdefault(p.pid, p)
        return list(self.family.values())

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")


def _await(command: Command, out: Path, *, finished: int) -> list[psutil.Process]:
    """The driver's two job processes once they run and `finished` folders exist."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert command.proc.poll() is None, f"the sweep ended early:\n{command.stderr()}"
        children = command.children()
        jobs = [c for c in children if _is_job_process(c)]
        if len(jobs) == 2 and len(_finished(out)) >= finished:
            return children
        time.sleep(0.02)  # a run takes about a second: the kill lands well within one
    pytest.fail(f"the sweep did not get going within {START_TIMEOUT_S} s:\n{command.stderr()}")


def _is_job_process(process: psutil.Process) -> bool:
    try:
        return "spawn_main" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _finished(out: Path) -> list[Path]:
    if not out.exists():
        return []
    return sorted(
        p for p in out.iterdir() if not p.name.startswith(".") and (p / "manifest.json").exists()
    )
