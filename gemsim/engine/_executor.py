"""What both executors share: the carry, the loop over segments, host actions (snapshot
fills, evaluations, progress) and the result. An executor only says how it runs the commits
of one segment (abstract/final: `_run_segment` is the one abstract method)."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import Progress, PyTree, Status

from ._layout import RowLayout, pull_rows, refill_slots
from ._metrics import MetricsRecorder
from ._plan import ExecutionPlan, split_at
from ._step import Carry, StepInput, step_inputs

EVAL_IN_LOOP_GAP = 256
"""An executor that can evaluate inside its commit loop where a plan evaluates on average
more often than once per this many commits: evaluated by the host, each evaluation ends a
segment of the loop (a call, its outputs fetched, the evaluation's own call and fetch), about
0.3 ms at d = 10,000 on a 2-core CPU against 19 us per commit (benchmarks/fixed_costs.py)."""
EVAL_IN_LOOP_WORK = 4_000_000
"""...and where an evaluation is small: parameters x examples it reads (the training subset,
the test set and the workers' samples) at most this. A large evaluation pays for its call
anyway, and inside a loop XLA's CPU backend may run it slower than at top level (a
convolution: benchmarks/RESULTS.md, "Figures the code cites")."""


def evaluation_work(problem) -> int:
    """Parameters x examples an evaluation reads: the training subset, the test set and, where
    the workers hold data of their own, their samples."""
    examples = problem.eval_size + problem.test_size
    sample = problem.data.get("worker_eval") if isinstance(problem.data, dict) else None
    if sample is not None:
        examples += int(np.size(sample["worker"]))
    return problem.n_params * examples


def evals_in_loop(problem, commits: int, evaluations: int) -> bool:
    """Whether a plan of `commits` commits and `evaluations` evaluations of `problem` is
    evaluated inside the commit loop by an executor that can (`EVAL_IN_LOOP_GAP`,
    `EVAL_IN_LOOP_WORK`)."""
    often = commits < EVAL_IN_LOOP_GAP * evaluations
    return often and evaluation_work(problem) <= EVAL_IN_LOOP_WORK


@dataclass(frozen=True)
class EngineResult:
    """What an executor returns: final central parameters, status and per-commit metrics;
    where the workers have data of their own (`Problem.has_worker_data`), the central
    variable on each worker's data and what each worker holds."""

    params: PyTree  # numpy leaves
    status: Status
    n_commits: int  # commits applied (the diverging commit is not applied)
    diverged_at: int | None
    metrics: dict[str, np.ndarray]  # one entry per executed commit (columns: `MetricsRecorder`)
    evals: dict[int, dict[str, float]]  # commit -> evaluation of the central variable after it
    final: dict[str, float]  # evaluation of the final central variable (the last finite one)
    server_state: PyTree  # the rule's server state at the end (numpy leaves)
    # commit -> {"loss", "accuracy"}: float32 [n_workers], the evaluation of each worker's data
    worker_evals: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    final_workers: dict[str, np.ndarray] = field(default_factory=dict)  # of the final variable
    worker_facts: dict[str, np.ndarray] = field(default_factory=dict)  # `Problem.worker_facts`
    # The data owners (workers, or a population's clients) whose values `worker_evals` and
    # `final_workers` hold, in their order; None: every one of the problem's, 0 .. n - 1.
    worker_eval_owners: np.ndarray | None = None


def evaluation(
    problem, theta: PyTree, owners: np.ndarray | None = None
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The central variable's evaluation, on the host: its scalars (`Problem.evaluate`) and
    each worker's values (`Problem.evaluate_workers`, ``{}`` where workers have no data of
    their own).

    `owners`: the data owners whose values are kept (`check_owners`), in that order; None:
    every one. An empty selection skips `Problem.evaluate_workers` altogether (a population
    of N clients would otherwise evaluate N data sets); a non-empty one keeps those entries of
    the problem's evaluation of every owner (the problem evaluates them all)."""
    if owners is not None and owners.size == 0:
        return jax.device_get(problem.evaluate(theta)), {}
    scalars, workers = jax.device_get((problem.evaluate(theta), problem.evaluate_workers(theta)))
    return scalars, select_owners(workers, owners)


def check_owners(owners) -> np.ndarray | None:
    """The data owners a run's per-worker evaluation keeps: None (every one), or distinct ids
    >= 0 as a 1-D int64 array (empty: none)."""
    if owners is None:
        return None
    array = np.asarray(owners)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"eval_owners must be a 1-D array of ids, got {array.dtype} {array.shape}")
    array = array.astype(np.int64)
    if np.any(array < 0) or len(np.unique(array)) != array.size:
        raise ValueError("eval_owners must hold distinct ids >= 0")
    return array


def select_owners(workers: dict, owners: np.ndarray | None) -> dict[str, np.ndarray]:
    """The per-worker values of the given owners (None: all of them; none: ``{}``)."""
    if owners is None or not workers:
        return workers
    if not owners.size:
        return {}
    for values in workers.values():
        if owners.max() >= len(values):
            raise ValueError(
                f"eval_owners names data owner {int(owners.max())}; the problem has {len(values)}"
            )
    return {name: np.asarray(values)[owners] for name, values in workers.items()}


