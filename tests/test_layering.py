"""The layering of docs/design.md §2 holds at import time: each stage, imported alone in a fresh
interpreter, loads none of the heavy libraries and none of the gemsim stages it may not use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("jax", "pandas", "matplotlib", "pyarrow")
BOTTOM = (
    "gemsim._atomic",
    "gemsim._checks",
    "gemsim._lazy",
    "gemsim._trace_columns",
    "gemsim._trace_parquet",
    "gemsim.trace",
    "gemsim.types",
)

# stage -> (heavy modules it must not load, gemsim packages it may load besides itself)
CASES = {
    "gemsim": (HEAVY, ()),
    "gemsim.trace": (HEAVY, ()),
    "gemsim.timing": (HEAVY, ()),
    "gemsim.config": (("jax", "pandas", "matplotlib"), ("gemsim.timing",)),
    "gemsim.problems": (HEAVY, ()),
    "gemsim.results": (HEAVY, ()),
    "gemsim.app": (HEAVY, ()),
    "gemsim.cli": (HEAVY, ()),
}


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("stage", sorted(CASES))
def test_importing_a_stage_loads_nothing_it_may_not(stage):
    heavy, allowed = CASES[stage]
    loaded = _loaded_after(f"import {stage}")
    assert not [m for m in heavy if m in loaded], f"import {stage} loads {heavy}"
    ours = {m for m in loaded if m == "gemsim" or m.startswith("gemsim.")}
    permitted = ("gemsim", stage, *BOTTOM, *allowed)
    stray = sorted(m for m in ours if not any(m == p or m.startswith(p + ".") for p in permitted))
    assert stray == [], f"import {stage} also loads {stray}"


def test_using_timing_and_config_stays_free_of_jax(repo_root):
    """Loading a scenario and simulating its timing (what `gemsim trace` does) uses no JAX,
    pandas or matplotlib, and builds no model or data set, even with an epochs budget and a
    bandwidth (both need the problem's sizes)."""
    code = f"""
import gemsim
scenario = gemsim.load_scenario({str(repo_root / "scenarios/paper/fig1.yaml")!r},
    overrides=["network.bandwidth_bytes_per_s=1e8", "sweep={{}}"])
trace = gemsim.simulate_timing(scenario)
assert len(trace) > 0
"""
    loaded = _loaded_after(code)
    assert not [m for m in ("jax", "pandas", "matplotlib") if m in loaded]
    assert not any(m.startswith(("gemsim.rules", "gemsim.engine")) for m in loaded)
    assert "gemsim.problems._problem" not in loaded  # sizes from the specs, nothing built
