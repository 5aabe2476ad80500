"""`gemsim schema`: the scenario file's JSON Schema, for editors and validators."""

from __future__ import annotations

import json

from gemsim.config import scenario_json_schema


def schema_json() -> str:
    """The schema as indented JSON text."""
    return json.dumps(scenario_json_schema(), indent=2, sort_keys=True)
