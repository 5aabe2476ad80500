"""Latency laws fitted to measured times: the calibration half of `gemsim validate`.

A real backend records, per commit, the seconds its worker spent computing the gradient
and the seconds the PS spent serving it. `fit_distribution` turns such samples into a
law the scenario schema can express; `calibrate_trace` does it for a whole trace: one
compute law per contiguous run of indistinguishable workers, and one service law.

Model selection: every family is fitted by maximum likelihood (`_mle.py`) with its location fixed
at 0 (the schema's laws have no shift; Pareto starts at its scale), and the smallest
BIC ``k ln(n) - 2 log L`` wins (exponential has k = 1 parameter, the others 2). The
penalty only matters between exponential and the gamma and Weibull laws, which contain
it (shape 1): AIC's penalty of 2 per parameter picks one of those two over a third
of the time on exactly exponential data, BIC's ``ln(n)`` keeps the simpler law unless
the data show a shape other than 1. The winner is kept only if a one-sample
Kolmogorov-Smirnov test does not reject it; otherwise the samples themselves become the
law (`empirical`). A misfitted law would bias exactly the staleness the calibration is
meant to reproduce, while resampling the data is always faithful to its marginal law.

Thresholds (module constants; all but SIGNIFICANT and DEGENERATE_RTOL are also keyword
arguments):

- ``KS_ALPHA = 0.01``: a fit whose KS p-value is below it is rejected. With parameters
  estimated from the same samples the test is conservative (p-values run high), so a
  rejection at 1% is a clear misfit, not bad luck. Real timings with thousands of
  samples are often rejected; the empirical law is then the right answer.
- ``MIN_SAMPLES = 50``: with fewer samples neither the shape parameters nor the KS test
  can tell the families apart, so the samples are used as they are.
- ``MAX_EMPIRICAL = 1000``: an empirical law keeps at most this many values (evenly
  spaced quantiles, ``SIGNIFICANT = 6`` digits), so a calibrated scenario stays a
  readable file; 1000 quantiles resolve the law to 0.1% of probability.
- ``GROUP_ALPHA = 0.01`` and ``GROUP_TOLERANCE = 0.05``: when workers share a law; see
  `group_workers`.
- ``DEGENERATE_RTOL = 1e-9``: samples whose spread is below this fraction of their
  maximum are one repeated value (a `constant` law).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemsim.trace import CommitTrace

from ._mle import N_PARAMS, bic, mle_fit

FAMILIES: tuple[str, ...] = tuple(N_PARAMS)
"""Parametric families `fit_distribution` tries, in the scenario's parameterisation."""

SPLITTABLE: tuple[str, ...] = ("exponential", "gamma")
"""Families whose per-commit law is exactly a sum of ``window`` equal per-batch laws."""

KS_ALPHA = 0.01
MIN_SAMPLES = 50
MAX_EMPIRICAL = 1000
SIGNIFICANT = 6
GROUP_ALPHA = 0.01
GROUP_TOLERANCE = 0.05
DEGENERATE_RTOL = 1e-9


@dataclass(frozen=True)
class Fit:
    """A law fitted to samples, with the evidence for it.

    Attributes:
        family: one of `FAMILIES`, ``"constant"`` (all samples equal) or ``"empirical"``.
        params: the scenario's parameters of ``family`` in seconds (exponential ``mean``;
            lognormal ``median, sigma``; gamma ``mean, shape``; weibull ``scale, shape``;
            pareto ``scale, alpha``; constant ``value``; empirical none).
        loglik: log-likelihood of the samples under the law (NaN for constant/empirical).
        ks_pvalue: one-sample KS p-value of the law (NaN when no test was made).
        n: samples the law was fitted to (after dropping unmeasured ones).
        samples: the values of an empirical law (sorted, reduced, rounded); else empty.
        reason: one line on why this law was chosen, for reports.
    """

    family: str
    params: dict[str, float]
    loglik: float
    ks_pvalue: float
    n: int
    samples: tuple[float, ...] = ()
    reason: str = ""

    def to_block(self) -> dict[str, Any]:
        """The scenario's ``<dist>`` block, e.g. ``{"dist": "lognormal", "median": ...}``."""
        if self.family == "empirical":
            return {"dist": "empirical", "samples": list(self.samples)}
        return {"dist": self.family, **{k: _round(v) for k, v in self.params.items()}}

    def describe(self) -> str:
        """``lognormal(median=0.1, sigma=0.25)``, or ``empirical(1000 values)``."""
        if self.family == "empirical":
            return f"empirical({len(self.samples)} values)"
        args = ", ".join(f"{k}={_round(v):g}" for k, v in self.params.items())
        return f"{self.family}({args})"


