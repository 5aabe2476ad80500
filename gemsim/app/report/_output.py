"""Machine-readable output: strict JSON (NaN and infinities as null), one object per line."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from enum import Enum
from pathlib import PurePath
from typing import Any

import numpy as np


def strict_json(value: Any) -> Any:
    """``value`` as plain JSON values: dataclasses and mappings become objects, numpy values
    Python ones, paths strings, and every non-finite float null (JSON has no NaN)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, np.generic | np.ndarray):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    return value


def json_line(value: Any) -> str:
    """One JSON Lines record: strict JSON on a single line."""
    return json.dumps(strict_json(value), allow_nan=False, separators=(", ", ": "))
