"""`problem.model:` blocks, a tagged union on `name` (a built-in model, or the user's own
`{import: "module:factory", kwargs: {...}}`), and the problems stage's spec of each
(`model_spec`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._block import ADDED, Block
from ._dataset_blocks import absolute_dir


class CnnModel(Block):
    name: Literal["cnn"]


class MlpModel(Block):
    name: Literal["mlp"]
    hidden: Annotated[list[PositiveInt], Field(min_length=1)] = [128]


class LogisticModel(Block):
    name: Literal["logistic"]


class ResnetModel(Block):
    """A CIFAR-style ResNet without batch normalisation (Fixup): depth 6 m + 2."""

    name: Literal["resnet"]
    depth: Annotated[int, Field(ge=8)] = 20
    width: PositiveInt = 16

    @field_validator("depth")
    @classmethod
    def _six_m_plus_two(cls, value: int) -> int:
        if (value - 2) % 6:
            raise ValueError("depth must be 6 m + 2: 8, 14, 20, 26, 32, ...")
        return value


class QuadraticModel(Block):
    """`heterogeneity` h > 0: each worker has its own optimum c_w, drawn from (seed, worker)
    with spread h (`problems.worker_optima`)."""

    name: Literal["quadratic"]
    dim: PositiveInt = 100
    condition: Annotated[float, Field(ge=1)] = 10.0
    noise: Annotated[float, Field(ge=0)] = 0.0
    heterogeneity: Annotated[float, Field(ge=0), ADDED] = 0.0


class TransformerModel(Block):
    """A decoder-only character-level transformer (pre-norm, causal); needs a text dataset
    (`shakespeare` or `text`), whose windows are `context + 1` characters."""

    name: Literal["transformer"]
    layers: PositiveInt = 4
    d_model: PositiveInt = 128
    heads: PositiveInt = 4
    context: PositiveInt = 64
    mlp_ratio: PositiveInt = 4
    positions: Literal["learned", "rotary"] = "learned"
    tie_embeddings: bool = True
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.d_model % self.heads:
            divisors = [k for k in range(1, self.d_model + 1) if self.d_model % k == 0]
            raise ValueError(
                f"heads: {self.heads} does not divide d_model {self.d_model}; allowed: a "
                f"divisor of d_model ({', '.join(map(str, divisors))})"
            )
        if self.positions == "rotary" and (self.d_model // self.heads) % 2:
            raise ValueError(
                f"positions: rotary needs an even head width d_model / heads, got "
                f"{self.d_model} / {self.heads} = {self.d_model // self.heads}"
            )
        return self


class ImportModel(Block):
    """`{import: "module:factory", kwargs: {...}}`: the factory's model (docs/problems.md).
    `path` (default: the scenario's folder) is searched before the Python path; `file` and
    `sha256` are filled in with where the module was found and that file's digest."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    name: Literal["import"] = "import"
    target: str = Field(
        alias="import", pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"
    )
    kwargs: dict[str, Any] = {}
    path: str | None = None
    file: str | None = None
    sha256: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _locate(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        target = data.get("import", data.get("target"))
        if not isinstance(target, str) or ":" not in target:
            return data  # the field's own check reports it
        from gemsim.problems import module_digest

        base = (info.context or {}).get("base_dir")
        folder = data.get("path")
        if folder is not None:
            folder = absolute_dir(str(folder), info)
        elif base is not None:
            folder = str(Path(base).resolve())
        origin, digest = module_digest(target.partition(":")[0], folder)
        given = data.get("sha256")
        if given is not None and given != digest:
            raise ValueError(
                f"{origin} changed since this configuration was resolved (sha256 "
                f"{given[:12]}..., now {digest[:12]}...); run from the scenario file again"
            )
        # `file` is found again, not checked: the digest says whether the code is the same.
        return {**data, "path": folder, "file": str(origin.resolve()), "sha256": digest}

    def spec(self):
        from gemsim import problems

        return problems.Imported(self.target, self.kwargs, path=self.path, sha256=self.sha256)


ModelBlock = Annotated[
    CnnModel
    | MlpModel
    | LogisticModel
    | ResnetModel
    | QuadraticModel
    | TransformerModel
    | ImportModel,
    Field(discriminator="name"),
]


def model_spec(block: ModelBlock):
    """The problems stage's typed model spec for a `model:` block."""
    from gemsim import problems

    if isinstance(block, CnnModel):
        return problems.Cnn()
    if isinstance(block, MlpModel):
        return problems.Mlp(hidden=tuple(block.hidden))
    if isinstance(block, LogisticModel):
        return problems.Logistic()
    if isinstance(block, ResnetModel):
        return problems.Resnet(depth=block.depth, width=block.width)
    if isinstance(block, ImportModel):
        return block.spec()
    if isinstance(block, TransformerModel):
        return problems.Transformer(**block.model_dump(exclude={"name"}))
    return problems.Quadratic(
        dim=block.dim,
        condition=block.condition,
        noise=block.noise,
        heterogeneity=block.heterogeneity,
    )