@dataclass(frozen=True)
class GroupFit:
    """One compute law for the contiguous workers ``workers`` (per-commit seconds)."""

    workers: range
    fit: Fit

    @property
    def label(self) -> str:
        first, last = self.workers[0], self.workers[-1]
        return f"worker {first}" if first == last else f"workers {first}-{last}"


@dataclass(frozen=True)
class Calibration:
    """The latency laws of a trace, ready to replace a scenario's workers/server blocks.

    Attributes:
        n_workers: workers in the traced cluster.
        window: mini-batches per commit; the fits are of per-commit times and are split
            into per-batch laws by `batch_block` when the blocks are built.
        groups: compute laws of contiguous runs of workers, covering ``0..n_workers-1``.
        service: the PS service law, or None when the trace measured no service time.
    """

    n_workers: int
    window: int
    groups: tuple[GroupFit, ...]
    service: Fit | None = None

    def workers_block(self) -> dict[str, Any]:
        """``{count, compute, groups?}``: the last run of workers takes ``compute`` and the
        runs before it are ``groups`` (groups take workers in index order, the rest use
        ``compute``), so one homogeneous cluster gives a single compute law."""
        *leading, last = self.groups
        block: dict[str, Any] = {
            "count": self.n_workers,
            "compute": batch_block(last.fit, self.window),
        }
        if leading:
            block["groups"] = [
                {"count": len(g.workers), "compute": batch_block(g.fit, self.window)}
                for g in leading
            ]
        return block

    def server_block(self) -> dict[str, Any]:
        """``{"service": <dist>}``, or ``{}`` for an instantaneous PS."""
        return {} if self.service is None else {"service": self.service.to_block()}

    def fits(self) -> list[tuple[str, Fit]]:
        """Every fit with a label (``"workers 0-1 compute"``, ``"server service"``)."""
        rows = [(f"{g.label} compute", g.fit) for g in self.groups]
        if self.service is not None:
            rows.append(("server service", self.service))
        return rows


