"""The scenario layer: schema, loading, sweeps and building the stages' typed inputs."""

from .build import build_cluster as build_cluster
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
