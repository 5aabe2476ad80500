"""Staleness statistics of a commit trace, and the theory they are checked against.

Theory (n homogeneous workers, instantaneous PS, pull at commit; docs/design.md §4):
the mean staleness is ``n - 1`` for any compute law; a worker committing at rate
``r_i`` has mean staleness ``(R - r_i) / r_i`` with ``R = sum(r)``; with exponential
compute times staleness is geometric, ``P(tau = k) = (1/n) (1 - 1/n)^k``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gemsim.trace import CommitTrace


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def staleness_pmf(trace: CommitTrace) -> np.ndarray:
    """Empirical staleness distribution: entry k is the fraction of commits with tau = k."""
    if len(trace) == 0:
        return np.zeros(0)
    return np.bincount(trace.staleness) / len(trace)


def staleness_summary(trace: CommitTrace) -> dict[str, Any]:
    """Summary statistics of a trace, as plain (JSON-serialisable) Python values.

    Keys: ``commits``, ``n_workers``, ``duration``, ``staleness_mean``,
    ``staleness_var`` (population variance), ``staleness_p50``, ``staleness_p99``
    (observed values: the smallest tau whose empirical CDF reaches the level),
    ``staleness_max``, ``commits_per_second`` (commits / duration), ``ps_utilisation``
    (PS busy time / duration; from the service times if the trace has no busy time),
    ``per_worker`` (one ``{worker, commits, staleness_mean}`` per worker, including
    workers that never committed) and ``histogram`` (commit counts for tau = 0..max).
    Statistics that are undefined (no commits, zero duration) are None.
    """
    n = len(trace)
    tau = trace.staleness
    counts = np.bincount(trace.worker, minlength=trace.n_workers)
    sums = np.bincount(trace.worker, weights=tau, minlength=trace.n_workers)
    per_worker = [
        {
            "worker": w,
            "commits": int(counts[w]),
            "staleness_mean": float(sums[w] / counts[w]) if counts[w] else None,
        }
        for w in range(trace.n_workers)
    ]
    busy = trace.busy_time
    if busy is None:
        busy = float(np.nansum(trace.service_time))
    summary: dict[str, Any] = {
        "commits": n,
        "n_workers": trace.n_workers,
        "duration": trace.duration,
        "staleness_mean": None,
        "staleness_var": None,
        "staleness_p50": None,
        "staleness_p99": None,
        "staleness_max": None,
        "commits_per_second": _ratio(n, trace.duration),
        "ps_utilisation": _ratio(busy, trace.duration),
        "per_worker": per_worker,
        "histogram": np.bincount(tau).tolist() if n else [],
    }
    if n:
        p50, p99 = np.percentile(tau, [50, 99], method="inverted_cdf")
        summary.update(
            staleness_mean=float(tau.mean()),
            staleness_var=float(tau.var()),
            staleness_p50=int(p50),
            staleness_p99=int(p99),
            staleness_max=int(tau.max()),
        )
    return summary


def geometric_pmf(n: int, kmax: int) -> np.ndarray:
    """``P(tau = k) = (1/n) (1 - 1/n)^k`` for ``k = 0..kmax``: staleness of n workers
    with exponential compute times (mean ``n - 1``, variance ``n (n - 1)``).
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"geometric_pmf: n must be an integer >= 1, got {n!r}")
    if isinstance(kmax, bool) or not isinstance(kmax, int | np.integer) or kmax < 0:
        raise ValueError(f"geometric_pmf: kmax must be an integer >= 0, got {kmax!r}")
    p = 1.0 / n
    return p * (1.0 - p) ** np.arange(kmax + 1)


def expected_worker_staleness(rates: Sequence[float] | np.ndarray) -> np.ndarray:
    """Mean staleness ``(R - r_i) / r_i`` of each worker with commit rate ``r_i``."""
    r = np.asarray(rates, dtype=np.float64)
    if r.ndim != 1 or r.size == 0 or not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ValueError(
            f"expected_worker_staleness: rates must be a non-empty 1-D sequence of finite "
            f"numbers > 0, got {rates!r}"
        )
    return (r.sum() - r) / r