class Executor(abc.ABC):
    """A rule compiled for a model shape and a number of workers; `execute` runs any plan,
    problem (same model, any seed or data) and initial parameters with it."""

    def __init__(self, rule, problem, *, params: PyTree, n_workers: int, chunk: int = 512):
        self.rule, self.problem, self.n_workers, self.chunk = rule, problem, n_workers, chunk
        self.params0 = params
        self.layout = RowLayout.for_rule(rule, params, n_workers)
        self._fill = jax.jit(
            lambda slots, theta, server, rows, fresh: pull_rows(
                rule, self.layout, slots, theta, server, rows, fresh
            ),
            donate_argnums=0,
        )
        # Every run's rows are written into a buffer it is given (`initial_carry`).
        self._initial = jax.jit(self._initial_fn, donate_argnums=1)
        self._spare: jax.Array | None = None

    def _evals_in_loop(self, problem, plan: ExecutionPlan) -> bool:
        """Whether the plan's evaluations run inside the commit loop (`_run_segment_evaluating`)
        rather than between segments; an executor that cannot never does."""
        return False

    def _run_segment_evaluating(
        self,
        problem,
        carry: Carry,
        inputs: StepInput,
        start: int,
        stop: int,
        plan: ExecutionPlan,
        recorder: MetricsRecorder,
        owners: np.ndarray | None,
    ) -> Carry:
        """`_run_segment`, also recording the evaluations of the plan's commits in [start, stop)
        (those before a divergence) from inside the loop."""
        raise NotImplementedError

    @abc.abstractmethod
    def _run_segment(
        self,
        problem,
        carry: Carry,
        inputs: StepInput,
        start: int,
        stop: int,
        plan: ExecutionPlan,
        recorder: MetricsRecorder,
    ) -> Carry:
        """Apply commits [start, stop) in order; record their StepOutputs in commit order."""

    def initial_carry(self, params: PyTree | None = None) -> Carry:
        """A fresh carry (copies: the executors donate, and so delete, the carry they get).

        Its slots are written into the buffer of the last execution's final slots when the
        executor kept one (`release` drops it): the buffer is a run's largest array (at
        n = 100 and the paper's CNN, 198 MB), and fresh memory costs a page fault per 4 KiB
        at its first write, which was most of an execution's fixed cost (docs/design.md §9).
        Runs of a sweep that share a compiled executor (`app`) reuse it one after another.
        A first run writes into a zeroed buffer through the same compiled program, so that
        its second run compiles nothing more (a second program cost time: benchmarks/
        RESULTS.md, "Figures the code cites").
        """
        params = self.params0 if params is None else params
        spare, self._spare = self._spare, None
        if spare is None:
            spare = jnp.zeros((self.n_workers + 1, self.layout.row_size), self.layout.dtype)
        return self._initial(params, spare)

    def release(self) -> None:
        """Drops the slots buffer kept for the next execution (memory back to the device)."""
        self._spare = None

    def _keep(self, carry: Carry) -> None:
        """Keeps a finished carry's slots for the next `initial_carry` (nothing reads them
        once its run's results are taken out)."""
        self._spare = carry.slots

    def _initial_fn(self, params: PyTree, spare: jax.Array) -> Carry:
        # Compiled whole: the rule's per-worker state then goes straight into the slots
        # instead of being built apart first ([n, P] arrays per state leaf, fresh memory).
        state = self.rule.init(params, self.n_workers)
        slots = refill_slots(spare, params, state.workers, self.n_workers)
        return Carry(
            theta=jax.tree.map(jnp.copy, params),
            server=jax.tree.map(jnp.copy, state.server),
            slots=slots,
            diverged=jnp.zeros((), bool),
            diverged_at=jnp.full((), -1, jnp.int32),
        )

    def execute(
        self,
        plan: ExecutionPlan,
        *,
        problem=None,
        params: PyTree | None = None,
        progress: Progress | None = None,
        final_eval: bool = True,
        eval_owners=None,
    ) -> EngineResult:
        """Run the plan; `problem`/`params` default to the ones given at construction.

        `final_eval=False` skips evaluating the final central variable when the plan's
        evaluations did not (its `final` is then empty): throughput benchmarks use it.
        `eval_owners`: the data owners (workers, or a population's clients) whose per-worker
        evaluation is kept (`evaluation`); None: every one, an empty array: none.

        If commit j is non-finite the run stops at the end of that chunk, and the first j
        commits are executed again (the run is deterministic) to recover the last finite
        central variable and states: divergence is rare, and this keeps every guard out of
        the commits' hot loop.
        """
        if plan.n_workers != self.n_workers:
            raise ValueError(f"plan has {plan.n_workers} workers, executor {self.n_workers}")
        problem = self.problem if problem is None else problem
        plan.check_data_owners(problem)
        owners = check_owners(eval_owners)
        carry, recorder = self._run(problem, params, plan, progress, owners)
        diverged_at = int(carry.diverged_at)
        if diverged_at >= 0:
            self._keep(carry)
            # Dropped before the re-run: a rule's server state can be most of the memory
            # (per-client rows), and two of them at once doubled a diverged run's peak.
            carry = None
            carry = self._last_finite(problem, params, plan, diverged_at)
        result = engine_result(problem, carry, recorder, diverged_at, final_eval, owners=owners)
        self._keep(carry)
        return result

    def _run(
        self,
        problem,
        params,
        plan: ExecutionPlan,
        progress: Progress | None,
        owners: np.ndarray | None = None,
    ):
        carry, recorder = self.initial_carry(params), MetricsRecorder()
        inputs = step_inputs(plan)
        in_loop = plan.evals.size > 0 and self._evals_in_loop(problem, plan)
        if in_loop:  # segments end only where the host fills a row
            segments = split_at({*plan.host_fills, len(plan) - 1}, self.chunk)
        else:
            segments = plan.segments(self.chunk)
        for start, stop in segments:
            if in_loop:
                carry = self._run_segment_evaluating(
                    problem, carry, inputs, start, stop, plan, recorder, owners
                )
            else:
                carry = self._run_segment(problem, carry, inputs, start, stop, plan, recorder)
            if bool(carry.diverged):
                break
            carry = self._host_actions(
                problem, carry, plan, stop - 1, recorder, owners, evaluate=not in_loop
            )
            if progress is not None:
                progress(stop, len(plan))
        return carry, recorder

    def _last_finite(self, problem, params, plan: ExecutionPlan, stop: int) -> Carry:
        """The carry after the first `stop` commits, stepping back further in the rare case
        where theta overflowed although every update was finite (its evaluations are not
        kept: none per worker)."""
        while True:
            carry, _ = self._run(problem, params, plan.truncated(stop), None, _NONE)
            theta_ok = all(np.all(np.isfinite(x)) for x in jax.tree.leaves(carry.theta))
            if stop == 0 or (not bool(carry.diverged) and theta_ok):
                return carry
            self._keep(carry)
            stop = int(carry.diverged_at) if bool(carry.diverged) else stop - 1
            carry = None  # freed before the next re-run (as in `execute`)

    def _host_actions(
        self,
        problem,
        carry: Carry,
        plan: ExecutionPlan,
        k: int,
        recorder,
        owners=None,
        *,
        evaluate: bool = True,
    ) -> Carry:
        rows = plan.host_fills.get(k)
        if rows is not None:
            padded = np.full(self.n_workers, self.n_workers, dtype=np.int32)
            padded[: rows.size] = rows
            fresh = np.zeros(self.n_workers, dtype=bool)
            fresh[: rows.size] = plan.host_fresh[k]
            slots = self._fill(carry.slots, carry.theta, carry.server, padded, fresh)
            carry = carry._replace(slots=slots)
        if evaluate and k in plan.eval_set:
            recorder.add_eval(k, *evaluation(problem, carry.theta, owners))
        return carry


