"""A run's identity: its resolved configuration and its kind (`run_identity`), and who a run
is (`RunIdentity`: its expanded scenario, kind and identity), what every stage of a run
receives.

Simulated runs are identified by the sha256 of their resolved configuration (so a scenario's
run ids do not change between releases); any other kind salts it: a replay with the sha256 of
the trace it replayed, a real run with its backend. Two runs of different kinds therefore
never share a folder, and `--resume` skips a folder only when identity and kind both match.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gemsim import config
from gemsim.config import ExpandedRun, Scenario
from gemsim.trace import CommitTrace
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


@dataclass(frozen=True)
class RunIdentity:
    """Who a run is: its expanded scenario, its kind and its identity (hash)."""

    expanded: ExpandedRun
    kind: RunKind
    identity: str
    replayed_trace: str | None = None
    replayed_trace_sha256: str | None = None

    @property
    def run_id(self) -> str:
        return run_id_of(self.identity)

    @staticmethod
    def of(
        expanded: ExpandedRun,
        kind: RunKind = RunKind.SIM,
        *,
        trace: CommitTrace | None = None,
        trace_path: str | None = None,
    ) -> RunIdentity:
        sha = trace.sha256() if kind is RunKind.REPLAY and trace is not None else None
        identity = run_identity(expanded.config_hash, kind, trace_sha256=sha)
        return RunIdentity(expanded, kind, identity, trace_path, sha)


def expanded_of(scenario: Scenario | ExpandedRun) -> ExpandedRun:
    """A single scenario as an expanded run (no sweep point, repeat 0)."""
    if isinstance(scenario, ExpandedRun):
        return scenario
    return ExpandedRun(scenario, {}, 0, config.config_hash(scenario))