def total_variation(p: Sequence[float] | np.ndarray, q: Sequence[float] | np.ndarray) -> float:
    """Total-variation distance ``0.5 * sum_k |p_k - q_k|`` between two pmfs on 0, 1, ...

    The shorter vector is padded with zeros. Neither is renormalised, so a truncated
    theoretical pmf should extend well past the observed support.
    """
    a = np.asarray(p, dtype=np.float64)
    b = np.asarray(q, dtype=np.float64)
    for name, v in (("p", a), ("q", b)):
        if v.ndim != 1 or not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"total_variation: {name} must be a 1-D array of finite numbers >= 0")
    size = max(a.size, b.size)
    a = np.pad(a, (0, size - a.size))
    b = np.pad(b, (0, size - b.size))
    return 0.5 * float(np.abs(a - b).sum())


def staleness_tv(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> float:
    """Total-variation distance between the empirical staleness laws of two samples.

    ``0.5 * sum_k |p_a(k) - p_b(k)|`` with ``p_x(k)`` the fraction of entries of ``x``
    equal to ``k``: 0 for identical laws, 1 for disjoint supports. This is the number
    `gemsim validate` compares between a real run and its calibrated simulation; the
    samples may differ in size (each is normalised by its own count).

    Raises:
        ValueError: if either sample is empty or holds anything but integers >= 0.
    """
    pmfs = []
    for name, values in (("a", a), ("b", b)):
        tau = np.asarray(values)
        if tau.ndim != 1 or tau.size == 0:
            raise ValueError(
                f"staleness_tv: {name} must be a non-empty 1-D array of staleness values, "
                f"got shape {tau.shape}"
            )
        if tau.dtype.kind not in "iu" or tau.min() < 0:
            raise ValueError(
                f"staleness_tv: {name} must hold integers >= 0 (commits of staleness), "
                f"got dtype {tau.dtype} with minimum {tau.min()!r}"
            )
        pmfs.append(np.bincount(tau) / tau.size)
    return total_variation(pmfs[0], pmfs[1])


def format_histogram(
    counts: Sequence[int] | np.ndarray,
    *,
    expected: Sequence[float] | np.ndarray | None = None,
    width: int = 40,
    max_rows: int = 25,
) -> str:
    """A text histogram of staleness counts (index = staleness), for terminals.

    Args:
        counts: commits per staleness value, e.g. ``staleness_summary(t)["histogram"]``.
        expected: optional theoretical pmf (same indexing) shown beside the observed one.
        width: characters of the longest bar.
        max_rows: staleness values are grouped into equal bins beyond this many rows.

    Returns:
        One line per bin: the staleness range, the count, the observed percentage, the
        expected percentage if given, and a bar of ``#``.
    """
    c = np.asarray(counts, dtype=np.int64)
    total = int(c.sum())
    if total == 0:
        return "(no commits)"
    if width < 1 or max_rows < 1:
        raise ValueError(
            f"format_histogram: width and max_rows must be >= 1, got {width}, {max_rows}"
        )
    e = None if expected is None else np.asarray(expected, dtype=np.float64)
    bin_size = math.ceil(len(c) / max_rows)
    starts = range(0, len(c), bin_size)
    binned = [int(c[s : s + bin_size].sum()) for s in starts]
    peak = max(binned)
    label_width = len(f"{len(c) - 1}-{len(c) - 1}") if bin_size > 1 else len(str(len(c) - 1))
    header = f"{'tau':>{label_width}}  {'count':>9}  {'obs%':>6}"
    header += f"  {'exp%':>6}" if e is not None else ""
    lines = [header]
    for start, count in zip(starts, binned, strict=True):
        end = min(start + bin_size, len(c)) - 1
        label = str(start) if end == start else f"{start}-{end}"
        line = f"{label:>{label_width}}  {count:>9d}  {100.0 * count / total:>6.2f}"
        if e is not None:
            line += f"  {100.0 * float(e[start : end + 1].sum()):>6.2f}"
        bar = "#" * round(width * count / peak)
        lines.append(f"{line}  {bar}")
    return "\n".join(lines)
