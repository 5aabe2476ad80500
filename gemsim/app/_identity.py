"""A run's identity: its resolved configuration and its kind, in one function.

Simulated runs are identified by the sha256 of their resolved configuration (so a scenario's
run ids do not change between releases); any other kind salts it: a replay with the sha256 of
the trace it replayed, a real run with its backend. Two runs of different kinds therefore
never share a folder, and `--resume` skips a folder only when identity and kind both match.
"""

from __future__ import annotations

import hashlib

from gemsim.types import RunKind

RUN_ID_LENGTH = 12


def run_identity(config_hash: str, kind: RunKind, *, trace_sha256: str | None = None) -> str:
    """The full identity (hex sha256) of a run; its folder name is the first 12 characters.

    Args:
        config_hash: sha256 of the resolved configuration (`gemsim.config.config_hash`).
        kind: what produced the trace.
        trace_sha256: the replayed trace's hash; required for (and only for) a replay.
    """
    kind = RunKind(kind)
    if (kind is RunKind.REPLAY) != (trace_sha256 is not None):
        raise ValueError(
            "a replay's identity needs the replayed trace's sha256, and only a replay's"
        )
    if kind is RunKind.SIM:
        return config_hash
    salt = trace_sha256 if kind is RunKind.REPLAY else ""
    return hashlib.sha256(f"{config_hash}:{kind.value}:{salt}".encode()).hexdigest()


def run_id_of(identity: str) -> str:
    """The run folder's name for an identity."""
    return identity[:RUN_ID_LENGTH]
