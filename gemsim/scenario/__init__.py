"""Deprecated alias of gemsim 0.1's `gemsim.scenario`, kept for one release.

Use `gemsim.config` (schema, loading, sweeps, `build_cluster`) and `gemsim.app` (running,
replaying, calibrating and validating) instead; this module only forwards the old names.
"""

import warnings

from gemsim._lazy import lazy_exports

warnings.warn(
    "gemsim.scenario is deprecated: use gemsim.config (schema, loading, sweeps) and gemsim.app "
    "(run, replay, calibrate, validate); it will be removed in gemsim 0.3",
    DeprecationWarning,
    stacklevel=2,
)

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "gemsim.config": [
            "ExpandedRun",
            "Scenario",
            "ScenarioError",
            "build_cluster",
            "config_hash",
            "expand",
            "load_scenario",
            "parse_override",
            "resolved_config",
        ],
        "gemsim.app": [
            "CalibratedRun",
            "ValidationReport",
            "calibrate_folder",
            "calibrate_run",
            "simulate_timing",
            "trace_scenario",
            "validate_file",
            "write_calibrated",
        ],
    },
)
