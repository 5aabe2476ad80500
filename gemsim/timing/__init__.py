"""Timing model: latency laws, SimPy worker/server processes, commit traces, staleness.

Never imports JAX: a trace is produced from timing alone.
"""

from gemsim.trace import COLUMN_NAMES as COLUMN_NAMES
from gemsim.trace import CommitTrace as CommitTrace

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
from ._fit import Calibration as Calibration
from ._fit import Fit as Fit
from ._fit import GroupFit as GroupFit
from ._fit import batch_block as batch_block
from ._fit import calibrate_trace as calibrate_trace
from ._fit import fit_distribution as fit_distribution
from ._fit import group_workers as group_workers
from ._simulate import simulate as simulate
from ._stats import expected_worker_staleness as expected_worker_staleness
from ._stats import format_histogram as format_histogram
from ._stats import geometric_pmf as geometric_pmf
from ._stats import staleness_pmf as staleness_pmf
from ._stats import staleness_summary as staleness_summary
from ._stats import staleness_tv as staleness_tv
from ._stats import total_variation as total_variation
