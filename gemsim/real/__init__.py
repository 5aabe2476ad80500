"""Real asynchronous runs that record the commit trace they produce (docs/design.md §6).

`process` (standard library, one process per worker) and `ray` (extra `gemsim[ray]`,
actors, across machines) run the same protocol: the parameter server applies each worker's
work atomically, in arrival order, with the engine's own compiled commit; the workers run
the engine's own gradient phase. Replaying the recorded trace in the engine must then give
the same parameters. A population (`clients:`) runs on both: the workers are slots serving
the clients the server chooses (`_clients.py`). Both servers also run
FedCompass's scheduler (`_compass.py`), for workers or a population's clients: its arrival
groups hold works until their aggregation.
"""

from __future__ import annotations

from gemsim import timing
from gemsim._checks import UserError
from gemsim.types import REAL_BACKENDS

from ._job import RealJob as RealJob
from ._job import RealRun as RealRun
from ._process import run_process as run_process
from ._server import WorkerEvent as WorkerEvent


def run_backend(name: str, job: RealJob, *, progress=None, address: str | None = None) -> RealRun:
    """Run the job on the named backend; `address` (ray only) joins an existing cluster."""
    if not isinstance(job.spec.protocol, timing.Async | timing.Compass):
        raise UserError(
            job.name,
            f"server.protocol: the real backends run the async protocol (and FedCompass's "
            f"scheduler) only, got "
            f"{job.spec.protocol.name!r}; set server.protocol: async (the sync rule then "
            f"applies each commit as its own round)",
        )
    if job.spec.stops is not None:
        raise UserError(
            job.name,
            f"optimizer: the rule's stops ({job.spec.stops!r}) stop computations in flight, "
            f"which the real backends do not do (a worker process finishes what it computes); "
            f"allowed: optimizer.stops / optimizer.restarts false",
        )
    if name == "process":
        if address is not None:
            raise ValueError("--address is for the ray backend; the process backend is local")
        return run_process(job, progress=progress)
    if name == "ray":
        from ._ray import run_ray

        return run_ray(job, progress=progress, address=address)
    raise ValueError(f"backend {name!r} is not one of {REAL_BACKENDS}")
