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
        ".verbs._calibrate": [
            "CalibratedRun",
            "calibrate_folder",
            "calibrate_run",
            "write_calibrated",
        ],
        "._exit_codes": ["EXIT_CODES_HELP", "ExitCode"],
        ".verbs._get_data": ["Downloaded", "download"],
        ".verbs._ls": ["list_runs"],
        ".report._output": ["json_line", "strict_json"],
        ".verbs._plot": ["plot_results"],
        ".record._provenance": ["provenance"],
        ".report._render": [
            "render_fits",
            "render_listing",
            "render_show_file",
            "render_show_run",
            "render_summary",
            "render_trace_report",
            "render_validation",
        ],
        ".record._record": ["flat_params"],
        ".record._identity": ["RunIdentity", "RunKind", "run_identity", "run_id_of"],
        ".report._summary_rows": ["SweepRow", "summary_row"],
        ".verbs._replay": ["replay_file"],
        ".verbs._run": ["preflight", "run", "write_result"],
        ".verbs._run_sweep": ["run_file", "run_sweep"],
        ".verbs._schema": ["schema_json"],
        ".verbs._show": ["show_file", "show_run"],
        "._signals": ["exit_code", "exit_now", "interruptible"],
        ".execute._real": ["real_job"],
        ".execute._stages": ["build_problem"],
        ".verbs._timing_only": ["simulate_timing", "trace_scenario"],
        ".verbs._validate": ["ValidationReport", "validate_file"],
    },
    deprecated={
        "build_rule": "gemsim.config:build_rule",
        "RunResult": "gemsim.results:RunResult",
    },
)
