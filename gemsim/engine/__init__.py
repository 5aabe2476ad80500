"""Executing a commit trace with real gradients (DESIGN.md §5)."""

from .plan import ExecutionPlan as ExecutionPlan
from .plan import make_plan as make_plan
from .sequential import EngineResult as EngineResult
from .sequential import SequentialExecutor as SequentialExecutor
from .sequential import chunk_sizes as chunk_sizes
from .step import Carry as Carry
from .step import StepInput as StepInput
from .step import StepOutput as StepOutput
from .step import make_step as make_step
from .step import step_inputs as step_inputs
