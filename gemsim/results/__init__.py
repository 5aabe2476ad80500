"""Run folders, atomic writes, loading results into pandas, and the paper's plots.

This stage takes plain values (dicts, numpy arrays, pandas frames) and imports
no other gemsim stage.
"""

from gemsim.results._atomic import atomic_write_bytes as atomic_write_bytes
from gemsim.results._atomic import atomic_write_text as atomic_write_text
from gemsim.results._manifest import MANIFEST_KEYS as MANIFEST_KEYS
from gemsim.results._manifest import manifest_to_json as manifest_to_json
from gemsim.results._manifest import read_manifest as read_manifest
from gemsim.results._manifest import validate_manifest as validate_manifest
from gemsim.results.load import RUN_COLUMNS as RUN_COLUMNS
from gemsim.results.load import SUMMARY_COLUMNS as SUMMARY_COLUMNS
from gemsim.results.load import config_label as config_label
from gemsim.results.load import load_results as load_results
from gemsim.results.load import load_summary as load_summary
from gemsim.results.load import run_manifests as run_manifests
from gemsim.results.load import sweep_columns as sweep_columns
from gemsim.results.load import sweep_columns_of as sweep_columns_of
from gemsim.results.load import to_xarray as to_xarray
from gemsim.results.plots import plot_energy_ratio as plot_energy_ratio
from gemsim.results.plots import plot_final_vs_workers as plot_final_vs_workers
from gemsim.results.plots import plot_loss as plot_loss
from gemsim.results.plots import plot_pi_heatmap as plot_pi_heatmap
from gemsim.results.plots import plot_pi_median as plot_pi_median
from gemsim.results.plots import plot_run_folder as plot_run_folder
from gemsim.results.plots import plot_staleness_hist as plot_staleness_hist
from gemsim.results.run_folder import RunRecord as RunRecord
from gemsim.results.run_folder import is_finished as is_finished
from gemsim.results.run_folder import params_sha256 as params_sha256
from gemsim.results.run_folder import read_params as read_params
from gemsim.results.run_folder import read_run as read_run
from gemsim.results.run_folder import write_run as write_run
