"""Latency distributions of the timing model, all in seconds.

Each distribution is a small frozen dataclass that validates its parameters when it is
built and offers two methods:

- ``sample(rng, size)`` draws ``size`` float64 values from a caller-owned
  ``numpy.random.Generator`` (there is no global RNG anywhere in gemsim);
- ``mean()`` is the exact expectation (``inf`` where it does not exist).

Invalid parameters raise ``ValueError`` naming the class, the field, the bad value and
what is allowed, e.g. ``LogNormal.sigma must be a finite number >= 0, got -1.0``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

from gemsim._checks import check_int, check_nonnegative, check_positive


def _number(owner: str, name: str, value: object, *, positive: bool) -> float:
    """``value`` as a float, finite and ``>= 0`` (``> 0`` when ``positive``)."""
    check = check_positive if positive else check_nonnegative
    return check(f"{owner}.{name}", value)


def _set(obj: object, name: str, value: object) -> None:
    """Store a normalised value on a frozen dataclass during ``__post_init__``."""
    object.__setattr__(obj, name, value)


def _check_size(size: int) -> int:
    if type(size) is int and size >= 0:  # the common case, without the ABC check of check_int
        return size
    return check_int("sample size", size, 0)


MAX_DRAW_SECONDS = 1e15
"""No draw of a latency law may exceed this (31.7 million years) but with probability below
`TAIL_PROBABILITY`: a heavier tail overflows virtual time to infinity within a run."""
TAIL_PROBABILITY = 1e-12


def _bounded(law: Distribution) -> None:
    """Refuse a law whose draws exceed `MAX_DRAW_SECONDS` with a non-negligible probability."""
    p = law.survival(MAX_DRAW_SECONDS)
    if not p <= TAIL_PROBABILITY:  # NaN too: a tail that cannot be computed is refused
        raise ValueError(
            f"{law!r} draws more than {MAX_DRAW_SECONDS:g} s with probability {p:.3g}; allowed: "
            f"parameters whose draws exceed {MAX_DRAW_SECONDS:g} s with probability <= "
            f"{TAIL_PROBABILITY:g} (a heavier tail overflows virtual time)"
        )


@dataclass(frozen=True)
class Constant:
    """Always ``value`` seconds."""

    value: float

    def __post_init__(self) -> None:
        _set(self, "value", _number("Constant", "value", self.value, positive=False))
        _bounded(self)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        del rng  # a constant consumes no randomness, so other streams never shift
        return np.full(_check_size(size), self.value, dtype=np.float64)

    def survival(self, x: float) -> float:
        """P(draw > x)."""
        return 1.0 if self.value > x else 0.0

    def mean(self) -> float:
        return self.value


@dataclass(frozen=True)
class Uniform:
    """Uniform on ``[low, high)`` seconds, ``0 <= low < high``."""

    low: float
    high: float

    def __post_init__(self) -> None:
        low = _number("Uniform", "low", self.low, positive=False)
        high = _number("Uniform", "high", self.high, positive=True)
        if high <= low:
            raise ValueError(f"Uniform.high must be > Uniform.low ({low!r}), got {high!r}")
        _set(self, "low", low)
        _set(self, "high", high)
        _bounded(self)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, _check_size(size))

    def survival(self, x: float) -> float:
        """P(draw > x)."""
        return min(1.0, max(0.0, (self.high - x) / (self.high - self.low)))

    def mean(self) -> float:
        return 0.5 * (self.low + self.high)


@dataclass(frozen=True, init=False, repr=False)
class Exponential:
    """Exponential with the given ``mean`` seconds (memoryless: staleness is geometric).

    The parameter is stored as ``mean_s`` because ``mean()`` is the method every
    distribution shares; construct it as ``Exponential(mean=...)``.
    """

    mean_s: float

    def __init__(self, mean: float) -> None:
        _set(self, "mean_s", _number("Exponential", "mean", mean, positive=True))
        _bounded(self)

    def __repr__(self) -> str:
        return f"Exponential(mean={self.mean_s!r})"

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.exponential(self.mean_s, _check_size(size))

    def survival(self, x: float) -> float:
        """P(draw > x)."""
        return math.exp(-x / self.mean_s)

    def mean(self) -> float:
        return self.mean_s


@dataclass(frozen=True)
class LogNormal:
    """Log-normal: ``log(X) ~ Normal(log(median), sigma)``; ``median`` in seconds."""

    median: float
    sigma: float

    def __post_init__(self) -> None:
        _set(self, "median", _number("LogNormal", "median", self.median, positive=True))
        _set(self, "sigma", _number("LogNormal", "sigma", self.sigma, positive=False))
        if not math.isfinite(self.mean()):
            raise ValueError(
                f"LogNormal.sigma must keep the mean median * exp(sigma^2 / 2) finite, got "
                f"sigma={self.sigma!r} with median={self.median!r}"
            )
        _bounded(self)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.lognormal(math.log(self.median), self.sigma, _check_size(size))

    def survival(self, x: float) -> float:
        """P(draw > x)."""
        if self.sigma == 0.0 or x <= 0.0:  # no draw is <= 0 (log 0 is undefined)
            return 1.0 if self.median > x else 0.0
        z = (math.log(x) - math.log(self.median)) / (self.sigma * math.sqrt(2.0))
        return 0.5 * math.erfc(z)

    def mean(self) -> float:
        try:
            return self.median * math.exp(0.5 * self.sigma**2)
        except OverflowError:
            return math.inf


@dataclass(frozen=True, init=False, repr=False)
class Gamma:
    """Gamma with the given ``mean`` seconds and ``shape`` (``shape = 1``: exponential).

    The mean is stored as ``mean_s`` (see `Exponential`); construct as ``Gamma(mean, shape)``.
    """

    mean_s: float
    shape: float

    def __init__(self, mean: float, shape: float) -> None:
        _set(self, "mean_s", _number("Gamma", "mean", mean, positive=True))
        _set(self, "shape", _number("Gamma", "shape", shape, positive=True))
        if not 0 < self.mean_s / self.shape < math.inf:  # numpy draws with scale mean / shape
            raise ValueError(
                f"Gamma.shape must keep the scale mean / shape a finite number > 0, got "
                f"shape={shape!r} with mean={mean!r}"
            )
        _bounded(self)

    def __repr__(self) -> str:
        return f"Gamma(mean={self.mean_s!r}, shape={self.shape!r})"

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.gamma(self.shape, self.mean_s / self.shape, _check_size(size))

    def survival(self, x: float) -> float:
        """P(draw > x) (the regularised upper incomplete gamma function)."""
        from scipy.special import gammaincc

        scale = self.mean_s / self.shape
        z = x / scale
        if z > 0 or x == 0:
            p = float(gammaincc(self.shape, z))
            if math.isnan(p):  # scipy gives up near shape 1e308, where the law is normal
                sd = self.mean_s / math.sqrt(self.shape)
                return 0.5 * math.erfc((x - self.mean_s) / (sd * math.sqrt(2.0)))
            return p
        # x / scale underflowed: P(X <= x) ~ (x / scale)^shape / Gamma(shape + 1), in logs
        log_below = self.shape * (math.log(x) - math.log(scale)) - math.lgamma(self.shape + 1)
        return max(0.0, 1.0 - math.exp(min(0.0, log_below)))

    def mean(self) -> float:
        return self.mean_s


@dataclass(frozen=True)
class Weibull:
    """Weibull with ``scale`` seconds and ``shape`` (``shape < 1``: heavy-ish tail)."""

    scale: float
    shape: float

    def __post_init__(self) -> None:
        _set(self, "scale", _number("Weibull", "scale", self.scale, positive=True))
        _set(self, "shape", _number("Weibull", "shape", self.shape, positive=True))
        _bounded(self)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.scale * rng.weibull(self.shape, _check_size(size))

    def survival(self, x: float) -> float:
        """P(draw > x)."""
        if x <= 0.0:
            return 1.0
        # (x / scale) ** shape in logs: x / scale overflows for a tiny scale, hiding a heavy tail.
        try:
            return math.exp(-math.exp(self.shape * (math.log(x) - math.log(self.scale))))
        except OverflowError:  # (x / scale) ** shape beyond any float: no mass there
            return 0.0

    def mean(self) -> float:
        try:
            return self.scale * math.gamma(1.0 + 1.0 / self.shape)
        except OverflowError:  # a tiny shape: a mean beyond any float
            return math.inf


@dataclass(frozen=True)
class Pareto:
    """Classical Pareto: minimum ``scale`` seconds, tail index ``alpha`` (stragglers).

    The mean is infinite for ``alpha <= 1``; such laws are allowed (a real straggler
    model may have no mean) and ``mean()`` returns ``inf``.
    """

    scale: float
    alpha: float

    def __post_init__(self) -> None:
        _set(self, "scale", _number("Pareto", "scale", self.scale, positive=True))
        _set(self, "alpha", _number("Pareto", "alpha", self.alpha, positive=True))
        _bounded(self)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        # numpy's pareto() is the Lomax law (Pareto II, minimum 0); shifting by one
        # gives the classical Pareto with minimum 1, then scale.
        return self.scale * (1.0 + rng.pareto(self.alpha, _check_size(size)))

    def survival(self, x: float) -> float:
        """P(draw > x)."""
        # In logs: scale / x underflows to 0 for a tiny scale, which would hide a heavy tail.
        if x < self.scale:
            return 1.0
        return math.exp(self.alpha * (math.log(self.scale) - math.log(x)))

    def mean(self) -> float:
        if self.alpha <= 1.0:
            return math.inf
        return self.alpha * self.scale / (self.alpha - 1.0)


@dataclass(frozen=True)
class Empirical:
    """Resamples uniformly, with replacement, from measured ``samples`` (seconds)."""

    samples: tuple[float, ...]
    _array: np.ndarray = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        samples = self.samples
        allowed = "Empirical.samples must be a non-empty sequence of finite numbers >= 0"
        if isinstance(samples, str | bytes) or not isinstance(samples, Sequence | np.ndarray):
            raise ValueError(f"{allowed}, got {type(samples).__name__}")
        # Vectorised checks: measured samples may number in the millions.
        array = np.asarray(samples)
        if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iuf":
            raise ValueError(f"{allowed}, got {samples!r:.80}")
        array = array.astype(np.float64)
        bad = ~np.isfinite(array) | (array < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"Empirical.samples[{i}] must be a finite number >= 0, got {samples[i]!r}"
            )
        array.setflags(write=False)
        _set(self, "samples", tuple(array.tolist()))
        _set(self, "_array", array)
        _bounded(self)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.choice(self._array, _check_size(size), replace=True)

    def survival(self, x: float) -> float:
        """P(draw > x): the fraction of samples above x."""
        return float(np.mean(self._array > x))

    def mean(self) -> float:
        return float(self._array.mean())


@dataclass(frozen=True)
class Mixture:
    """Draw each value from component ``i`` with probability ``weight_i / sum(weights)``.

    ``components`` is a sequence of ``(weight, distribution)`` pairs; the stored weights
    are normalised to sum to one. Example: 5% of batches ten times slower::

        Mixture(((0.95, LogNormal(0.1, 0.2)), (0.05, LogNormal(1.0, 0.2))))
    """

    components: tuple[tuple[float, Distribution], ...]

    def __post_init__(self) -> None:
        comps = self.components
        if isinstance(comps, str | bytes) or not isinstance(comps, Sequence) or not comps:
            raise ValueError(
                f"Mixture.components must be a non-empty sequence of (weight, distribution) "
                f"pairs, got {comps!r}"
            )
        weights, dists = [], []
        for i, pair in enumerate(comps):
            if not isinstance(pair, Sequence) or len(pair) != 2:
                raise ValueError(
                    f"Mixture.components[{i}] must be a (weight, distribution) pair, got {pair!r}"
                )
            weight, dist = pair
            weights.append(_number("Mixture", f"components[{i}].weight", weight, positive=True))
            if not isinstance(dist, DISTRIBUTION_TYPES):
                raise ValueError(
                    f"Mixture.components[{i}] distribution must be one of "
                    f"{', '.join(t.__name__ for t in DISTRIBUTION_TYPES)}, got {dist!r}"
                )
            dists.append(dist)
        _set(self, "components", tuple(zip(_normalised(weights), dists, strict=True)))

    @property
    def weights(self) -> np.ndarray:
        """The normalised component weights."""
        return np.array([w for w, _ in self.components], dtype=np.float64)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        size = _check_size(size)
        which = rng.choice(len(self.components), size=size, p=self.weights)
        out = np.empty(size, dtype=np.float64)
        for index, (_, dist) in enumerate(self.components):
            mask = which == index
            out[mask] = dist.sample(rng, int(mask.sum()))
        return out

    def survival(self, x: float) -> float:
        """P(draw > x)."""
        return math.fsum(w * d.survival(x) for w, d in self.components)

    def mean(self) -> float:
        return math.fsum(w * d.mean() for w, d in self.components)


def _normalised(weights: list[float]) -> list[float]:
    """Finite weights > 0 divided by their sum. Weights whose sum overflows (e.g. two of
    1e308) are first divided by the largest, which leaves their ratios as they are; other
    weights are divided by their sum directly, so existing mixtures keep their exact values."""
    try:
        total = math.fsum(weights)
    except OverflowError:  # fsum raises where a partial sum leaves the floats
        total = math.inf
    if math.isinf(total):
        top = max(weights)
        weights = [w / top for w in weights]
        total = math.fsum(weights)
    return [w / total for w in weights]


Distribution: TypeAlias = (
    Constant | Uniform | Exponential | LogNormal | Gamma | Weibull | Pareto | Empirical | Mixture
)
"""Any latency law of the timing model (seconds)."""

DISTRIBUTION_TYPES: tuple[type, ...] = (
    Constant,
    Uniform,
    Exponential,
    LogNormal,
    Gamma,
    Weibull,
    Pareto,
    Empirical,
    Mixture,
)
"""The concrete distribution classes, for ``isinstance`` checks."""


def is_zero(dist: Distribution | None) -> bool:
    """True when a latency law is absent or always exactly zero."""
    return dist is None or (isinstance(dist, Constant) and dist.value == 0.0)
