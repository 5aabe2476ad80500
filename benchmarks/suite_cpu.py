"""Where a command's CPU goes, by kind of process: the test suite's cost, whoever spends it.

A test's own `rusage` misses most of what the suite's real-backend tests cost: Ray's daemons
and actors are not its children, and a worker killed by a signal is reaped by a process that
is not the test's. This script runs a command (the README's `pytest` by default), looks at
every process that appears in /proc while it runs (every `--interval` seconds), keeps the
CPU time each one had used when last seen, and prints the totals by kind: the test
processes, multiprocessing children (real-backend workers, sweep jobs), Ray's processes,
notebook kernels, `gemsim` commands. A process that lives less than one interval is missed,
and one's last interval before it exits is lost: the table says how much of the machine's
busy time (from /proc/stat) it accounts for. Linux only.

    python benchmarks/suite_cpu.py [--interval 0.1] [--json] [-- pytest ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
KINDS = (  # (kind, substrings of the command line that mark it), the first match wins
    ("test process", ("exec(eval(sys.stdin.readline()))",)),  # a pytest-xdist worker
    ("multiprocessing child", ("multiprocessing",)),
    ("Ray", ("ray::", "/ray/")),
    ("notebook kernel", ("ipykernel",)),
    ("pytest", ("bin/pytest", "-m pytest")),
    ("gemsim command", ("bin/gemsim", "-m gemsim", "gemsim/cli.py", "launch_cli.py")),
)


def busy_seconds() -> float:
    """The machine's busy CPU time so far (user, nice, system, irq, softirq), in seconds."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / TICKS


def kind_of(cmdline: str) -> str:
    for kind, marks in KINDS:
        if any(mark in cmdline for mark in marks):
            return kind
    return "other: " + (Path(cmdline.split(" ", 1)[0]).name or "?")


def look(seen: dict, before: set) -> None:
    """Record every new process's CPU time (its own threads, not its children's)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in before:
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            fields = stat[stat.rfind(")") + 2 :].split()
            # utime, stime (fields 14, 15) and the start time (22) that makes a pid unique
            cpu = (int(fields[11]) + int(fields[12])) / TICKS
            key = (int(entry.name), fields[19])
            if key not in seen:
                cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
                seen[key] = [0.0, cmdline.decode(errors="replace").strip()]
            seen[key][0] = max(seen[key][0], cpu)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between looks")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("command", nargs="*", default=["pytest"], help="default: pytest")
    args = parser.parse_args()
    before = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    seen: dict = {}
    busy0, start = busy_seconds(), time.monotonic()
    child = subprocess.Popen(args.command)
    while child.poll() is None:
        look(seen, before)
        time.sleep(args.interval)
    look(seen, before)
    wall, busy = time.monotonic() - start, busy_seconds() - busy0
    cpu, count = Counter(), Counter()
    for seconds, cmdline in seen.values():
        kind = kind_of(cmdline)
        cpu[kind] += seconds
        count[kind] += 1
    report = {
        "command": args.command,
        "returncode": child.returncode,
        "wall_s": round(wall, 1),
        "machine_busy_s": round(busy, 1),
        "seen_s": round(sum(cpu.values()), 1),
        "kinds": {k: {"processes": count[k], "cpu_s": round(v, 1)} for k, v in cpu.most_common()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return child.returncode
    print(f"\n{' '.join(args.command)}: exit {child.returncode}, {wall:.1f} s wall")
    print(f"machine busy {busy:.1f} core-s; seen in its processes {report['seen_s']} core-s")
    print(f"{'kind':<32} {'processes':>9} {'core-s':>8} {'share':>6}")
    for kind, seconds in cpu.most_common():
        share = seconds / busy if busy else 0.0
        print(f"{kind:<32} {count[kind]:>9} {seconds:>8.1f} {share:>6.1%}")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
