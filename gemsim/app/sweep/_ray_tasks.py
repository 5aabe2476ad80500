"""`gemsim run --scheduler ray [--address ADDR]`: the units of a sweep as Ray tasks.

Each unit is one task; its records (manifest, trace, metrics, parameters) come back through
Ray's object store and the driver writes the run folders, so the nodes need gemsim and its
dependencies but no file system shared with the driver. Tasks that see the results folder
(a local instance, a shared file system) share traces through its trace store; elsewhere a
task simulates its unit's traces itself (`_units.Unit.traces`). Without `--address` a local Ray
instance is started (and stopped at the end); with one, the driver joins that cluster.

A task whose worker process or node is lost is retried by Ray (up to RAY_TASK_RETRIES times;
an exception inside a run is not retried: it is that run's `failed` record). Each record
keeps where it ran in its manifest (`provenance.placement`: node, host, pid, and `attempt`,
0 for the first try), so a retried run says so. A task lost more often than that ends as
`failed` runs, which `--resume` runs again. On any exit of the driver the tasks still under
way are cancelled.

A task asks Ray for one CPU, so Ray runs as many at once as the cluster has CPUs. Like the
job processes of `--jobs`, a task keeps XLA's settings: XLA:CPU's results depend on the number of
CPUs a process may use (see _local_jobs.py), so a node with as many CPUs as the driver's
machine computes its numbers; `provenance.placement.cpus` records the count.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import suppress
from typing import Any

from gemsim import _ray_local as ray_local
from gemsim.results import RunResult

from ..execute._compile_cache import setup_compilation_cache
from ..record._provenance import utc_now
from ._local_jobs import Lost
from ._units import execute_unit, here

RAY_TASK_RETRIES = 3
POLL_S = 0.5


def ray_unit(unit) -> list[RunResult]:
    """The body of a task (module level: Ray ships it by reference)."""
    import ray

    setup_compilation_cache()  # a node's own (a local instance's tasks inherit the driver's)
    where = here("ray", node=ray.get_runtime_context().get_node_id(), attempt=_attempt(ray))
    return execute_unit(unit, where=where)


def _attempt(ray) -> int | None:
    """How often Ray has retried the task under way (0: its first try). Ray keeps the count
    on its core worker only, outside its public API: None where that is not there."""
    try:
        worker = ray._private.worker.global_worker.core_worker
        return int(worker.get_current_task_attempt_number())
    except (AttributeError, TypeError, ValueError):
        return None


class RayPool:
    """Runs units as Ray tasks and hands back their records as they finish.

    Args:
        address: a running cluster to join (`ray start --head`); None starts a local instance
            (with `jobs` CPUs, default all of this machine's), unless Ray is already
            initialised in this process, in which case that instance is used.
        jobs: tasks in flight at most (None: as many as there are units; Ray queues them).
    """

    def __init__(self, *, address: str | None = None, jobs: int | None = None):
        self.address, self.jobs = address, jobs

    def results(
        self, units: Sequence[Any], keys: Sequence[Hashable] | None = None
    ) -> Iterator[tuple[int, list[RunResult] | Lost]]:
        """`(index, records)` for every unit, in the order they finish; a `Lost` for one
        whose task failed after Ray's retries. Units go in sweep order and Ray alone decides
        where each runs (`keys`, what each unit compiles, is not used to place them)."""
        if not units:
            return  # nothing to do: no Ray instance to start (e.g. --resume of a full sweep)
        ray = _import_ray()
        cpus = self.jobs if self.address is None else None
        in_flight: dict[Any, tuple[int, float, str]] = {}
        init = {"address": self.address, "num_cpus": cpus, "include_dashboard": False}
        # Signals kept as they were while Ray starts and stops: gemsim/_ray_local.py.
        with ray_local.running(ray, log_to_driver=False, **init):
            try:
                task = ray.remote(num_cpus=1, max_retries=RAY_TASK_RETRIES, retry_exceptions=False)
                task = task(ray_unit)
                queue = collections.deque(range(len(units)))
                limit = self.jobs or max(len(units), 1)
                while queue or in_flight:
                    while queue and len(in_flight) < limit:
                        index = queue.popleft()
                        ref = task.remote(units[index])
                        in_flight[ref] = (index, time.perf_counter(), utc_now())
                    ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_S)
                    for ref in ready:
                        index, started, started_at = in_flight.pop(ref)
                        yield index, _collect(ray, ref, started, started_at)
            finally:
                for ref in in_flight:
                    with suppress(Exception):  # the task may have ended meanwhile
                        ray.cancel(ref, force=True)


def _collect(ray, ref, started: float, started_at: str) -> list[RunResult] | Lost:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        reason = f"its Ray task was lost ({RAY_TASK_RETRIES} retries): {type(exc).__name__} {first}"
        return Lost(reason, started, started_at)


def _import_ray():
    try:
        import ray
    except ImportError:  # pragma: no cover - depends on the extra
        raise RuntimeError("--cluster ray needs the extra: pip install 'gemsim[ray]'") from None
    return ray
