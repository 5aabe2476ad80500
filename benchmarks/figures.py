"""Regenerate a figure of docs/figures from the scenario that produces it.

Each figure is the `gemsim run` of a bundled scenario (run here as the command a user types,
with `--resume`, so that runs already in the results folder are not redone) and a plot of its
results with `gemsim.load_results` and `gemsim.results.plot_loss`. Figures:

- ``rules_compare``: every rule on `scenarios/rules/compare.yaml` (training loss against
  virtual time), GEM and the classic baselines in one panel, the other rules (with downpour
  for reference) in the other. `server_momentum` is dashed: with 16 workers the implicit
  momentum 1 - 1/16 exceeds its momentum 0.9, so the correction leaves no explicit momentum
  and it coincides with downpour.

    python benchmarks/figures.py rules_compare                  # the sweep: ~20 min on 2 cores
    python benchmarks/figures.py rules_compare --set budget.seconds=2 \\
        --results /tmp/compare --out /tmp/rules_compare.png     # a quick check of the script
    python benchmarks/figures.py rules_compare --no-run         # plot results already there
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSIC = ("downpour", "staleness", "softsync", "gem", "dcasgd", "agn", "easgd", "sync")
OTHERS = (
    "downpour",
    "delay_adaptive",
    "ringmaster",
    "rennala",
    "fedbuff",
    "fedasync",
    "server_momentum",
    "gap_aware",
    "eamsgd",
    "local",
)
DASHED = ("server_momentum",)  # drawn over downpour, which it equals at n = 16


def run_scenario(scenario: Path, results: Path, overrides: list[str]) -> None:
    """`gemsim run SCENARIO --out RESULTS --resume` with the overrides; stops on a failure."""
    command = [sys.executable, "-m", "gemsim", "run", str(scenario), "--out", str(results)]
    command += ["--resume", "--quiet"] + [a for o in overrides for a in ("--set", o)]
    print("+", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def title_of(scenario: Path, overrides: list[str]) -> str:
    """The setting in words, from the scenario as run (so that overrides show)."""
    from gemsim.config import load_scenario

    s = load_scenario(scenario, overrides=overrides)
    slow = [f"{g.count} of them {1 / g.speed:g}x slower" for g in s.workers.groups if g.speed < 1]
    workers = f"{s.workers.count} workers" + (f" ({', '.join(slow)})" if slow else "")
    seconds, commits = s.budget.seconds, s.budget.commits
    span = f"{seconds:g} s of virtual time" if seconds else f"{commits} commits"
    count = len(s.seeds) if s.seeds else s.repeats
    seeds = "one seed" if count == 1 else f"{count} seeds"
    return f"{workers}, MLP on digits, {span}, {seeds}"


def plot_rules_compare(results: Path, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gemsim import load_results
    from gemsim.results import plot_loss

    frame = load_results(results)
    missing = sorted(set(CLASSIC + OTHERS) - set(frame["optimizer.rule"]))
    if missing:
        raise SystemExit(f"{results} has no runs of {', '.join(missing)}: run the sweep first")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    panels = (
        (CLASSIC, "GEM and the classic baselines"),
        (OTHERS, "Rules beyond the GEM paper (downpour for reference)"),
    )
    for ax, (names, heading) in zip(axes, panels, strict=True):
        subset = frame[frame["optimizer.rule"].isin(names)]
        plot_loss(subset, x="time", hue="optimizer.rule", band=False, ax=ax)
        for line in ax.get_lines():
            if line.get_label() in DASHED:
                line.set_linestyle("--")
        ax.legend(ncol=2, fontsize="small", loc="upper right")  # redrawn with the dashes
        ax.set_title(heading)
        ax.yaxis.set_tick_params(labelleft=True)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


FIGURES = {
    "rules_compare": (
        ROOT / "scenarios" / "rules" / "compare.yaml",
        ROOT / "results" / "rules" / "compare",
        ROOT / "docs" / "figures" / "rules_compare.png",
        plot_rules_compare,
    ),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("figure", choices=sorted(FIGURES))
    parser.add_argument("--results", type=Path, help="results folder (default results/...)")
    parser.add_argument("--out", type=Path, help="image file (default docs/figures/NAME.png)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="P=V")
    parser.add_argument("--no-run", dest="run", action="store_false", help="plot only")
    args = parser.parse_args(argv)
    scenario, results, out, plot = FIGURES[args.figure]
    results, out = args.results or results, args.out or out
    if args.run:
        run_scenario(scenario, results, args.overrides)
    plot(results, out, title_of(scenario, args.overrides))


if __name__ == "__main__":
    main()
