"""The `gemsim` command: parse, call the library, print. User errors exit with code 2."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gemsim.scenario import ScenarioError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="gemsim: simulate staleness in asynchronous SGD, with real gradients.",
)

ScenarioFile = Annotated[Path, typer.Argument(help="Scenario file (.yaml or .toml).")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: path=value (value read as YAML). Repeatable."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


def user_errors(func):
    """Turn the errors a user can fix into one message on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (ScenarioError, UserInputError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=2) from None

    return wrapper


class UserInputError(ValueError):
    """A bad argument that is not part of a scenario file (e.g. a missing trace file)."""


@app.command()
@user_errors
def trace(
    file: ScenarioFile,
    out: Annotated[Path | None, typer.Option(help="Write DIR/trace.parquet.")] = None,
    set_: SetOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Timing only, no gradients: staleness statistics, throughput, histogram."""
    from gemsim.scenario import trace_scenario

    reports = trace_scenario(file, overrides=set_ or [], out=out)
    if as_json:
        payload = reports[0] if len(reports) == 1 else {"runs": reports}
        typer.echo(json.dumps(payload, indent=2, default=float))
        return
    for report in reports:
        typer.echo(render_trace_report(report))


@app.command()
@user_errors
def run(
    file: ScenarioFile,
    out: Annotated[
        Path | None, typer.Option(help="Results folder (default results/<name>).")
    ] = None,
    set_: SetOption = None,
    resume: Annotated[
        bool, typer.Option(help="Skip runs already finished with this config.")
    ] = False,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run every point of the scenario's sweep: timing, then real gradients; write run folders."""
    from gemsim.scenario.run import run_file

    out_dir, rows = run_file(file, out=out, overrides=set_ or [], resume=resume, quiet=quiet)
    if as_json:
        payload = {"results": str(out_dir), "runs": [dataclasses.asdict(r) for r in rows]}
        typer.echo(json.dumps(payload, indent=2, default=float))
        return
    typer.echo(render_summary(rows))
    typer.echo(f"results in {out_dir}/ (load with gemsim.load_results({str(out_dir)!r}))")


@app.command()
@user_errors
def replay(
    trace_file: Annotated[Path, typer.Argument(help="A trace.parquet (gemsim trace --out).")],
    file: ScenarioFile,
    out: Annotated[
        Path | None, typer.Option(help="Results folder (default results/<name>).")
    ] = None,
    set_: SetOption = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Execute a saved commit trace with the scenario's rule and problem."""
    from gemsim.scenario.run import replay_file

    out_dir, row = replay_file(trace_file, file, out=out, overrides=set_ or [], quiet=quiet)
    if as_json:
        typer.echo(
            json.dumps(
                {"results": str(out_dir), "runs": [dataclasses.asdict(row)]},
                indent=2,
                default=float,
            )
        )
        return
    typer.echo(render_summary([row]))
    typer.echo(f"results in {out_dir}/")


@app.command()
@user_errors
def plot(
    results_dir: Annotated[Path, typer.Argument(help="A results folder written by gemsim run.")],
    dest: Annotated[
        Path | None, typer.Option(help="Where to write PNGs (default DIR/plots).")
    ] = None,
) -> None:
    """Write the standard figures (loss curves, staleness, pi, energy) for a results folder."""
    from gemsim.results import plot_run_folder

    if not results_dir.is_dir():
        raise UserInputError(f"{results_dir}: no such results folder")
    written = plot_run_folder(results_dir, dest or results_dir / "plots")
    for path in written:
        typer.echo(str(path))


def render_summary(rows) -> str:
    header = (
        f"{'run id':<12}  {'status':<8}  {'train loss':>10}  {'test acc':>8}  "
        f"{'staleness':>9}  {'wall s':>7}  sweep"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        sweep = ", ".join(f"{k}={_short(v)}" for k, v in r.sweep.items())
        status = r.status + ("*" if r.skipped else "")
        lines.append(
            f"{r.run_id:<12}  {status:<8}  {r.train_loss:>10.4f}  {r.test_accuracy:>8.4f}  "
            f"{r.staleness_mean:>9.2f}  {r.wall_seconds:>7.1f}  {sweep}"
        )
    if any(r.skipped for r in rows):
        lines.append("* finished earlier; skipped by --resume")
    return "\n".join(lines)


def _short(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def render_trace_report(report: dict) -> str:
    from gemsim.timing import format_histogram

    head = f"run {report['run_id']}" + (f"  sweep {report['sweep']}" if report["sweep"] else "")
    lines = [
        head,
        f"  commits             {report['commits']}",
        f"  virtual seconds     {report['duration']:.6g}",
        f"  commits / second    {report['commits_per_second']:.6g}",
        f"  PS utilisation      {report['ps_utilisation']:.3f}",
        f"  staleness mean      {report['staleness_mean']:.4g}   var {report['staleness_var']:.4g}",
        f"  staleness p50/p99   {report['staleness_p50']:.4g} / {report['staleness_p99']:.4g}"
        f"   max {report['staleness_max']}",
    ]
    workers = report["per_worker"]
    shown = workers if len(workers) <= 16 else workers[:8] + workers[-8:]
    lines.append(
        "  worker  commits  mean staleness" + ("  (first and last 8)" if shown != workers else "")
    )
    lines += [f"  {w['worker']:>6}  {w['commits']:>7}  {w['staleness_mean']:>14.4g}" for w in shown]
    lines.append("  staleness histogram")
    lines.append(format_histogram(report["histogram"]))
    if report.get("trace_path"):
        lines.append(f"  trace written to {report['trace_path']}")
    return "\n".join(lines)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