_NONE = np.zeros(0, np.int64)  # no data owner: no per-worker evaluation


def engine_result(
    problem,
    carry: Carry,
    recorder: MetricsRecorder,
    diverged_at: int,
    final_eval: bool,
    *,
    length: int | None = None,
    owners: np.ndarray | None = None,
) -> EngineResult:
    """A run's EngineResult from its final carry and recorded metrics (every executor's);
    `length`: the run's commits, where the recorder holds more (padding of runs executed
    together); `owners`: the data owners its per-worker evaluations keep (`evaluation`)."""
    metrics = recorder.columns(stop=diverged_at + 1 if diverged_at >= 0 else length)
    n_rows = len(next(iter(metrics.values()))) if metrics else 0
    last = max(recorder.evals) if recorder.evals else None
    workers: dict[str, np.ndarray] = {}
    if diverged_at < 0 and last is not None and last == n_rows - 1:
        final, workers = recorder.evals[last], recorder.worker_evals.get(last, {})
    elif not final_eval:
        final = {}
    else:
        final, workers = final_evaluation(problem, carry.theta, owners)
    return EngineResult(
        params=jax.device_get(carry.theta),
        status=Status.DIVERGED if diverged_at >= 0 else Status.OK,
        n_commits=diverged_at if diverged_at >= 0 else n_rows,
        diverged_at=diverged_at if diverged_at >= 0 else None,
        metrics=metrics,
        evals=recorder.evals,
        final=final,
        server_state=jax.device_get(carry.server),
        worker_evals=recorder.worker_evals,
        final_workers=workers,
        worker_facts=problem.worker_facts(),
        worker_eval_owners=owners,
    )


def final_evaluation(
    problem, theta: PyTree, owners: np.ndarray | None = None
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """A run's final evaluation as `EngineResult` holds it: the scalars (with the per-worker
    values summarised, `worker_summary`) and each worker's values (of `owners`, see
    `evaluation`)."""
    recorder = MetricsRecorder()
    recorder.add_eval(0, *evaluation(problem, theta, owners))
    return recorder.evals[0], recorder.worker_evals.get(0, {})
