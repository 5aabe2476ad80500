"""`problem:` — model, dataset and batch size. A bare name (`model: cnn`) means `{name: cnn}`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, model_validator

from ._block import Block


def _named(data: Any) -> Any:
    return {"name": data} if isinstance(data, str) else data


class CnnModel(Block):
    name: Literal["cnn"]


class MlpModel(Block):
    name: Literal["mlp"]
    hidden: Annotated[list[PositiveInt], Field(min_length=1)] = [128]


class LogisticModel(Block):
    name: Literal["logistic"]


class QuadraticModel(Block):
    name: Literal["quadratic"]
    dim: PositiveInt = 100
    condition: Annotated[float, Field(ge=1)] = 10.0
    noise: Annotated[float, Field(ge=0)] = 0.0


ModelBlock = Annotated[
    CnnModel | MlpModel | LogisticModel | QuadraticModel, Field(discriminator="name")
]


class Mnist5kData(Block):
    name: Literal["mnist-5k"]


class DigitsData(Block):
    name: Literal["digits"]


class MnistData(Block):
    """Full MNIST from IDX files in `data_dir`, or in $GEMSIM_DATA when it is not given."""

    name: Literal["mnist"]
    data_dir: str | None = None


class SyntheticData(Block):
    name: Literal["synthetic"]
    n_train: PositiveInt = 4000
    n_test: PositiveInt = 1000
    dim: PositiveInt = 32
    classes: Annotated[int, Field(ge=2)] = 10


DatasetBlock = Annotated[
    Mnist5kData | DigitsData | MnistData | SyntheticData, Field(discriminator="name")
]


class ProblemBlock(Block):
    model: ModelBlock
    dataset: DatasetBlock | None = None
    batch_size: PositiveInt = 64

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key in ("model", "dataset"):
                if key in data:
                    data[key] = _named(data[key])
        return data

    @model_validator(mode="after")
    def _needs_data(self):
        needs = not isinstance(self.model, QuadraticModel)
        if needs and self.dataset is None:
            raise ValueError(f"model {self.model.name!r} needs a `dataset` (mnist-5k, digits, ...)")
        if not needs and self.dataset is not None:
            raise ValueError("model 'quadratic' takes no `dataset`; remove it")
        return self


def model_spec(block: ModelBlock):
    """The problems stage's typed model spec for a `model:` block."""
    from gemsim import problems

    if isinstance(block, CnnModel):
        return problems.Cnn()
    if isinstance(block, MlpModel):
        return problems.Mlp(hidden=tuple(block.hidden))
    if isinstance(block, LogisticModel):
        return problems.Logistic()
    return problems.Quadratic(dim=block.dim, condition=block.condition, noise=block.noise)


def dataset_spec(block: DatasetBlock | None):
    """The problems stage's typed dataset spec for a `dataset:` block (None for quadratic)."""
    from gemsim import problems

    if block is None:
        return None
    if isinstance(block, Mnist5kData):
        return problems.Mnist5k()
    if isinstance(block, DigitsData):
        return problems.Digits()
    if isinstance(block, MnistData):
        return problems.Mnist(data_dir=block.data_dir)
    return problems.Synthetic(
        n_train=block.n_train, n_test=block.n_test, dim=block.dim, classes=block.classes
    )
