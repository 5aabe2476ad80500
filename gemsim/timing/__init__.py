"""Timing model: latency laws, SimPy worker/server processes, commit traces, staleness.

Never imports JAX: a trace is produced from timing alone.
"""

from gemsim.trace import COLUMN_NAMES as COLUMN_NAMES
from gemsim.trace import CommitTrace as CommitTrace

from ._churn import Churn as Churn
from ._churn import Slowdowns as Slowdowns
from ._cluster import Budget as Budget
from ._cluster import ClusterSpec as ClusterSpec
from ._cluster import CommitBudget as CommitBudget
from ._cluster import Discipline as Discipline
from ._cluster import Failure as Failure
from ._cluster import SecondsBudget as SecondsBudget
from ._cluster import StepsBudget as StepsBudget
from ._cluster import WorkerSpec as WorkerSpec
from ._distributions import DISTRIBUTION_TYPES as DISTRIBUTION_TYPES
from ._distributions import Constant as Constant
from ._distributions import Distribution as Distribution
from ._distributions import Empirical as Empirical
from ._distributions import Exponential as Exponential
from ._distributions import Gamma as Gamma
from ._distributions import LogNormal as LogNormal
from ._distributions import Mixture as Mixture
from ._distributions import Pareto as Pareto
from ._distributions import Uniform as Uniform
from ._distributions import Weibull as Weibull
from ._draws import check_compute as check_compute
from ._fit import Calibration as Calibration
from ._fit import Fit as Fit
from ._fit import GroupFit as GroupFit
from ._fit import batch_block as batch_block
from ._fit import calibrate_trace as calibrate_trace
from ._fit import fit_distribution as fit_distribution
from ._fit import group_workers as group_workers
from ._lives import Down as Down
from ._lives import EmulatedCompute as EmulatedCompute
from ._lives import LifeEvent as LifeEvent
from ._lives import SlowdownClock as SlowdownClock
from ._lives import down_intervals as down_intervals
from ._lives import ever_up as ever_up
from ._lives import life_events as life_events
from ._outcome import Simulation as Simulation
from ._outcome import WorkerReport as WorkerReport
from ._server_protocols import PROTOCOL_TYPES as PROTOCOL_TYPES
from ._server_protocols import Async as Async
from ._server_protocols import KAsync as KAsync
from ._server_protocols import KSync as KSync
from ._server_protocols import ServerProtocol as ServerProtocol
from ._server_protocols import Ssp as Ssp
from ._server_protocols import Sync as Sync
from ._server_protocols import one_commit_rounds as one_commit_rounds
from ._simulate import simulate as simulate
from ._simulate import simulate_run as simulate_run
from ._stats import expected_worker_staleness as expected_worker_staleness
from ._stats import format_histogram as format_histogram
from ._stats import geometric_pmf as geometric_pmf
from ._stats import staleness_pmf as staleness_pmf
from ._stats import staleness_summary as staleness_summary
from ._stats import staleness_tv as staleness_tv
from ._stats import total_variation as total_variation
from ._work import check_work as check_work
