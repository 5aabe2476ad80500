"""Rules with worker or server state on the process backend: a run with a late join and a
scheduled restart replays to the same bits, worker state, server timestamps and pull hooks
included (on Ray: test_real_ray.py, which has a Ray instance for its module)."""

from __future__ import annotations

import pytest
from real_helpers import (
    STATEFUL_RULES,
    assert_join_and_restart_replay_bit_exactly,
    join_and_restart_scenario,
)

from gemsim.app import run

pytestmark = [pytest.mark.slow, pytest.mark.bitexact]


@pytest.mark.parametrize("name", list(STATEFUL_RULES))
def test_process_run_with_join_and_restart_replays_bit_exactly(name):
    scenario = join_and_restart_scenario(STATEFUL_RULES[name])
    assert_join_and_restart_replay_bit_exactly(run(scenario, backend="process"), scenario)
