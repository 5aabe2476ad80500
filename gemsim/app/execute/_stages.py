"""The stages a simulated run needs, built from a scenario: its problem (data sets and user
models kept for the next runs of the process) and a compiled executor (kept too); the
preflight check of a problem. A real backend's job is `_real.py`'s."""

from __future__ import annotations

from gemsim import config
from gemsim._lru import Lru
from gemsim.config import Scenario, ScenarioError


def require(scenario: Scenario, block: str):
    """The scenario's `block`, or a ScenarioError saying that running needs it."""
    value = getattr(scenario, block)
    if value is None:
        raise ScenarioError(
            scenario.name,
            [f"{block}: required to run (gemsim trace needs only workers and budget)"],
        )
    return value


class ProblemInputs:
    """Loaded user models and data sets on the device, kept for the next runs of a sweep:
    every run (and every worker: batches are gathered from the one array by index) reads the
    same copy of a data set, and runs of one imported model share its functions, hence their
    compiled code. Data sets are large: only the two most recently used are kept."""

    def __init__(self, models: int = 8, data: int = 2):
        self._models, self._data = Lru(models), Lru(data)

    def model(self, spec):
        """``(model, data on the device or None)`` for a model spec (built-ins: themselves)."""
        from gemsim import problems

        if not isinstance(spec, problems.Imported):
            return spec, None

        def load():
            model, data = problems.resolve_model(spec)
            if data is not None:
                source = f"data returned by {model.name}"
                data = problems.to_device(problems.Dataset(**problems.check_arrays(data, source)))
            return model, data

        return self._models.get((spec,), load)

    def data(self, spec, seed: int):
        """The data set a spec names, on the device."""
        from gemsim import problems

        load = lambda: problems.to_device(problems.load_dataset(spec, seed))
        return self._data.get(problems.dataset_key(spec, seed), load)


# One per process, like EXECUTORS below.
INPUTS = ProblemInputs()

PROBLEMS = Lru(4)
"""Built problems by what they are built from (`problem_key`): a sweep's runs that differ
only in their optimizer, budget or timing share one, as they share its data. A problem is an
immutable value; few are kept, since each holds its data set on the device."""

_PROBLEM_BLOCKS = ("problem", "seed", "eval", "workers", "clients")


def problem_key(scenario: Scenario) -> str:
    """What `build_problem` reads of a scenario, as JSON (file digests included)."""
    return _joined(getattr(scenario, name) for name in _PROBLEM_BLOCKS)


def build_problem(scenario: Scenario):
    """The scenario's problem: data on the device (shared with the previous runs that read
    the same data set), streams keyed by the seed; built once for the runs of a process that
    build it from the same blocks (`PROBLEMS`)."""
    require(scenario, "problem")
    return PROBLEMS.get(problem_key(scenario), lambda: _built_problem(scenario))


def _built_problem(scenario: Scenario):
    from gemsim import problems

    block = scenario.problem
    model_spec, dataset = config.problem_args(scenario)
    if isinstance(model_spec, problems.Quadratic):
        model, data = model_spec, None
    else:
        model, data = INPUTS.model(model_spec)
        if data is not None and dataset is not None:
            raise problems.ModelError(
                model.name,
                "the factory returns its data and the scenario names a dataset too: "
                "remove problem.dataset (or return the model alone)",
            )
        if data is None and dataset is not None:
            data = INPUTS.data(dataset, scenario.seed)
    try:
        return problems.make_problem(
            model,
            dataset,
            batch_size=block.batch_size,
            seed=scenario.seed,
            eval_subset=scenario.eval.subset,
            eval_per_worker=scenario.eval.per_worker,
            data=data,
            split=config.data_split(scenario),
            n_workers=config.data_owners(scenario),
            eval_owners=scenario.eval.clients if scenario.clients is not None else None,
        )
    except problems.PartitionError as exc:
        raise ScenarioError(scenario.name, [split_field(scenario, exc)]) from None


def split_field(scenario: Scenario, exc) -> str:
    """A partition error named by its field in the scenario: `problem.partition.<field>`, or
    `workers.groups[i].data.<field>` (`clients.groups[i]` in a population) for the group
    whose classes it is about."""
    if exc.field == "shards":  # a shard smaller than a batch
        return f"problem.batch_size: {exc.message}"
    if exc.claim is None:
        return f"problem.partition.{exc}"
    return f"{config.claim_field(scenario, exc.claim)}.data.{exc}"


def check_problem(scenario: Scenario) -> None:
    """What `preflight` checks of a problem: the sizes of a built-in one (its files exist
    and give them); an imported model, an `arrays` file or a data set split among the workers
    is loaded (kept for the run), split, and the model traced on abstract batches. Errors
    name the field."""
    from gemsim import problems

    model_spec, dataset = config.problem_args(scenario)
    user = isinstance(model_spec, problems.Imported) or isinstance(dataset, problems.Arrays)
    if not user and config.data_split(scenario) is None:
        try:
            config.problem_sizes(scenario)
        except (problems.DataError, OSError, ValueError) as exc:
            raise ValueError(f"problem.dataset: {exc}") from None
        return
    try:
        build_problem(scenario)
    except problems.ModelError as exc:
        raise ValueError(f"problem.model: {exc}") from None
    except problems.DataError as exc:
        raise ValueError(f"problem.dataset: {exc}") from None
    except ScenarioError as exc:
        raise ValueError("; ".join(exc.problems)) from None


def compile_key(scenario: Scenario) -> str:
    """What a run's compiled executor depends on, as far as the scenario alone tells (the
    `ExecutorCache` key without building anything): a process that ran one run reuses its
    compiled code for another of the same key, so sweeps hand such runs to the same process."""
    return _joined((scenario.optimizer, scenario.problem, scenario.workers.count, scenario.engine))


def _joined(parts) -> str:
    """Blocks as their JSON, other values as text, one key."""
    return "|".join(p.model_dump_json() if hasattr(p, "model_dump_json") else str(p) for p in parts)


class ExecutorCache:
    """Compiled executors, reused across runs that differ only in seed or timing (repeats and
    timing sweeps then compile once). The key is everything the compiled code depends on."""

    def __init__(self, size: int = 8):
        self._items = Lru(size)

    def get(self, scenario: Scenario, rule, problem, n_workers: int, rows: int | None = None):
        """The compiled executor of `rule` (its per-client state in `rows` rows, where a run
        keeps those of the clients its trace names) on `problem` for `n_workers`."""
        import jax

        from gemsim import engine

        kind = engine.ExecutorKind(scenario.engine.executor)
        cls = engine.resolve_executor(kind, n_workers)
        key = (
            cls,
            scenario.optimizer.model_dump_json(),
            jax.tree_util.tree_structure(problem),
            n_workers,
            scenario.engine.chunk,
            # A rule's per-client state has N in its program (its rows, its mean's divisor).
            config.data_owners(scenario) if config.keeps_client_state(scenario) else None,
            rows,
        )
        executor = self._items.get(
            key,
            lambda: cls(
                rule,
                problem,
                params=problem.init_params,
                n_workers=n_workers,
                chunk=scenario.engine.chunk,
            ),
        )
        # Only the executor in use keeps its last run's slots for the next run: a run's
        # largest buffer (`Executor.initial_carry`), not worth holding for the others.
        for other in self._items.values():
            if other is not executor:
                other.release()
        return executor


# One per process: compiled code is the one thing worth keeping between the runs of a sweep.
EXECUTORS = ExecutorCache()
