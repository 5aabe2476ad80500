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
BackendOption = Annotated[
    str,
    typer.Option(
        help="sim (the simulator), process (real worker processes) or ray (gemsim[ray]).",
    ),
]
AddressOption = Annotated[
    str | None,
    typer.Option(help="ray only: the address of a running cluster (ray start --head)."),
]


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
    backend: BackendOption = "sim",
    address: AddressOption = None,
) -> None:
    """Run every point of the scenario's sweep: timing, then real gradients; write run folders.

    With --backend process (or ray) each point runs for real in worker processes (actors)
    and its recorded trace is written instead of a simulated one.
    """
    from gemsim.scenario.run import run_file

    out_dir, rows = run_file(
        file,
        out=out,
        overrides=set_ or [],
        resume=resume,
        quiet=quiet,
        backend=backend,
        address=address,
    )
    if as_json:
        payload = {"results": str(out_dir), "runs": [dataclasses.asdict(r) for r in rows]}
        typer.echo(json.dumps(payload, indent=2, default=float))
        return
    typer.echo(render_summary(rows))
    typer.echo(f"results in {out_dir}/ (load with gemsim.load_results({str(out_dir)!r}))")


@app.command()
@user_errors
def replay(
    trace_file: Annotated[
        Path,
        typer.Argument(help="A trace.parquet (gemsim trace --out) or a run folder holding one."),
    ],
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
    results_dir: Annotated[
        Path, typer.Argument(help="A results folder written by gemsim run, or one run folder.")
    ],
    out: Annotated[
        Path | None, typer.Option(help="Where to write PNGs (default DIR/plots).")
    ] = None,
) -> None:
    """Write the standard figures that fit the results found (loss curves, final loss vs
    workers, staleness, pi, energy)."""
    from gemsim.results import plot_run_folder

    if not results_dir.is_dir():
        raise UserInputError(f"{results_dir}: no such results folder")
    written = plot_run_folder(results_dir, out or results_dir / "plots")
    for path in written:
        typer.echo(str(path))


@app.command()
@user_errors
def calibrate(
    run_dir: Annotated[
        Path, typer.Argument(help="A run folder (manifest.json and trace.parquet).")
    ],
    out: Annotated[
        Path | None, typer.Option(help="Scenario file to write (default RUN_DIR/calibrated.yaml).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Fit latency laws to a run's measured times and write them as a scenario."""
    from gemsim.scenario import calibrate_folder

    calibrated = calibrate_folder(run_dir)
    path = calibrated.write(out)
    if as_json:
        payload = {"scenario": str(path), "run_id": calibrated.run_id}
        payload["fits"] = calibrated.fit_rows()
        typer.echo(json.dumps(payload, indent=2, default=float))
        return
    typer.echo(render_fits(calibrated.fit_rows()))
    typer.echo(f"calibrated scenario written to {path}")


@app.command()
@user_errors
def validate(
    file: ScenarioFile,
    backend: Annotated[str, typer.Option(help="process (default) or ray.")] = "process",
    out: Annotated[
        Path | None, typer.Option(help="Results folder (default results/<name>-validate).")
    ] = None,
    set_: SetOption = None,
    address: AddressOption = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Real run -> replay of its trace -> calibration -> simulation; exit 0 only if all agree.

    Checks: replay max abs parameter difference <= 1e-5 * (1 + max |theta|); staleness
    total-variation distance within the simulator's own seed-to-seed spread (+0.05);
    throughput ratio within [0.8, 1.25]. Exit code 1 when a check fails.
    """
    from gemsim.scenario.validate import validate_file

    report = validate_file(
        file, backend=backend, out=out, overrides=set_ or [], address=address, quiet=quiet
    )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, default=float))
    else:
        typer.echo(render_validation(report))
    if not report.passed:
        raise typer.Exit(code=1)


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


def render_validation(report) -> str:
    verdict = {True: "ok", False: "FAILED"}
    c = report.checks
    lines = [
        f"replay      max |diff| {report.replay_max_abs_diff:.3g} "
        f"(bar {report.replay_bar:.3g})  {verdict[c['replay']]}",
        f"staleness   TV {report.staleness_tv:.3f} "
        f"(threshold {report.staleness_tv_threshold:.3f})  {verdict[c['staleness']]}",
        f"throughput  real/sim {report.throughput_ratio:.3f} "
        f"({report.real_commits_per_s:.1f} vs {report.simulated_commits_per_s:.1f} commits/s, "
        f"band {report.throughput_band[0]}-{report.throughput_band[1]})  "
        f"{verdict[c['throughput']]}",
        f"{'passed' if report.passed else 'FAILED'}; real run {report.real_run}, "
        f"calibrated scenario {report.calibrated_scenario}",
    ]
    return "\n".join(lines)


def render_fits(rows) -> str:
    header = f"{'what':<24}  {'n':>7}  {'KS p':>8}  law"
    lines = [header, "-" * len(header)]
    for r in rows:
        p = "-" if r["ks_pvalue"] is None else f"{r['ks_pvalue']:.3g}"
        lines.append(f"{r['what']:<24}  {r['n']:>7}  {p:>8}  {r['law']}")
        if r["family"] == "empirical":
            lines.append(f"{'':<24}  {'':>7}  {'':>8}  ({r['reason']})")
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
