"""Maximum-likelihood fits of the scenario schema's latency families, for calibration.

Every family is fitted with its location fixed at 0 (the schema's laws have no shift;
Pareto starts at its scale), in the schema's own parameterisation, and returned with its
frozen scipy law (for the Kolmogorov-Smirnov check) and log-likelihood (for BIC).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

N_PARAMS = {"exponential": 1, "lognormal": 2, "gamma": 2, "weibull": 2, "pareto": 2}
"""Free parameters of each family (the BIC penalty)."""


def bic(family: str, loglik: float, n: int) -> float:
    """The Bayesian information criterion ``k ln(n) - 2 log L`` of a fit (smaller is better)."""
    return N_PARAMS[family] * math.log(n) - 2.0 * loglik


def mle_fit(family: str, x: np.ndarray) -> tuple[str, dict[str, float], Any, float] | None:
    """``(family, params, frozen scipy law, log-likelihood)``, or None if it cannot fit."""
    if family != "exponential" and x.min() <= 0:
        return None  # the other families' densities vanish or blow up at 0
    try:
        params, frozen = _FITTERS[family](x)
        loglik = float(np.sum(frozen.logpdf(x)))
    except (ValueError, RuntimeError, FloatingPointError, OverflowError):
        return None
    if not math.isfinite(loglik) or not all(math.isfinite(v) and v > 0 for v in params.values()):
        return None
    return family, params, frozen, loglik


def _fit_exponential(x: np.ndarray) -> tuple[dict[str, float], Any]:
    from scipy import stats

    mean = float(x.mean())  # closed-form MLE
    return {"mean": mean}, stats.expon(scale=mean)


def _fit_lognormal(x: np.ndarray) -> tuple[dict[str, float], Any]:
    from scipy import stats

    logs = np.log(x)  # closed-form MLE: mean and (population) spread of the logs
    median, sigma = float(np.exp(logs.mean())), float(logs.std())
    return {"median": median, "sigma": sigma}, stats.lognorm(sigma, scale=median)


def _fit_gamma(x: np.ndarray) -> tuple[dict[str, float], Any]:
    from scipy import stats

    shape, _, scale = stats.gamma.fit(x, floc=0)
    law = stats.gamma(shape, scale=scale)
    return {"mean": float(shape * scale), "shape": float(shape)}, law


def _fit_weibull(x: np.ndarray) -> tuple[dict[str, float], Any]:
    from scipy import stats

    shape, _, scale = stats.weibull_min.fit(x, floc=0)
    law = stats.weibull_min(shape, scale=scale)
    return {"scale": float(scale), "shape": float(shape)}, law


def _fit_pareto(x: np.ndarray) -> tuple[dict[str, float], Any]:
    from scipy import stats

    scale = float(x.min())  # closed-form MLE: the smallest sample, then Hill's estimator
    alpha = x.size / float(np.sum(np.log(x / scale)))
    return {"scale": scale, "alpha": alpha}, stats.pareto(alpha, scale=scale)


_FITTERS: dict[str, Callable[[np.ndarray], tuple[dict[str, float], Any]]] = {
    "exponential": _fit_exponential,
    "lognormal": _fit_lognormal,
    "gamma": _fit_gamma,
    "weibull": _fit_weibull,
    "pareto": _fit_pareto,
}
