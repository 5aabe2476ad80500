"""The `gemsim` command: parse, call `gemsim.app`, print. Nothing else lives here.

Exit codes are `gemsim.app.ExitCode` (`gemsim --help` prints them). Interrupts: SIGINT
(Ctrl-C; unless it was ignored when gemsim started, as in a background job of a
non-interactive shell) and SIGTERM (what Slurm, Kubernetes and Ray send) end any command:
`run` on the process backend within `SHUTDOWN_BOUND_S` (Ray: `RAY_SHUTDOWN_BOUND_S`), every
worker process or actor stopped, shared memory released, no folder written for the run in
progress, finished run folders of the sweep kept (`--resume` skips them). Further signals
during that clean-up are ignored.
"""

from __future__ import annotations

import functools
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gemsim import __version__
from gemsim._checks import UserError
from gemsim.app import EXIT_CODES_HELP, ExitCode

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="gemsim: simulate staleness in asynchronous SGD, with real gradients.\n\n"
    + EXIT_CODES_HELP,
)


class Backend(StrEnum):
    sim = "sim"
    process = "process"
    ray = "ray"


class Scheduler(StrEnum):
    local = "local"
    ray = "ray"


class RealBackend(StrEnum):
    process = "process"
    ray = "ray"


class DownloadName(StrEnum):
    mnist = "mnist"
    fashion_mnist = "fashion-mnist"
    cifar10 = "cifar10"


