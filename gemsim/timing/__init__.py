"""Timing model: latency laws, SimPy worker/server processes, commit traces, staleness.

Never imports JAX: a trace is produced from timing alone.
"""

from .calibrate import Calibration as Calibration
from .calibrate import Fit as Fit
from .calibrate import GroupFit as GroupFit
from .calibrate import batch_block as batch_block
from .calibrate import calibrate_trace as calibrate_trace
from .calibrate import fit_distribution as fit_distribution
from .calibrate import group_workers as group_workers
from .cluster import Budget as Budget
from .cluster import ClusterSpec as ClusterSpec
from .cluster import CommitBudget as CommitBudget
from .cluster import Discipline as Discipline
from .cluster import Failure as Failure
from .cluster import SecondsBudget as SecondsBudget
from .cluster import StepsBudget as StepsBudget
from .cluster import WorkerSpec as WorkerSpec
from .distributions import DISTRIBUTION_TYPES as DISTRIBUTION_TYPES
from .distributions import Constant as Constant
from .distributions import Distribution as Distribution
from .distributions import Empirical as Empirical
from .distributions import Exponential as Exponential
from .distributions import Gamma as Gamma
from .distributions import LogNormal as LogNormal
from .distributions import Mixture as Mixture
from .distributions import Pareto as Pareto
from .distributions import Uniform as Uniform
from .distributions import Weibull as Weibull
from .simulation import simulate as simulate
from .stats import expected_worker_staleness as expected_worker_staleness
from .stats import format_histogram as format_histogram
from .stats import geometric_pmf as geometric_pmf
from .stats import staleness_pmf as staleness_pmf
from .stats import staleness_summary as staleness_summary
from .stats import staleness_tv as staleness_tv
from .stats import total_variation as total_variation
from .trace import COLUMN_NAMES as COLUMN_NAMES
from .trace import CommitTrace as CommitTrace
