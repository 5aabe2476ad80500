"""The scenario's JSON Schema (`gemsim schema`), shorthands included, so editors can
autocomplete scenario files and any JSON Schema validator can check them.

Pydantic's schema describes the validated model; two forms the loader also accepts are added:
a bare name for a block tagged by `name` or `kind` whose other fields all have defaults
(`model: cnn` for `model: {name: cnn}`; not `protocol: ssp`, whose `bound` is required), and
a mixture component whose weight sits beside the fields of its `<dist>` block. Where the
loader takes YAML's `.inf` (`server.protocol.bound`), the schema takes +inf. With a
`clients` block, `workers.count` may be left out (it is `clients.concurrency`).
"""

from __future__ import annotations

import copy
from typing import Any

from ._scenario import Scenario

SHORTHAND_TAGS = ("name", "kind")


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario file."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gemsim scenario"
    defs = schema.get("$defs", {})
    _inline_mixture_weight(defs)
    _add_shorthands(schema, defs)
    _count_from_clients(schema, defs)
    return schema


def _count_from_clients(schema: dict[str, Any], defs: dict[str, Any]) -> None:
    """`workers.count` is required unless the scenario has `clients` (the loader then takes
    the slots' count from `clients.concurrency`)."""
    workers = defs.get("WorkersBlock")
    if workers is None or "count" not in workers.get("required", []):
        return
    workers["required"] = [name for name in workers["required"] if name != "count"]
    schema.setdefault("allOf", []).append({
        "if": {"not": {"required": ["clients"]}},
        "then": {"properties": {"workers": {"required": ["count"]}}},
    })  # fmt: skip


def _tags(node: dict[str, Any], defs: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(tag key, tag values) of a union tagged on `name` or `kind`, else None. Only the tags
    of blocks that need nothing else: a bare `ssp` is refused by the loader (its `bound` is
    required), so the schema refuses it too."""
    disc = node.get("discriminator")
    if not isinstance(disc, dict) or disc.get("propertyName") not in SHORTHAND_TAGS:
        return None
    key = disc["propertyName"]
    values = []
    for ref in disc.get("mapping", {}).values():
        target = defs[ref.rsplit("/", 1)[-1]]
        if set(target.get("required", [])) <= {key}:
            values.append(target["properties"][key]["const"])
    return (key, values) if values else None


def _add_shorthands(node: Any, defs: dict[str, Any]) -> None:
    """Wherever a property is a union tagged on `name`/`kind`, also accept the bare tag."""
    if isinstance(node, list):
        for item in node:
            _add_shorthands(item, defs)
        return
    if not isinstance(node, dict):
        return
    for value in list(node.values()):
        _add_shorthands(value, defs)
    props = node.get("properties")
    if not isinstance(props, dict):
        return
    for name, prop in props.items():
        target = _union_of(prop)
        found = _tags(target, defs) if target is not None else None
        if found is None:
            continue
        key, values = found
        bare = {
            "type": "string",
            "enum": sorted(values),
            "description": f"shorthand for {{{key}: ...}}",
        }
        props[name] = {"anyOf": [bare, prop]}


def _union_of(prop: dict[str, Any]) -> dict[str, Any] | None:
    """The tagged union inside a property schema (directly, or inside `anyOf` with null)."""
    if "discriminator" in prop:
        return prop
    for option in prop.get("anyOf", []):
        if isinstance(option, dict) and "discriminator" in option:
            return option
    return None


def _inline_mixture_weight(defs: dict[str, Any]) -> None:
    """A mixture component is written `{weight: w, dist: ..., <fields>}`: each `<dist>`
    alternative with a required `weight` added (the validated model nests it under `law`)."""
    component = defs.get("MixtureComponent")
    if component is None:
        return
    law = component["properties"]["law"]
    options = []
    for ref in law["discriminator"]["mapping"].values():
        member = copy.deepcopy(defs[ref.rsplit("/", 1)[-1]])
        member["properties"] = {"weight": component["properties"]["weight"], **member["properties"]}
        member["required"] = ["weight", *member.get("required", [])]
        member["title"] = f"{member.get('title', 'Dist')} component"
        options.append(member)
    defs["MixtureComponent"] = {
        "title": "MixtureComponent",
        "description": component.get("description", ""),
        "oneOf": options,
    }
