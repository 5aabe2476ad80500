"""The test suite under load: a pytest command run N times beside K CPU-bound processes.

Reports, per run, the exit code, pytest's counts (passed, failed, skipped, errors), the
wall time, and the processes the run left behind (orphans: any process still carrying the
run's marker in its environment once pytest has exited; they are killed). A suite whose
tests wait on time or on other processes with too little margin fails here first.

Runs are started directly, or (`--launch background`) as a background job of a
non-interactive shell, the way a script started with `bash script.sh &` runs them: SIGINT
and SIGQUIT are then ignored from the start, and every process inherits that.

Usage::

    python benchmarks/stress_suite.py --runs 3 --hogs 2 -- pytest -q tests/real tests/app
    python benchmarks/stress_suite.py --launch background --json out.json -- pytest -q
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = "STRESS_SUITE_RUN"  # set in each run's environment, inherited by all it starts
COUNTS = ("passed", "failed", "skipped", "errors", "xfailed", "xpassed")
# A run longer than this is stopped and reported as timed out: the suite's budget is 8 min on
# a 2-core machine; three times that allows for the load this script adds.
RUN_TIMEOUT_S = 3 * 8 * 60


@dataclass
class RunReport:
    run: int
    launch: str
    returncode: int | None  # None: timed out
    wall_s: float
    orphans: int
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    xfailed: int = 0
    xpassed: int = 0
    summary: str = ""  # pytest's last line


def parse_summary(output: str) -> dict:
    """pytest's counts from its final summary line ("1 failed, 665 passed in 938.2s")."""
    lines = [x for x in output.strip().splitlines() if re.search(r"\bin [\d.]+s\b", x)]
    if not lines:
        return {"summary": output.strip().splitlines()[-1] if output.strip() else ""}
    line = lines[-1].strip("= ")
    found = {"summary": line}
    for number, word in re.findall(r"(\d+) (\w+)", line):
        word = "errors" if word == "error" else word
        if word in COUNTS:
            found[word] = int(number)
    return found


@contextmanager
def cpu_hogs(k: int) -> Iterator[list[subprocess.Popen]]:
    """K processes spinning on the CPU until the block ends."""
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(k)
    ]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def marked_processes(tag: str) -> list[int]:
    """Pids whose environment carries MARKER=tag (Linux /proc; empty elsewhere)."""
    needle = f"{MARKER}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def one_run(i: int, command: list[str], launch: str, timeout: float, log_dir: Path) -> RunReport:
    """Run the command once; its output goes to a file (no pipe to drain)."""
    tag = f"{os.getpid()}-{i}"
    env = {**os.environ, MARKER: tag}
    line = shlex.join(command)
    # A background job of a non-interactive shell: SIGINT and SIGQUIT ignored from the start.
    argv = ["bash", "-c", f"{line} & wait $!"] if launch == "background" else command
    log = log_dir / f"run-{i}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )  # fmt: skip
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - started
    orphans = marked_processes(tag)
    kill_all(orphans)
    counts = parse_summary(log.read_text(errors="replace"))
    return RunReport(i, launch, returncode, round(wall, 1), len(orphans), **counts)


def passed(r: RunReport) -> bool:
    return r.returncode == 0 and r.failed == r.errors == r.orphans == 0


def table(reports: list[RunReport]) -> str:
    head = ["run", "launch", "rc", "passed", "failed", "errors", "skipped", "wall s", "orphans"]
    rows = [
        [r.run, r.launch, "timeout" if r.returncode is None else r.returncode, r.passed,
         r.failed, r.errors, r.skipped, f"{r.wall_s:.1f}", r.orphans]
        for r in reports
    ]  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    lines = ["  ".join(str(x).rjust(w) for x, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)), *lines])


def environment(hogs: int) -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "hogs": hogs,
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times (default 3)")
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes (default 2)")
    parser.add_argument(
        "--launch", choices=("direct", "background", "both"), default="direct",
        help="direct, as a background job of a non-interactive shell, or alternating",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per run")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument("--logs", type=Path, help="keep each run's output here (run-N.log)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the pytest command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --, e.g. -- pytest -q tests/real")
    env = environment(args.hogs)
    reports = []
    with tempfile.TemporaryDirectory(prefix="stress-suite-") as scratch, cpu_hogs(args.hogs):
        logs = args.logs or Path(scratch)
        logs.mkdir(parents=True, exist_ok=True)
        for i in range(args.runs):
            launch = args.launch
            if launch == "both":
                launch = "direct" if i % 2 == 0 else "background"
            report = one_run(i, command, launch, args.timeout, logs)
            reports.append(report)
            print(f"run {i} ({launch}, {report.wall_s:.0f} s): {report.summary}", flush=True)
    print(table(reports))
    ok = sum(passed(r) for r in reports)
    walls = [r.wall_s for r in reports]
    print(
        f"{ok}/{len(reports)} runs passed with no orphans; wall {min(walls):.0f}-"
        f"{max(walls):.0f} s beside {args.hogs} CPU hogs on {env['cpu_count']} CPUs; "
        f"command: {shlex.join(command)}"
    )
    result = {"command": command, "environment": env, "runs": [asdict(r) for r in reports]}
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if ok == len(reports) else 1


if __name__ == "__main__":
    sys.exit(main())
