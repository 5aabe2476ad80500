"""Start-up costs: the import time of `gemsim --help` and the wall time of `gemsim trace` on the
paper's figure-1 sweep (12 timing-only runs; it must never build a model or load data).

Bars (docs/design.md §9): `gemsim --help` <= 0.5 s of import; `gemsim trace
scenarios/paper/fig1.yaml` <= 3 s. Each command runs in a fresh interpreter, `--repeats`
times; the median is reported with the machine's load average.

    python benchmarks/startup.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_seconds(module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter (python -X importtime)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    last = [line for line in done.stderr.splitlines() if re.search(rf"\| {module}$", line)][-1]
    return int(last.split("|")[1]) / 1e6


def wall_seconds(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, capture_output=True, check=True, cwd=ROOT)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "gemsim"]
    rows = {
        "import gemsim.cli (s)": [import_seconds("gemsim.cli") for _ in range(args.repeats)],
        "gemsim --help, wall (s)": [wall_seconds([*cli, "--help"]) for _ in range(args.repeats)],
        "gemsim trace fig1.yaml, wall (s)": [
            wall_seconds([*cli, "trace", "scenarios/paper/fig1.yaml"]) for _ in range(args.repeats)
        ],
    }
    report = {
        "median": {k: statistics.median(v) for k, v in rows.items()},
        "all": rows,
        "load_average": os.getloadavg(),
        "cpu_count": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"load average {report['load_average'][0]:.2f} on {report['cpu_count']} cores")
    for name, values in rows.items():
        print(f"{name:<36} median {statistics.median(values):6.3f}   min {min(values):6.3f}")


if __name__ == "__main__":
    main()
