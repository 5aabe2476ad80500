"""Small types shared by every stage (the bottom of the import graph)."""

from enum import StrEnum
from typing import Any

PyTree = Any


class Status(StrEnum):
    """How a run ended: a diverged run is a result, a failed one is an error we recorded."""

    OK = "ok"
    DIVERGED = "diverged"
    FAILED = "failed"
