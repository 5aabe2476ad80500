"""Shared fixtures. JAX runs on the CPU in tests; nothing here changes process-wide JAX flags."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return ROOT
