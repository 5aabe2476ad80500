"""Update rules as pure JAX functions: GEM and every baseline, with their diagnostics.

Each factory validates its hyperparameters and returns a :class:`Rule`, the
NamedTuple of pure functions the engine drives (see ``_base``).
"""

from gemsim.rules._agn import agn as agn
from gemsim.rules._dcasgd import DcasgdWorkerState as DcasgdWorkerState
from gemsim.rules._dcasgd import dcasgd as dcasgd
from gemsim.rules._downpour import LocalVelocity as LocalVelocity
from gemsim.rules._downpour import downpour as downpour
from gemsim.rules._easgd import EasgdWorkerState as EasgdWorkerState
from gemsim.rules._easgd import easgd as easgd
from gemsim.rules._gem import EpsPlacement as EpsPlacement
from gemsim.rules._gem import GemInfo as GemInfo
from gemsim.rules._gem import GemWorkerState as GemWorkerState
from gemsim.rules._gem import GradientAt as GradientAt
from gemsim.rules._gem import gem as gem
from gemsim.rules._gem_optax import GemOptaxState as GemOptaxState
from gemsim.rules._gem_optax import gem_optax as gem_optax
from gemsim.rules._local import LocalServerState as LocalServerState
from gemsim.rules._local import LocalWorkerState as LocalWorkerState
from gemsim.rules._local import local as local
from gemsim.rules._protocol import CommitContext as CommitContext
from gemsim.rules._protocol import CommitInfo as CommitInfo
from gemsim.rules._protocol import Rule as Rule
from gemsim.rules._protocol import RuleState as RuleState
from gemsim.rules._protocol import Work as Work
from gemsim.rules._protocol import commit_context as commit_context
from gemsim.rules._protocol import fresh_row as fresh_row
from gemsim.rules._protocol import keep_gradient as keep_gradient
from gemsim.rules._protocol import pull_state as pull_state
from gemsim.rules._protocol import start_at_snapshot as start_at_snapshot
from gemsim.rules._protocol import stateless as stateless
from gemsim.rules._protocol import zeros_acc as zeros_acc
from gemsim.rules._select import tree_medians as tree_medians
from gemsim.rules._softsync import SoftsyncServerState as SoftsyncServerState
from gemsim.rules._softsync import SoftsyncWorkerState as SoftsyncWorkerState
from gemsim.rules._softsync import softsync as softsync
from gemsim.rules._staleness import ConstantWeight as ConstantWeight
from gemsim.rules._staleness import Hinge as Hinge
from gemsim.rules._staleness import Inverse as Inverse
from gemsim.rules._staleness import Polynomial as Polynomial
from gemsim.rules._staleness import StalenessWeight as StalenessWeight
from gemsim.rules._staleness import staleness as staleness
from gemsim.rules._sync import SyncServerState as SyncServerState
from gemsim.rules._sync import sync as sync

__all__ = [
    "CommitContext",
    "CommitInfo",
    "ConstantWeight",
    "DcasgdWorkerState",
    "EasgdWorkerState",
    "EpsPlacement",
    "GemInfo",
    "GemOptaxState",
    "GemWorkerState",
    "GradientAt",
    "Hinge",
    "Inverse",
    "LocalServerState",
    "LocalVelocity",
    "LocalWorkerState",
    "Polynomial",
    "Rule",
    "RuleState",
    "SoftsyncServerState",
    "SoftsyncWorkerState",
    "StalenessWeight",
    "SyncServerState",
    "Work",
    "agn",
    "commit_context",
    "dcasgd",
    "downpour",
    "easgd",
    "fresh_row",
    "gem",
    "gem_optax",
    "keep_gradient",
    "local",
    "pull_state",
    "softsync",
    "staleness",
    "start_at_snapshot",
    "stateless",
    "sync",
    "tree_medians",
    "zeros_acc",
]
