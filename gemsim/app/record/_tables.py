"""The tables of a run's record, from what the run produced: the metrics frame (one row per
commit), the per-worker evaluations and summary, a population's per-client columns and its
tasks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gemsim import timing
from gemsim.trace import CommitTrace

EVAL_COLUMNS = ("train_loss", "test_loss", "test_accuracy")


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


def worker_summary_frame(
    trace: CommitTrace, out, clients: timing.ClientReport | None = None
) -> Any:
    """`worker_summary.parquet`: per worker, its commits among the applied ones and their
    share, its accepted commits (the rule's `weight` is not 0; every commit of a rule without
    one) and their share, its mean compute time (NaN: it never committed), the pushes it lost
    before its commits where the network loses some (`lost_pushes`), and what it holds
    (`Problem.worker_facts`: `shard_size`, the quadratic's `optimum_<i>`). With a population
    the rows are the clients (the data owners), not the slots, and the run's per-client
    report `clients` adds each one's `speed`, tasks `started` and `lost`, and `up_seconds`."""
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
        columns = client_columns(clients)
        table.update({k: columns[k] for k in ("speed", "started", "lost", "up_seconds")})
    return pd.DataFrame(table)


def client_columns(clients: timing.ClientReport) -> dict[str, np.ndarray]:
    """Each client's speed factor, tasks started, completed and lost, and time up (arrays
    indexed by client id), as the run that made the trace reported them (the timing model's
    one run, kept with the trace in the trace store; or a real run's server)."""
    return {
        "speed": np.asarray(clients.speed),
        "started": np.asarray(clients.started),
        "completed": np.asarray(clients.completed),
        "lost": np.asarray(clients.lost),
        "up_seconds": np.asarray(clients.up_seconds),
    }


def tasks_frame(tasks: timing.ClientTasks | None, trace: CommitTrace) -> Any:
    """`clients_tasks.parquet`: one row per task of a population's run, in the order they
    started: ``task``, ``client``, ``slot``, ``start``, ``end`` (its commit's time in the
    trace, the time its client went down, NaN in flight at the end), ``outcome``
    (``committed``, ``lost``, ``in_flight``), ``commit`` (its row in the trace, else -1) and
    ``staleness`` (the trace's, else -1). None without tasks."""
    import pandas as pd

    if tasks is None:
        return None
    commit = np.asarray(tasks.commit, np.int64)
    done = commit >= 0
    end = np.array(tasks.end, np.float64)
    # A real server's pool sees a commit a moment after the trace's clock reading of it.
    end[done] = trace.time[commit[done]]
    staleness = np.full(len(commit), -1, np.int64)
    staleness[done] = trace.staleness[commit[done]]
    outcome = pd.Categorical.from_codes(
        np.asarray(tasks.outcome, np.int8), categories=list(timing.TASK_OUTCOMES)
    )
    return pd.DataFrame(
        {
            "task": np.arange(len(commit), dtype=np.int64),
            "client": np.asarray(tasks.client, np.int64),
            "slot": np.asarray(tasks.slot, np.int64),
            "start": np.asarray(tasks.start, np.float64),
            "end": end,
            "outcome": outcome,
            "commit": commit,
            "staleness": staleness,
        }
    )