def clean_samples(samples: Sequence[float] | np.ndarray, *, where: str = "samples") -> np.ndarray:
    """The finite samples >= 0 as a flat float64 array; NaN (unmeasured) and junk dropped.

    Raises:
        ValueError: when nothing usable is left, naming ``where``.
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    kept = x[np.isfinite(x) & (x >= 0)]
    if kept.size == 0:
        raise ValueError(
            f"{where}: no usable times among {x.size} values (need finite seconds >= 0; "
            f"NaN marks an unmeasured time)"
        )
    return kept


def fit_distribution(
    samples: Sequence[float] | np.ndarray,
    families: Sequence[str] = FAMILIES,
    *,
    ks_alpha: float = KS_ALPHA,
    min_samples: int = MIN_SAMPLES,
    max_empirical: int = MAX_EMPIRICAL,
) -> Fit:
    """Fit a latency law to measured seconds (see the module docstring for the rules).

    Args:
        samples: seconds; NaN, infinite and negative values are dropped.
        families: parametric families to try, a subset of `FAMILIES`.
        ks_alpha: reject the best family when its KS p-value is below this (0 never does).
        min_samples: below this many samples the empirical law is used directly.
        max_empirical: most values an empirical law keeps.

    Returns:
        A `Fit`: ``constant`` when all samples are equal, ``empirical`` when they are
        too few or the best family fails the KS test, else the family of smallest BIC.

    Raises:
        ValueError: for an unknown family, or no usable sample.
    """
    families = _check_families(families)
    x = clean_samples(samples, where="fit_distribution")
    n = x.size
    if x.max() - x.min() <= DEGENERATE_RTOL * x.max():
        value = float(np.median(x))
        return Fit("constant", {"value": value}, math.nan, math.nan, n, reason="all equal")
    if n < min_samples:
        return _empirical(x, max_empirical, f"{n} samples < {min_samples}: too few to fit")
    candidates = [c for family in families if (c := mle_fit(family, x)) is not None]
    if not candidates:
        return _empirical(x, max_empirical, "no family could be fitted")
    family, params, frozen, loglik = min(candidates, key=lambda c: bic(c[0], c[3], n))
    from scipy import stats

    pvalue = float(stats.kstest(x, frozen.cdf).pvalue)
    if pvalue < ks_alpha:
        reason = f"best family {family} rejected (KS p={pvalue:.2g} < {ks_alpha:g})"
        return _empirical(x, max_empirical, reason)
    reason = f"smallest BIC of {len(candidates)} famil{'y' if len(candidates) == 1 else 'ies'}"
    return Fit(family, params, loglik, pvalue, n, reason=reason)


def batch_block(fit: Fit, window: int) -> dict[str, Any]:
    """The per-mini-batch ``<dist>`` block whose sum over ``window`` batches is ``fit``.

    A worker's commit holds ``window`` batches and the trace measures their total, while
    the schema wants the law of one batch. Gamma laws with a common scale add up to a
    gamma law, so the split is exact for gamma, exponential (gamma of shape 1) and
    constant laws. An empirical law is divided by ``window``: the mean time of a commit
    is kept but its spread is understated by ``sqrt(window)``, so `calibrate_trace` only
    produces one for ``window > 1`` when there are too few samples to fit a gamma law.

    Raises:
        ValueError: for another family, which has no exact split.
    """
    if window == 1:
        return fit.to_block()
    if fit.family == "constant":
        return {"dist": "constant", "value": _round(fit.params["value"] / window)}
    if fit.family == "empirical":
        return {"dist": "empirical", "samples": [_round(v / window) for v in fit.samples]}
    if fit.family in SPLITTABLE:
        mean = fit.params["mean"]
        shape = fit.params.get("shape", 1.0)
        return {"dist": "gamma", "mean": _round(mean / window), "shape": _round(shape / window)}
    raise ValueError(
        f"a {fit.family} law of per-commit times has no exact split into {window} "
        f"mini-batches; fit one of {', '.join(SPLITTABLE)} instead"
    )


def group_workers(
    samples: Sequence[np.ndarray],
    *,
    alpha: float = GROUP_ALPHA,
    tolerance: float = GROUP_TOLERANCE,
) -> tuple[range, ...]:
    """Split workers ``0..n-1`` into contiguous runs that share one compute law.

    Scanning in index order (the order scenario groups take workers), a worker joins the
    current run unless a two-sample KS test between its samples and the run's pooled
    samples rejects at ``alpha / (n - 1)`` (Bonferroni over the ``n - 1`` comparisons,
    so a homogeneous cluster stays one law with probability >= 1 - alpha) *and* the KS
    statistic (the largest gap between the two CDFs) exceeds ``tolerance``. The second
    condition keeps thousands of samples from splitting workers over differences too
    small to change staleness (a 0.05 CDF gap is a ~2.5% shift of the median of a
    lognormal with sigma 0.2). A worker with no samples joins the current run.
    """
    from scipy import stats

    if not samples:
        raise ValueError("group_workers: need the samples of at least one worker")
    level = alpha / max(1, len(samples) - 1)
    runs: list[range] = []
    start, pooled = 0, np.asarray(samples[0], dtype=np.float64)
    for w in range(1, len(samples)):
        x = np.asarray(samples[w], dtype=np.float64)
        if pooled.size and x.size:
            test = stats.ks_2samp(pooled, x)
            if test.pvalue < level and test.statistic > tolerance:
                runs.append(range(start, w))
                start, pooled = w, x
                continue
        pooled = np.concatenate([pooled, x])
    runs.append(range(start, len(samples)))
    return tuple(runs)


def calibrate_trace(
    trace: CommitTrace,
    *,
    window: int = 1,
    families: Sequence[str] = FAMILIES,
    ks_alpha: float = KS_ALPHA,
    min_samples: int = MIN_SAMPLES,
    group_alpha: float = GROUP_ALPHA,
    group_tolerance: float = GROUP_TOLERANCE,
) -> Calibration:
    """Fit the compute laws of a trace's workers and the service law of its PS.

    Compute: each worker's measured ``compute_time`` values (NaN dropped) are grouped by
    `group_workers`, and each run of workers gets one `fit_distribution` of its pooled
    samples. The values are per commit (``window`` batches each, at the worker's speed);
    with ``window > 1`` only `SPLITTABLE` families are tried and the KS fallback to an
    empirical law is off, because `batch_block` must split the law exactly.

    Service: ``service_time`` is fitted when measured; a PS whose every measured service
    took 0 s (or none measured) is instantaneous (``service`` None).

    Not fitted: ``queue_time`` is an outcome of the laws above, not an input. Network
    latency is not in a trace (real backends on one machine have no separate network
    measurement), so a calibration has no ``network`` block.

    Raises:
        ValueError: if no compute time was measured, or ``window`` / ``families`` is bad.
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"calibrate_trace: window must be an integer >= 1, got {window!r}")
    families = _check_families(families)
    compute_families, compute_alpha = families, ks_alpha
    if window > 1:
        compute_families = tuple(f for f in families if f in SPLITTABLE)
        compute_alpha = 0.0
        if not compute_families:
            raise ValueError(
                f"calibrate_trace: with window {window} the compute law must be one of "
                f"{', '.join(SPLITTABLE)}; families {list(families)} has none"
            )
    measured = np.isfinite(trace.compute_time)
    if not measured.any():
        raise ValueError(
            "calibrate_trace: the trace has no measured compute_time (all NaN); "
            "nothing to calibrate"
        )
    per_worker = [
        trace.compute_time[measured & (trace.worker == w)] for w in range(trace.n_workers)
    ]
    runs = group_workers(per_worker, alpha=group_alpha, tolerance=group_tolerance)
    fit = _fitter(compute_families, compute_alpha, min_samples)
    groups = tuple(GroupFit(r, fit(np.concatenate(per_worker[r.start : r.stop]))) for r in runs)
    service = _fit_service(trace.service_time, _fitter(families, ks_alpha, min_samples))
    return Calibration(trace.n_workers, window, groups, service)


