"""The application: one module per verb of the command line (trace, run, replay, calibrate,
validate, plot, show, ls, schema, download), run identity and records, provenance and progress,
and the scheduling of sweeps (here, in local worker processes, or on a Ray cluster).

`gemsim.cli` parses arguments and calls these; notebooks and scripts call them the same way.
Names are exported lazily, so `gemsim --help` imports none of the stages.
"""

from gemsim._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "._calibrate": ["CalibratedRun", "calibrate_folder", "calibrate_run", "write_calibrated"],
        "._exit_codes": ["EXIT_CODES_HELP", "ExitCode"],
        "._get_data": ["Downloaded", "download"],
        "._identity": ["RunKind", "run_identity", "run_id_of"],
        "._listing": ["list_runs"],
        "._output": ["json_line", "strict_json"],
        "._plot": ["plot_results"],
        "._provenance": ["provenance"],
        "._render": [
            "render_fits",
            "render_listing",
            "render_show_file",
            "render_show_run",
            "render_summary",
            "render_trace_report",
            "render_validation",
        ],
        "._record": ["RunIdentity", "SweepRow", "flat_params", "summary_row"],
        "._replay": ["replay_file"],
        "._run": ["preflight", "run", "write_result"],
        "._run_sweep": ["run_file", "run_sweep"],
        "._schema": ["schema_json"],
        "._show": ["show_file", "show_run"],
        "._signals": ["exit_code", "exit_now", "interruptible"],
        "._stages": ["build_problem", "real_job"],
        "._timing_only": ["simulate_timing", "trace_scenario"],
        "._validate": ["ValidationReport", "validate_file"],
    },
    deprecated={
        "build_rule": "gemsim.config:build_rule",
        "RunResult": "gemsim.results:RunResult",
    },
)
