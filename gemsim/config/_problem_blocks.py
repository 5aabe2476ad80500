"""`problem:` — model, dataset and batch size. A bare name (`model: cnn`) means `{name: cnn}`;
a model given as `{import: "module:factory", kwargs: {...}}` is the user's own.

Paths (`data_dir`, an `arrays` file, an import's `path`) are relative to the scenario file's
folder and are recorded absolute; an imported module's file and an `arrays` file are also
recorded by sha256, so that a run's identity changes with the code and data it used (and
`--resume` redoes it). Finding the module reads no code: importing it is left to the run.
The model blocks are `_model_blocks.py`, the data set blocks `_dataset_blocks.py`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import PositiveInt, model_validator

from ._block import ADDED, Block
from ._dataset_blocks import DatasetBlock, ShakespeareData, TextFileData
from ._model_blocks import ImportModel, ModelBlock, QuadraticModel, TransformerModel
from ._partition_blocks import PartitionBlock, partition_shorthand


def _named(data: Any) -> Any:
    if isinstance(data, str):
        return {"name": data}
    if isinstance(data, dict) and "name" not in data and ("import" in data or "target" in data):
        return {"name": "import", **data}
    return data


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
