"""The scenario layer: schema, loading, sweeps and building the stages' typed inputs."""

from .build import build_cluster as build_cluster
from .calibrate import CalibratedRun as CalibratedRun
from .calibrate import calibrate_folder as calibrate_folder
from .calibrate import calibrate_run as calibrate_run
from .calibrate import write_calibrated as write_calibrated
from .errors import ScenarioError as ScenarioError
from .load import load_scenario as load_scenario
from .load import parse_override as parse_override
from .schema import Scenario as Scenario
from .sweep import ExpandedRun as ExpandedRun
from .sweep import config_hash as config_hash
from .sweep import expand as expand
from .sweep import resolved_config as resolved_config
from .timing_run import simulate_timing as simulate_timing
from .timing_run import trace_scenario as trace_scenario
from .validate import ValidationReport as ValidationReport
from .validate import validate_file as validate_file
