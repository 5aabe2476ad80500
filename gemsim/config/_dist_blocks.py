"""`<dist>` blocks: latency distributions in seconds, a tagged union on the key `dist`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, PositiveFloat, ValidationInfo, field_validator, model_validator

from gemsim import timing
from gemsim._user_code import file_sha256

from ._block import Block

NonNegative = Annotated[float, Field(ge=0)]


class DistBlock(Block):
    """A `<dist>` block: building its law is part of validating it, so that a law the timing
    model refuses (e.g. a tail that overflows virtual time) is reported at its field path."""

    @model_validator(mode="after")
    def _buildable(self):
        self.build()  # a ValueError here becomes the field's validation error
        return self

    def build(self) -> timing.Distribution:
        raise NotImplementedError


class ConstantDist(DistBlock):
    dist: Literal["constant"]
    value: NonNegative

    def build(self) -> timing.Distribution:
        return timing.Constant(self.value)


class UniformDist(DistBlock):
    dist: Literal["uniform"]
    low: NonNegative
    high: NonNegative

    @model_validator(mode="after")
    def _ordered(self):
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be > low ({self.low})")
        return self

    def build(self) -> timing.Distribution:
        return timing.Uniform(self.low, self.high)


class ExponentialDist(DistBlock):
    dist: Literal["exponential"]
    mean: PositiveFloat

    def build(self) -> timing.Distribution:
        return timing.Exponential(self.mean)


class LogNormalDist(DistBlock):
    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegative

    def build(self) -> timing.Distribution:
        return timing.LogNormal(self.median, self.sigma)


class GammaDist(DistBlock):
    dist: Literal["gamma"]
    mean: PositiveFloat
    shape: PositiveFloat

    def build(self) -> timing.Distribution:
        return timing.Gamma(self.mean, self.shape)


class WeibullDist(DistBlock):
    dist: Literal["weibull"]
    scale: PositiveFloat
    shape: PositiveFloat

    def build(self) -> timing.Distribution:
        return timing.Weibull(self.scale, self.shape)


class ParetoDist(DistBlock):
    dist: Literal["pareto"]
    scale: PositiveFloat
    alpha: PositiveFloat

    def build(self) -> timing.Distribution:
        return timing.Pareto(self.scale, self.alpha)


class EmpiricalDist(DistBlock):
    """Samples inline, or a file of them (a number per line, or .npy) relative to the scenario;
    the file's sha256 is recorded (`recorded_sha256`)."""

    dist: Literal["empirical"]
    samples: list[NonNegative] | None = None
    file: str | None = None
    sha256: str | None = Field(None, validate_default=True)

    @model_validator(mode="after")
    def _one_source(self):
        if (self.samples is None) == (self.file is None):
            raise ValueError("give exactly one of `samples` (a list of seconds) or `file`")
        if self.samples is not None and len(self.samples) == 0:
            raise ValueError("`samples` must not be empty")
        return self

    @field_validator("file")
    @classmethod
    def _file_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        path = resolve_path(value, info.context)
        if not path.is_file():
            raise ValueError(f"file {str(path)!r} does not exist")
        _read_samples(path)  # fail at load time, not mid-run
        return str(path)

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str | None, info: ValidationInfo) -> str | None:
        file = info.data.get("file")
        if file is None:
            if value is not None:
                raise ValueError("records the digest of `file`; give `file` or leave it out")
            return None
        return recorded_sha256(Path(file), value)

    def build(self) -> timing.Distribution:
        data = self.samples if self.samples is not None else _read_samples(Path(self.file))
        return timing.Empirical(tuple(float(x) for x in data))


def recorded_sha256(path: Path, given: str | None) -> str:
    """The sha256 of the file a block reads, which its resolved config records: the run's
    identity then changes with the file's contents (`--resume` does not skip a run whose
    file changed). A resolved config validated again must still match it.

    Filled in (`validate_default`) rather than set, so a sweep point, which is built from
    what was set, records its own file's digest; setting `file` anew on a resolved config
    drops the old one (`_code_refs.LOCATING_FIELDS`)."""
    digest = file_sha256(path)
    if given is not None and given != digest:
        raise ValueError(
            f"{str(path)!r} changed since this configuration was resolved (sha256 "
            f"{given[:12]}..., now {digest[:12]}...); run from the scenario file again"
        )
    return digest


def with_file_digest(data: dict[str, Any], context: dict[str, Any] | None) -> dict[str, Any]:
    """A block's fields with its `path` made absolute (relative to the scenario's folder)
    and its `sha256` recorded (`recorded_sha256`), for a block that reads one file."""
    path = resolve_path(data["path"], context).resolve()
    if not path.is_file():
        raise ValueError(f"file {str(path)!r} does not exist")
    return {**data, "path": str(path), "sha256": recorded_sha256(path, data.get("sha256"))}


def resolve_path(value: str, context: dict[str, Any] | None) -> Path:
    """A path from a scenario, relative to its folder (the validation context's `base_dir`)."""
    path = Path(value).expanduser()
    base = (context or {}).get("base_dir")
    return path if path.is_absolute() or base is None else Path(base) / path


def _read_samples(path: Path) -> np.ndarray:
    try:
        data = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, dtype=float, ndmin=1)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read samples from {str(path)!r}: {exc}") from None
    data = np.asarray(data, dtype=float).ravel()
    if data.size == 0 or not np.all(np.isfinite(data)) or np.any(data < 0):
        raise ValueError(f"{str(path)!r} must hold a non-empty list of finite seconds >= 0")
    return data


class MixtureComponent(Block):
    """`{weight: 0.05, dist: constant, value: 1.0}`: a weight beside the fields of a `<dist>`."""

    weight: PositiveFloat
    law: Dist

    @model_validator(mode="before")
    @classmethod
    def _split_weight(cls, data: Any) -> Any:
        if isinstance(data, dict) and "law" not in data:
            rest = {k: v for k, v in data.items() if k != "weight"}
            return {"weight": data.get("weight"), "law": rest}
        return data


class MixtureDist(DistBlock):
    dist: Literal["mixture"]
    components: Annotated[list[MixtureComponent], Field(min_length=1)]

    def build(self) -> timing.Distribution:
        return timing.Mixture(tuple((c.weight, c.law.build()) for c in self.components))


Dist = Annotated[
    ConstantDist
    | UniformDist
    | ExponentialDist
    | LogNormalDist
    | GammaDist
    | WeibullDist
    | ParetoDist
    | EmpiricalDist
    | MixtureDist,
    Field(discriminator="dist"),
]

MixtureComponent.model_rebuild()
