"""Executing a commit trace with real gradients (DESIGN.md §5)."""

from .batched import BatchedExecutor as BatchedExecutor
from .choice import ExecutorKind as ExecutorKind
from .choice import resolve_executor as resolve_executor
from .executor import EngineResult as EngineResult
from .executor import Executor as Executor
from .executor import chunk_sizes as chunk_sizes
from .plan import ExecutionPlan as ExecutionPlan
from .plan import make_plan as make_plan
from .sequential import SequentialExecutor as SequentialExecutor
from .step import Carry as Carry
from .step import StepInput as StepInput
from .step import StepOutput as StepOutput
from .step import make_step as make_step
from .step import step_inputs as step_inputs
