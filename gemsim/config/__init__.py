"""The scenario: its schema (pydantic), loading YAML/TOML with overrides, sweeps, and building
the stages' typed inputs. Nothing here runs a simulation or imports JAX (rules are imported
only when `build_rule` is called)."""

from ._build import build_cluster as build_cluster
from ._build import build_rule as build_rule
from ._build import check_client_state as check_client_state
from ._build import client_state_memory as client_state_memory
from ._build import eval_period as eval_period
from ._build import keeps_client_state as keeps_client_state
from ._build import problem_args as problem_args
from ._build import problem_sizes as problem_sizes
from ._build import reads_every_client as reads_every_client
from ._data_split import claim_field as claim_field
from ._data_split import client_weights as client_weights
from ._data_split import data_owners as data_owners
from ._data_split import data_split as data_split
from ._data_split import owner_slowness as owner_slowness
from ._data_split import scenario_shards as scenario_shards
from ._errors import ScenarioError as ScenarioError
from ._json_schema import scenario_json_schema as scenario_json_schema
from ._loader import apply_overrides as apply_overrides
from ._loader import load_scenario as load_scenario
from ._loader import parse_override as parse_override
from ._loader import parse_scenario as parse_scenario
from ._loader import read_document as read_document
from ._many_runs import lifted_rule as lifted_rule
from ._many_runs import many_runs_signature as many_runs_signature
from ._optimizer import window_of as window_of
from ._protocol_blocks import check_real_backend as check_real_backend
from ._round_rule_blocks import SyncBlock as SyncBlock
from ._scenario import Scenario as Scenario
from ._sweep import ExpandedRun as ExpandedRun
from ._sweep import config_hash as config_hash
from ._sweep import expand as expand
from ._sweep import resolved_config as resolved_config

_RENAMED = {"validate": "parse_scenario", "batch_signature": "many_runs_signature"}


def __getattr__(name: str):
    """0.2's names, kept for one release with a DeprecationWarning."""
    if name in _RENAMED:
        import warnings

        warnings.warn(
            f"gemsim.config.{name} is deprecated; use gemsim.config.{_RENAMED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