ScenarioFile = Annotated[Path, typer.Argument(help="Scenario file (.yaml or .toml).")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: path=value (value read as YAML). Repeatable."),
]
JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print JSON Lines: one strict JSON object per run.")
]
QuietFlag = Annotated[bool, typer.Option("--quiet", help="No progress bar.")]
OutDir = Annotated[Path | None, typer.Option(help="Results folder (default results/<name>).")]
AddressOption = Annotated[
    str | None,
    typer.Option(help="ray only: the address of a running cluster (ray start --head)."),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gemsim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """gemsim: simulate staleness in asynchronous SGD, with real gradients."""


def user_errors(func):
    """Errors the user can fix: one message on stderr and exit code 2, no traceback. Also
    interrupts: SIGTERM raises like Ctrl-C inside the command, and either ends it with 143 or
    130 once the clean-up it triggers is done (`gemsim.app.interruptible`)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from gemsim.app import exit_code, exit_now, interruptible

        with interruptible() as interrupts:
            try:
                return func(*args, **kwargs)
            except UserError as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(code=ExitCode.USER_ERROR) from None
            except KeyboardInterrupt as exc:
                code = exit_code(exc, interrupts)
                typer.echo(f"interrupted by {_signal_name(code)}: {INTERRUPTED}", err=True)
                exit_now(code)  # still under our handlers: a second signal changes nothing

    return wrapper


INTERRUPTED = "stopped cleanly (a run in progress leaves no folder; finished runs are kept)"


def _signal_name(code: int) -> str:
    import signal

    return signal.Signals(code - 128).name


def _echo_json(value) -> None:
    from gemsim.app import json_line

    typer.echo(json_line(value))


@app.command()
@user_errors
def trace(
    file: ScenarioFile,
    out: Annotated[Path | None, typer.Option(help="Write DIR/trace.parquet.")] = None,
    set_: SetOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Timing only, no gradients: staleness statistics, throughput, histogram.

    Example: gemsim trace scenarios/timing/lognormal.yaml --set workers.count=32
    """
    from gemsim.app import render_trace_report, trace_scenario

    for report in trace_scenario(file, overrides=set_ or [], out=out):
        if as_json:
            _echo_json(report)
        else:
            typer.echo(render_trace_report(report))


@app.command()
@user_errors
def run(
    file: ScenarioFile,
    out: OutDir = None,
    set_: SetOption = None,
    resume: Annotated[
        bool, typer.Option(help="Skip runs already finished (same identity).")
    ] = False,
    quiet: QuietFlag = False,
    as_json: JsonFlag = False,
    backend: Annotated[Backend, typer.Option(help="sim, or a real backend.")] = Backend.sim,
    address: AddressOption = None,
    jobs: Annotated[
        int,
        typer.Option(
            min=1,
            help="Run sweep points in N job processes on this machine; with --scheduler ray, "
            "the most Ray tasks in flight.",
        ),
    ] = 1,
    scheduler: Annotated[
        Scheduler,
        typer.Option(
            "--scheduler",
            "--cluster",
            help="local: here or in --jobs processes; ray: send the runs to Ray as tasks "
            "(--address joins a cluster). --cluster is its 0.2 name.",
        ),
    ] = Scheduler.local,
) -> None:
    """Run every point of the scenario's sweep: timing, then real gradients; write run folders.

    With --jobs N the points run in N job processes, with --scheduler ray as Ray tasks (a
    local instance, or the cluster at --address); this process writes every run folder, and
    the results are those of one-by-one runs. With --backend process (or ray) each point runs
    for real in worker processes (actors) and its recorded trace is written instead of a
    simulated one. Exit code 3 when a run failed.

    Example: gemsim run scenarios/quickstart.yaml --set workers.count=16 --out results/qs16

    Example: gemsim run scenarios/paper/fig1.yaml --jobs 2 --resume
    """
    from gemsim.app import render_summary, run_file

    def as_line(out_dir: Path, row) -> None:
        _echo_json({"results": str(out_dir), **_fields(row)})

    out_dir, rows = run_file(
        file,
        out=out,
        overrides=set_ or [],
        resume=resume,
        quiet=quiet,
        backend=backend.value,
        address=address,
        jobs=jobs,
        scheduler=scheduler.value,
        on_row=as_line if as_json else None,
    )
    if not as_json:
        typer.echo(render_summary(rows))
        typer.echo(f"results in {out_dir}/ (load with gemsim.load_results({str(out_dir)!r}))")
    _exit_on_failures(rows)


def _fields(row) -> dict:
    import dataclasses

    return dataclasses.asdict(row)


def _exit_on_failures(rows) -> None:
    failed = [r for r in rows if r.status == "failed"]
    if failed:
        for r in failed:
            first = (r.error or "").splitlines()[0] if r.error else "no error recorded"
            typer.echo(f"run {r.run_id} failed: {first}", err=True)
        raise typer.Exit(code=ExitCode.RUN_FAILED)


@app.command()
@user_errors
def replay(
    trace_file: Annotated[
        Path,
        typer.Argument(help="A trace.parquet (gemsim trace --out) or a run folder holding one."),
    ],
    file: ScenarioFile,
    out: OutDir = None,
    set_: SetOption = None,
    quiet: QuietFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Execute a saved commit trace with the scenario's rule and problem (its own run folder,
    never the folder of the run the trace came from).

    Example: gemsim replay results/real/3f2a9c1d4e5b scenarios/sim_vs_real.yaml
    """
    from gemsim.app import render_summary, replay_file

    out_dir, row = replay_file(trace_file, file, out=out, overrides=set_ or [], quiet=quiet)
    if as_json:
        _echo_json({"results": str(out_dir), **_fields(row)})
    else:
        typer.echo(render_summary([row]))
        typer.echo(f"results in {out_dir}/")
    _exit_on_failures([row])


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
    workers, staleness, pi, energy).

    Example: gemsim plot results/quickstart
    """
    from gemsim.app import plot_results

    for path in plot_results(results_dir, out):
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
    """Fit latency laws to a run's measured times and write them as a scenario.

    Example: gemsim calibrate results/real/3f2a9c1d4e5b --out calibrated.yaml
    """
    from gemsim.app import calibrate_folder, render_fits

    calibrated = calibrate_folder(run_dir)
    path = calibrated.write(out)
    if as_json:
        _echo_json(
            {"scenario": str(path), "run_id": calibrated.run_id, "fits": calibrated.fit_rows()}
        )
        return
    typer.echo(render_fits(calibrated.fit_rows()))
    typer.echo(f"calibrated scenario written to {path}")


@app.command()
@user_errors
def validate(
    file: ScenarioFile,
    backend: Annotated[RealBackend, typer.Option(help="The real backend.")] = RealBackend.process,
    out: Annotated[
        Path | None, typer.Option(help="Results folder (default results/<name>-validate).")
    ] = None,
    set_: SetOption = None,
    address: AddressOption = None,
    quiet: QuietFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Real run -> replay of its trace -> calibration -> simulation; exit 0 only if all agree.

    Checks: replay max abs parameter difference <= 1e-5 * (1 + max |theta|); staleness
    total-variation distance within the simulator's own seed-to-seed spread (+0.05);
    throughput ratio within [0.8, 1.25]. Exit code 1 when a check fails.

    Example: gemsim validate scenarios/sim_vs_real.yaml --json
    """
    from gemsim.app import render_validation, validate_file

    report = validate_file(
        file, backend=backend.value, out=out, overrides=set_ or [], address=address, quiet=quiet
    )
    if as_json:
        _echo_json(report.to_json())
    else:
        typer.echo(render_validation(report))
    if not report.passed:
        raise typer.Exit(code=ExitCode.CHECK_FAILED)


@app.command()
@user_errors
def show(
    target: Annotated[Path, typer.Argument(help="A scenario file, or a run folder.")],
    set_: SetOption = None,
    out: OutDir = None,
    as_json: JsonFlag = False,
) -> None:
    """A scenario file: the resolved scenario and every expanded run with its id, and which of
    them `run --resume` would skip. A run folder: its manifest and provenance.

    Example: gemsim show scenarios/quickstart.yaml; gemsim show results/quickstart/<run_id>
    """
    from gemsim.app import render_show_file, render_show_run, show_file, show_run

    if target.is_dir():
        manifest = show_run(target)
        typer.echo(_json_or(as_json, manifest, render_show_run))
        return
    shown = show_file(target, overrides=set_ or [], out=out)
    if as_json:
        for row in shown["runs"]:
            _echo_json(row)
        return
    typer.echo(render_show_file(shown))


def _json_or(as_json: bool, value, render) -> str:
    from gemsim.app import json_line

    return json_line(value) if as_json else render(value)


@app.command("ls")
@user_errors
def ls(
    results_dir: Annotated[Path, typer.Argument(help="A results folder written by gemsim run.")],
    sort: Annotated[
        str | None,
        typer.Option(
            help="Sort by a column (e.g. final_train_loss, wall_seconds, "
            "final_worker_accuracy_worst, time_to_accuracy_0.8)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """One row per run: id, kind, status, swept fields, final metrics, wall time.

    Example: gemsim ls results/quickstart --sort final_train_loss
    """
    from gemsim.app import list_runs, render_listing

    rows = list_runs(results_dir, sort=sort)
    if as_json:
        for row in rows:
            _echo_json(row)
        return
    typer.echo(render_listing(rows, sort))


@app.command()
@user_errors
def schema() -> None:
    """Print the scenario file's JSON Schema (for editors and validators).

    Example: gemsim schema > gemsim-scenario.schema.json
    """
    from gemsim.app import schema_json

    typer.echo(schema_json())


@app.command()
@user_errors
def download(
    name: Annotated[DownloadName, typer.Argument(help="The data set.")],
    directory: Annotated[Path, typer.Argument(help="Where to put its files (created).")],
) -> None:
    """Fetch a data set's published files into DIR, checked against known sha256 digests
    (files already there and intact are kept). Exit code 2 when no mirror could serve them.

    Example: gemsim download fashion-mnist data/fashion-mnist
    """
    from gemsim.app import download as fetch

    done = fetch(name.value, directory)
    typer.echo(f"{done.name} in {done.directory}/; use it with: {done.scenario_line()}")


def main() -> None:
    """The `gemsim` console command (and `python -m gemsim`): the command, then the exit hooks
    and the process's end without the interpreter's teardown. Freeing JAX's, pandas' and
    optax's modules and objects one by one took 0.3-0.6 s of every command, after its work
    was done and written; every thread and process a command starts is joined or stopped by
    the command itself."""
    import atexit
    import threading

    from gemsim.app import exit_now

    try:
        app(prog_name="gemsim")
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc.code)
    if _observed():  # a profiler or tracer writes its results at the interpreter's own exit
        sys.exit(code)
    # What a normal exit runs before its teardown: join the threads still working (the
    # interpreter's own step, which also stops idle thread pools), then the exit hooks (Ray's
    # shutdown, multiprocessing's, logging's flush).
    threading._shutdown()
    atexit._run_exitfuncs()
    exit_now(code)


def _observed() -> bool:
    """Whether a profiler, tracer or monitoring tool (cProfile, trace, a debugger, coverage)
    watches this process."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12's tools
    return monitoring is not None and any(monitoring.get_tool(i) for i in range(6))


def _exit_status(code) -> int:
    """`sys.exit`'s argument as the process's status, as the interpreter maps it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":  # pragma: no cover
    main()
