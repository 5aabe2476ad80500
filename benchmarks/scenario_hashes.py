"""Run ids, trace hashes and parameter hashes of every bundled scenario, recorded or checked.

A change meant to keep behaviour (a rename, a refactor, a speed-up, a new option left out)
proves it with this script: record before the change, check after.

    python benchmarks/scenario_hashes.py record hashes.json   # before
    python benchmarks/scenario_hashes.py check hashes.json    # after: exit 1 on a difference

For every expanded run of every scenario under scenarios/: its run id (the identity of its
resolved configuration; no simulation), and, for the first `--traces` runs of each file, the
sha256 of its simulated trace with the budget cut to `--commits` commits, and, for a run with
a problem and an optimizer, the sha256 of the parameters it reaches on that trace
(`--timing-only`: traces alone, and a check then compares run ids and traces only, whether
or not the file holds parameter hashes). Cutting the budget changes the run (so its id), not
the code paths it goes through. Parameters are compared on one machine (XLA's CPU results
depend on the instruction set and the number of CPUs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def hashes(traces: int, commits: int, execute: bool) -> dict[str, dict]:
    from gemsim import config
    from gemsim.app import run, simulate_timing

    out: dict[str, dict] = {}
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        name = str(path.relative_to(ROOT))
        scenario = config.load_scenario(path)
        runs = config.expand(scenario, name, base_dir=path.parent)
        entry = {"run_ids": [r.config_hash[:12] for r in runs], "traces": [], "params": []}
        for r in runs[:traces]:
            data = r.scenario.model_dump(mode="json", by_alias=True)
            data.update(budget={"commits": commits}, sweep={}, repeats=1)
            data.pop("seeds", None)
            if data.get("eval"):
                evals = {k: v for k, v in data["eval"].items() if k != "every_seconds"}
                data["eval"] = {**evals, "every": commits}
            cut = config.parse_scenario(data, name, base_dir=path.parent)
            entry["traces"].append(simulate_timing(cut).sha256())
            if execute and cut.problem is not None and cut.optimizer is not None:
                result = run(cut)
                entry["params"].append(result.manifest["params_sha256"])
        out[name] = entry
        print(f"{name}: {len(runs)} runs, {len(entry['params'])} executed", file=sys.stderr)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "check"))
    parser.add_argument("file", type=Path)
    parser.add_argument("--traces", type=int, default=2, help="runs per file to simulate")
    parser.add_argument("--commits", type=int, default=200, help="budget of those runs")
    parser.add_argument("--timing-only", action="store_true", help="no parameters")
    args = parser.parse_args()
    now = hashes(args.traces, args.commits, not args.timing_only)
    if args.mode == "record":
        args.file.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(now)} scenario files in {args.file}")
        return 0
    before = json.loads(args.file.read_text())
    # --timing-only computes no parameters: a file recorded with them is compared on the rest.
    fields = ("run_ids", "traces") if args.timing_only else ("run_ids", "traces", "params")

    def compared(entry: dict | None) -> dict | None:
        return None if entry is None else {f: entry.get(f) for f in fields}

    files = sorted(set(before) | set(now))
    differ = [k for k in files if compared(before.get(k)) != compared(now.get(k))]
    for k in differ:
        print(f"DIFFERS {k}:\n  before {compared(before.get(k))}\n  now    {compared(now.get(k))}")
    n_ids = sum(len(v["run_ids"]) for v in now.values())
    n_traces = sum(len(v["traces"]) for v in now.values())
    n_params = sum(len(v["params"]) for v in now.values())
    verdict = f"{len(differ)} files differ" if differ else "identical"
    print(
        f"{len(now)} files, {n_ids} run ids, {n_traces} traces, {n_params} parameter hashes "
        f"(compared: {', '.join(fields)}): {verdict}"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