def _fitter(families: Sequence[str], alpha: float, min_samples: int) -> Callable[..., Fit]:
    return lambda x: fit_distribution(x, families, ks_alpha=alpha, min_samples=min_samples)


def _fit_service(service_time: np.ndarray, fit: Callable[..., Fit]) -> Fit | None:
    x = service_time[np.isfinite(service_time) & (service_time >= 0)]
    if x.size == 0 or x.max() == 0:
        return None
    return fit(x)


def _check_families(families: Sequence[str]) -> tuple[str, ...]:
    chosen = (families,) if isinstance(families, str) else tuple(families)
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise ValueError(
            f"families must be a non-empty subset of {', '.join(FAMILIES)}; got {list(chosen)}"
        )
    return chosen


def _empirical(x: np.ndarray, max_values: int, reason: str) -> Fit:
    """The samples as a law: all of them, or ``max_values`` evenly spaced quantiles."""
    values = np.sort(x)
    if values.size > max_values:
        levels = (np.arange(max_values) + 0.5) / max_values
        values = np.quantile(values, levels, method="inverted_cdf")
    samples = tuple(_round(v) for v in values)
    return Fit("empirical", {}, math.nan, math.nan, x.size, samples=samples, reason=reason)


def _round(value: float) -> float:
    """``SIGNIFICANT`` significant digits: a microsecond of a second, without noise digits."""
    return float(f"{float(value):.{SIGNIFICANT}g}")
