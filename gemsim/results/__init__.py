"""Run folders (typed manifest, atomic writes), loading results into pandas, and the plots.

This stage takes plain values (dicts, numpy arrays, pandas frames, commit traces) and imports
no other stage. Names are exported lazily: reading manifests needs neither pandas nor
matplotlib, and only the plots load matplotlib.
"""

from gemsim._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "gemsim._atomic": ["atomic_write_bytes", "atomic_write_text"],
        "._files": [
            "CLIENT_TASKS_FILE",
            "MANIFEST_FILE",
            "METRICS_FILE",
            "OPTIONAL_FILES",
            "PARAMS_FILE",
            "RUN_FILES",
            "TRACE_FILE",
            "WORKER_EVALS_FILE",
            "WORKER_SUMMARY_FILE",
        ],
        "._manifest": [
            "FINISHED",
            "MANIFEST_KEYS",
            "Manifest",
            "backend_of",
            "kind_of",
            "manifest_dict",
            "manifest_to_json",
            "check_manifest",
            "read_manifest",
        ],
        "._run_columns": [
            "RUN_COLUMNS",
            "config_label",
            "format_value",
            "run_manifests",
            "sweep_columns",
            "sweep_columns_of",
        ],
        "._frames": ["class_accuracy_columns", "load_results", "to_xarray"],
        "._summary_frame": ["SUMMARY_COLUMNS", "load_summary", "summary_columns_of"],
        "._worker_frames": [
            "WORKER_EVAL_COLUMNS",
            "WORKER_SUMMARY_COLUMNS",
            "load_worker_evals",
            "load_worker_summary",
        ],
        "._run_summary": [
            "BASE_FINAL",
            "class_groups",
            "class_keys",
            "extra_final_keys",
            "final_key",
            "heterogeneity_metrics",
            "n_classes_of",
            "summary_column",
            "summary_order",
            "summary_values",
        ],
        "._plots": [
            "plot_energy_ratio",
            "plot_final_vs_workers",
            "plot_loss",
            "plot_pi_heatmap",
            "plot_pi_median",
            "plot_staleness_hist",
        ],
        "._folder_plots": ["plot_run_folder"],
        "._worker_plots": ["plot_class_accuracy", "plot_participation", "plot_worker_accuracy"],
        "._tasks": ["TASK_COLUMNS", "load_tasks"],
        "._client_timeline": ["plot_client_timeline"],
        "._run_folder": [
            "RunResult",
            "is_finished",
            "params_sha256",
            "read_params",
            "read_run",
            "worker_optima",
            "write_run",
        ],
    },
    deprecated={"RunRecord": "RunResult", "validate_manifest": "check_manifest"},
)
