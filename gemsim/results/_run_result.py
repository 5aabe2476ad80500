"""`RunResult`: a finished run, the one record type for it. `gemsim.run` returns one, a sweep's
work sends one per run between processes, a run folder holds one (`write`), and `read_run`
gives it back."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gemsim.trace import CommitTrace
from gemsim.types import PyTree, Status

from ._manifest import Manifest

_PATH_PART = re.compile(r"\['((?:[^'\\]|\\.)*)'\]|\[(\d+)\]|\.(\w+)")


@dataclasses.dataclass(frozen=True, eq=False)
class RunResult:
    """A finished run: its manifest, trace, metrics and final parameters, as its folder holds
    them (plain numpy and pandas, so that it pickles between processes and machines).

    Attributes:
        manifest: what ran and how it ended (`manifest.json`).
        trace: the commit trace (``.to_pandas()`` for a frame).
        metrics: per-commit metrics, one row per executed commit (a pandas DataFrame).
        params: the final central parameters, one array per leaf keyed by its path
            (``"['conv1']['w']"``, as ``params.npz`` holds them); :meth:`tree` nests them.
    """

    manifest: Manifest
    trace: CommitTrace
    metrics: Any  # pandas.DataFrame
    params: dict[str, np.ndarray]

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def status(self) -> Status:
        return Status(self.manifest.status)

    def tree(self) -> PyTree:
        """The parameters nested by their leaf paths: dicts for keys and attributes, lists for
        indices (the built-in models' own pytrees, whose parameters are dicts)."""
        return nest(self.params)

    def placed(self, placement: Mapping[str, Any], *, command: str | None = None) -> RunResult:
        """The result with where it ran (`provenance.placement`) and the command that started
        the sweep (a job process knows only its own) recorded in its manifest."""
        prov = dict(self.manifest.provenance)
        prov["placement"] = {**prov.get("placement", {}), **placement}
        if command is not None:
            prov["command"] = command
        manifest = dataclasses.replace(self.manifest, provenance=prov)
        return dataclasses.replace(self, manifest=manifest)

    def write(self, out_dir: str | Path) -> Path:
        """The run folder ``out_dir/<run_id>/``, written atomically (`write_run`)."""
        from ._run_folder import write_run

        return write_run(out_dir, self.run_id, self.manifest, self.trace, self.metrics, self.params)


def nest(flat: Mapping[str, np.ndarray]) -> PyTree:
    """Leaf paths (``jax.tree_util.keystr``'s form) nested into dicts and lists."""
    root: dict[Any, Any] = {}
    for path, leaf in flat.items():
        parts = [m.group(1) or m.group(3) or int(m.group(2)) for m in _PATH_PART.finditer(path)]
        if not parts:
            root[path] = leaf
            continue
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = leaf
    return _lists(root)


def _lists(node: Any) -> Any:
    """Dicts whose keys are 0..n-1 (sequence indices) as lists."""
    if not isinstance(node, dict):
        return node
    node = {k: _lists(v) for k, v in node.items()}
    if node and all(isinstance(k, int) for k in node) and sorted(node) == list(range(len(node))):
        return [node[i] for i in range(len(node))]
    return node
