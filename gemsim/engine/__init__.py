"""Executing a commit trace with real gradients (docs/design.md §5).

The real backends (gemsim.real) run the engine's own two phases of a commit and record its
metrics the engine's way: `gradient_phase`, `commit_phase`, `RowLayout`, `initial_slots` and
`MetricsRecorder` are public for them, and `final_evaluation` for their last evaluation."""

from ._choice import ExecutorKind as ExecutorKind
from ._choice import resolve_executor as resolve_executor
from ._executor import EngineResult as EngineResult
from ._executor import Executor as Executor
from ._executor import evaluation as evaluation
from ._executor import final_evaluation as final_evaluation
from ._layout import RowLayout as RowLayout
from ._layout import initial_slots as initial_slots
from ._many import ManyRunsExecutor as ManyRunsExecutor
from ._many import RunInputs as RunInputs
from ._metrics import WORKER_SUMMARY as WORKER_SUMMARY
from ._metrics import MetricsRecorder as MetricsRecorder
from ._metrics import worker_summary as worker_summary
from ._plan import ExecutionPlan as ExecutionPlan
from ._plan import UnreplayableTrace as UnreplayableTrace
from ._plan import client_rows as client_rows
from ._plan import kept_rows as kept_rows
from ._plan import make_plan as make_plan
from ._plan import plan_of as plan_of
from ._sequential import SequentialExecutor as SequentialExecutor
from ._step import Carry as Carry
from ._step import StepInput as StepInput
from ._step import StepOutput as StepOutput
from ._step import commit_phase as commit_phase
from ._step import gradient_phase as gradient_phase
from ._step import make_step as make_step
from ._step import step_inputs as step_inputs
from ._wavefront import WavefrontExecutor as WavefrontExecutor


def __getattr__(name: str):
    """0.2's name of the wavefront executor, kept for one release with a DeprecationWarning."""
    if name == "BatchedExecutor":
        import warnings

        warnings.warn(
            "gemsim.engine.BatchedExecutor is deprecated; use gemsim.engine.WavefrontExecutor",
            DeprecationWarning,
            stacklevel=2,
        )
        return WavefrontExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
