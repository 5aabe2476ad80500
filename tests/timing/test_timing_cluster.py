"""ClusterSpec and its parts validate on construction."""

import pytest

from gemsim.timing import (
    ClusterSpec,
    CommitBudget,
    Constant,
    Discipline,
    Failure,
    SecondsBudget,
    StepsBudget,
    WorkerSpec,
)

W = WorkerSpec(Constant(1.0))


def _spec(**overrides):
    fields = {"workers": (W, W), "budget": CommitBudget(10)}
    fields.update(overrides)
    return ClusterSpec(**fields)


def test_defaults_and_normalisation():
    spec = _spec(workers=[W, W, W], discipline="random")
    assert spec.workers == (W, W, W) and spec.n_workers == 3
    assert spec.discipline is Discipline.RANDOM
    assert spec.window == 1 and not spec.synchronous
    assert spec.pull is None and spec.push is None and spec.service is None
    assert spec.transfer_seconds == 0.0
    assert _spec(bandwidth_bytes_per_s=100.0, model_bytes=50).transfer_seconds == 0.5
    assert StepsBudget(10).commits_per_worker(3) == 4
    assert StepsBudget(9).commits_per_worker(3) == 3


BAD = [
    (lambda: _spec(workers=()), "ClusterSpec.workers must be a non-empty"),
    (lambda: _spec(workers=(W, "w")), r"ClusterSpec.workers\[1\] must be a WorkerSpec"),
    (lambda: _spec(budget=10), "ClusterSpec.budget must be a CommitBudget"),
    (lambda: _spec(pull=1.0), "ClusterSpec.pull must be one of .* or None, got 1.0"),
    (lambda: _spec(service="fast"), "ClusterSpec.service"),
    (lambda: _spec(bandwidth_bytes_per_s=0.0), "ClusterSpec.bandwidth_bytes_per_s"),
    (lambda: _spec(model_bytes=-1), "ClusterSpec.model_bytes must be an integer >= 0"),
    (lambda: _spec(model_bytes=1.5), "ClusterSpec.model_bytes"),
    (lambda: _spec(discipline="lifo"), "ClusterSpec.discipline must be one of fifo, random"),
    (lambda: _spec(window=0), "ClusterSpec.window must be an integer >= 1, got 0"),
    (lambda: _spec(synchronous="yes"), "ClusterSpec.synchronous must be a bool"),
    (lambda: ClusterSpec(workers=(W,)), "budget"),
    (lambda: CommitBudget(0), "CommitBudget.commits must be an integer >= 1, got 0"),
    (lambda: CommitBudget(2.5), "CommitBudget.commits"),
    (lambda: StepsBudget(0), "StepsBudget.steps_per_worker"),
    (lambda: SecondsBudget(0.0), "SecondsBudget.seconds must be a finite number > 0"),
    (lambda: SecondsBudget(float("inf")), "SecondsBudget.seconds"),
    (lambda: Failure(at=-1.0), "Failure.at must be a finite number >= 0"),
    (lambda: Failure(at=1.0, restart_after=-1.0), "Failure.restart_after"),
    (lambda: WorkerSpec("lognormal"), "WorkerSpec.compute must be one of"),
    (lambda: WorkerSpec(Constant(0.0)), "WorkerSpec.compute must have a mean > 0"),
    (lambda: WorkerSpec(Constant(1.0), speed=0.0), "WorkerSpec.speed must be a finite number > 0"),
    (lambda: WorkerSpec(Constant(1.0), join_at=-2.0), "WorkerSpec.join_at"),
    (lambda: WorkerSpec(Constant(1.0), failures=(1.0,)), r"WorkerSpec.failures\[0\] must be a"),
    (
        lambda: WorkerSpec(Constant(1.0), join_at=5.0, failures=(Failure(5.0, 1.0),)),
        r"WorkerSpec.failures\[0\].at must be > 5.0",
    ),
    (
        lambda: WorkerSpec(Constant(1.0), failures=(Failure(2.0, 1.0), Failure(2.5, 1.0))),
        r"WorkerSpec.failures\[1\].at must be > 3.0 .*got 2.5",
    ),
    (
        lambda: WorkerSpec(Constant(1.0), failures=(Failure(2.0), Failure(5.0))),
        r"WorkerSpec.failures\[1\] .* follows a crash without restart",
    ),
]


@pytest.mark.parametrize(("build", "message"), BAD)
def test_invalid_specs_name_field_and_value(build, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build()


def test_specs_are_frozen():
    spec = _spec()
    with pytest.raises(AttributeError):
        spec.window = 2  # type: ignore[misc]
