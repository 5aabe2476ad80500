"""Update rules as pure JAX functions: GEM and every baseline, with their diagnostics.

Each factory validates its hyperparameters and returns a :class:`Rule`, the
NamedTuple of pure functions the engine drives (the interface: ``_rule.py``, docs/rules.md).
"""

from gemsim.rules._agn import agn as agn
from gemsim.rules._ca2fl import Ca2flState as Ca2flState
from gemsim.rules._ca2fl import ca2fl as ca2fl
from gemsim.rules._client_state import ClientServer as ClientServer
from gemsim.rules._client_state import client_state_bytes as client_state_bytes
from gemsim.rules._client_state import with_clients as with_clients
from gemsim.rules._dcasgd import DcasgdWorkerState as DcasgdWorkerState
from gemsim.rules._dcasgd import dcasgd as dcasgd
from gemsim.rules._delay_adaptive import DelayAdaptiveState as DelayAdaptiveState
from gemsim.rules._delay_adaptive import delay_adaptive as delay_adaptive
from gemsim.rules._downpour import LocalVelocity as LocalVelocity
from gemsim.rules._downpour import downpour as downpour
from gemsim.rules._eamsgd import EamsgdWorkerState as EamsgdWorkerState
from gemsim.rules._eamsgd import eamsgd as eamsgd
from gemsim.rules._easgd import EasgdWorkerState as EasgdWorkerState
from gemsim.rules._easgd import easgd as easgd
from gemsim.rules._fadas import FadasInfo as FadasInfo
from gemsim.rules._fadas import FadasState as FadasState
from gemsim.rules._fadas import fadas as fadas
from gemsim.rules._fedasync import FedasyncInfo as FedasyncInfo
from gemsim.rules._fedasync import fedasync as fedasync
from gemsim.rules._fedbuff import FedbuffState as FedbuffState
from gemsim.rules._fedbuff import fedbuff as fedbuff
from gemsim.rules._fedcompass import FedcompassState as FedcompassState
from gemsim.rules._fedcompass import GeneralRow as GeneralRow
from gemsim.rules._fedcompass import fedcompass as fedcompass
from gemsim.rules._gap_aware import GapAwareInfo as GapAwareInfo
from gemsim.rules._gap_aware import GapAwareState as GapAwareState
from gemsim.rules._gap_aware import gap_aware as gap_aware
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
from gemsim.rules._malenia import MaleniaState as MaleniaState
from gemsim.rules._malenia import MaleniaWorkerState as MaleniaWorkerState
from gemsim.rules._malenia import malenia as malenia
from gemsim.rules._mifa import MifaState as MifaState
from gemsim.rules._mifa import mifa as mifa
from gemsim.rules._outer import OUTER_OPTIMIZERS as OUTER_OPTIMIZERS
from gemsim.rules._outer import DelayedNesterovState as DelayedNesterovState
from gemsim.rules._outer import buffered_nesterov as buffered_nesterov
from gemsim.rules._outer import delayed_nesterov as delayed_nesterov
from gemsim.rules._rennala import RennalaState as RennalaState
from gemsim.rules._rennala import rennala as rennala
from gemsim.rules._ringmaster import RingmasterState as RingmasterState
from gemsim.rules._ringmaster import ringmaster as ringmaster
from gemsim.rules._rule import CommitContext as CommitContext
from gemsim.rules._rule import CommitInfo as CommitInfo
from gemsim.rules._rule import Rule as Rule
from gemsim.rules._rule import RuleState as RuleState
from gemsim.rules._rule import Work as Work
from gemsim.rules._rule import apart as apart
from gemsim.rules._rule import commit_context as commit_context
from gemsim.rules._rule import fresh_row as fresh_row
from gemsim.rules._rule import keep_gradient as keep_gradient
from gemsim.rules._rule import pull_state as pull_state
from gemsim.rules._rule import start_at_snapshot as start_at_snapshot
from gemsim.rules._rule import stateless as stateless
from gemsim.rules._rule import stored as stored
from gemsim.rules._rule import zeros_acc as zeros_acc
from gemsim.rules._select import tree_medians as tree_medians
from gemsim.rules._server_momentum import ServerMomentumState as ServerMomentumState
from gemsim.rules._server_momentum import server_momentum as server_momentum
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
from gemsim.rules._timestamps import DelayInfo as DelayInfo
from gemsim.rules._timestamps import PulledAt as PulledAt

__all__ = [
    "Ca2flState",
    "ClientServer",
    "CommitContext",
    "CommitInfo",
    "ConstantWeight",
    "DcasgdWorkerState",
    "DelayAdaptiveState",
    "DelayInfo",
    "EamsgdWorkerState",
    "EasgdWorkerState",
    "EpsPlacement",
    "FadasInfo",
    "FadasState",
    "FedcompassState",
    "GeneralRow",
    "FedasyncInfo",
    "FedbuffState",
    "GapAwareInfo",
    "GapAwareState",
    "GemInfo",
    "GemOptaxState",
    "GemWorkerState",
    "GradientAt",
    "Hinge",
    "Inverse",
    "LocalServerState",
    "LocalVelocity",
    "LocalWorkerState",
    "MaleniaState",
    "MaleniaWorkerState",
    "MifaState",
    "Polynomial",
    "PulledAt",
    "RennalaState",
    "RingmasterState",
    "Rule",
    "RuleState",
    "ServerMomentumState",
    "SoftsyncServerState",
    "SoftsyncWorkerState",
    "StalenessWeight",
    "SyncServerState",
    "Work",
    "agn",
    "apart",
    "ca2fl",
    "client_state_bytes",
    "commit_context",
    "dcasgd",
    "delay_adaptive",
    "downpour",
    "eamsgd",
    "easgd",
    "fadas",
    "fedasync",
    "fedbuff",
    "fedcompass",
    "fresh_row",
    "gap_aware",
    "gem",
    "gem_optax",
    "keep_gradient",
    "local",
    "malenia",
    "mifa",
    "pull_state",
    "rennala",
    "ringmaster",
    "server_momentum",
    "softsync",
    "staleness",
    "start_at_snapshot",
    "stateless",
    "stored",
    "sync",
    "tree_medians",
    "with_clients",
    "zeros_acc",
]
