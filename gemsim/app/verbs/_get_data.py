"""`gemsim download NAME DIR`: fetch a data set that has a public download, checksummed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gemsim._checks import UserError

DATASETS = ("mnist", "fashion-mnist", "cifar10")
"""The data sets with a public download (gemsim.problems.DATASET_SOURCES)."""


@dataclass(frozen=True)
class Downloaded:
    """Where a data set now lives, and the scenario lines that use it."""

    name: str
    directory: Path

    @property
    def data_dir(self) -> Path:
        return self.directory

    def scenario_line(self) -> str:
        return f"dataset: {{name: {self.name}, data_dir: {self.directory}}}"


def download(name: str, dest: str | Path) -> Downloaded:
    """Downloads (or verifies, when already there) the data set ``name`` into ``dest``.

    Raises:
      UserError: an unknown name, or no mirror served the files with the right digest (no
        network, a proxy, a changed file); the message lists every attempt and what to do.
    """
    from gemsim import problems

    if name not in DATASETS:
        raise UserError(name, f"no public download for this data set; known: {', '.join(DATASETS)}")
    try:
        directory = problems.download_dataset(name, dest)
    except RuntimeError as exc:
        hint = (
            "check the network (this machine may have none); or copy the files into "
            f"{dest} by other means"
        )
        if name == "fashion-mnist":
            hint += "; or install Debian's package: apt-get install dataset-fashion-mnist"
        raise UserError(f"gemsim download {name}", f"{exc}\n{hint}") from None
    except OSError as exc:
        raise UserError(str(dest), f"cannot write the files: {exc}") from None
    return Downloaded(name, Path(directory))
