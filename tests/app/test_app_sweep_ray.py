"""`gemsim run --scheduler ray` on a local Ray instance with two worker processes: the runs of
one-by-one execution, a task whose worker is killed is retried by Ray and says so in its
manifest, and `--resume` redoes only what is missing. One instance for the module (Ray is slow
to start)."""

import contextlib
import json
import signal
import threading
import time

import psutil
import pytest
import yaml
from scenario_docs import quadratic_doc
from typer.testing import CliRunner

import gemsim
from gemsim.cli import app
from gemsim.results import read_manifest

ray = pytest.importorskip("ray")

QUADRATIC = quadratic_doc(
    seed=5,
    # One run per task: a killed task must be one run (runs together: test_app_many_runs.py).
    engine={"many_runs": "off"},
    repeats=3,
)


@pytest.fixture(scope="module")
def local_ray():
    """`ray.init` replaces pytest's SIGTERM handler, and `ray.shutdown` resets SIGTERM to its
    default action: the handler in place before is put back after each."""
    before = signal.getsignal(signal.SIGTERM)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    signal.signal(signal.SIGTERM, before)
    try:
        yield
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, before)


@pytest.fixture(scope="module")
def ray_sweep(local_ray, tmp_path_factory):
    """A sweep sent to Ray while the first task to start has its worker process killed."""
    tmp = tmp_path_factory.mktemp("ray")
    scenario = tmp / "s.yaml"
    scenario.write_text(yaml.safe_dump(QUADRATIC))
    killed, done = [], threading.Event()
    killer = threading.Thread(target=_kill_first_task, args=(killed, done), daemon=True)
    killer.start()
    try:
        gemsim.run_sweep(scenario, scheduler="ray", out=tmp / "ray", quiet=True)
    finally:
        done.set()  # the killer stops looking (it has found its task, if there was one)
        killer.join()
    _, rows = gemsim.run_file(scenario, out=tmp / "here", quiet=True)
    return scenario, tmp, rows, killed


def test_ray_sweep_gives_the_runs_of_one_by_one_and_records_the_retry(ray_sweep):
    _, tmp, rows, killed = ray_sweep
    assert len(killed) == 1, "no task was under way to be killed"
    attempts = []
    for row in rows:
        here, there = (
            read_manifest(tmp / "here" / row.run_id),
            read_manifest(tmp / "ray" / row.run_id),
        )
        for key in ("trace_sha256", "params_sha256", "status", "n_commits", "final"):
            assert here[key] == there[key], key
        placement = there["provenance"]["placement"]
        assert placement["scheduler"] == "ray" and placement["node"]
        attempts.append(placement["attempt"])
        if placement["attempt"] == 0:
            assert placement["pid"] != killed[0]
    assert sorted(attempts) == [0, 0, 1]  # the killed task ran again, and says so


def test_resume_on_ray_redoes_only_what_is_missing(ray_sweep):
    scenario, tmp, rows, _ = ray_sweep
    gone = tmp / "ray" / rows[1].run_id
    expected = read_manifest(gone)["params_sha256"]
    for path in gone.iterdir():
        path.unlink()
    gone.rmdir()
    args = ["run", str(scenario), "--out", str(tmp / "ray"), "--scheduler", "ray"]
    result = CliRunner().invoke(app, [*args, "--resume", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    runs = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(r["skipped"] for r in runs) == [False, True, True]
    assert read_manifest(gone)["params_sha256"] == expected


# Ray's worker processes start within seconds here and the first task begins at once; this
# allows a machine 3x slower and loaded, with margin (a test that finds none fails).
FIND_TASK_S = 300


def _kill_first_task(killed: list[int], done: threading.Event) -> None:
    """SIGKILL the first Ray worker process seen executing a sweep task (a lost worker):
    among this test's own descendants only (Ray's workers are its raylet's children), never
    another program's Ray on the same machine."""
    deadline = time.monotonic() + FIND_TASK_S
    me = psutil.Process()
    while time.monotonic() < deadline and not done.is_set():
        for process in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if process.cmdline()[:1] and process.cmdline()[0].startswith("ray::ray_unit"):
                    process.kill()
                    killed.append(process.pid)
                    return
        time.sleep(0.05)  # a task lasts seconds: it is found while it runs
