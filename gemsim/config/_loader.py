"""Reading scenario files (YAML via safe_load, or TOML) and applying `--set` overrides.

Pydantic's errors become one message that names the file, the field path, the bad value
and what is allowed."""

from __future__ import annotations

import re
import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gemsim._checks import describe_value

from ._cluster_blocks import FORM_TAGS
from ._code_refs import forget_derived
from ._errors import ScenarioError
from ._optimizer import IMPORT_TAG
from ._scenario import Scenario


class _Loader(yaml.SafeLoader):
    """yaml.safe_load, with YAML 1.2's floats: PyYAML (YAML 1.1) reads `1e-3` and `1.25e8`
    as strings, which would reach an optax argument or a sweep value as text."""


class _FastLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """`_Loader` on libyaml's parser where PyYAML has it: the same values, 6x faster (a
    scenario of 1,000 worker groups: 0.20 s -> 0.03 s); its errors say less, so a document it
    refuses is parsed again by `_Loader` for the message."""


_YAML12_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
for _loader_class in (_Loader, _FastLoader):
    _loader_class.add_implicit_resolver(
        "tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789.")
    )


def load_yaml(text: str) -> Any:
    """Parse YAML text safely (no object construction), with YAML 1.2 floats."""
    try:
        return yaml.load(text, Loader=_FastLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def read_document(path: str | Path) -> dict[str, Any]:
    """Parse a YAML (`.yaml`/`.yml`) or TOML (`.toml`) file into a plain mapping."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(str(path), [f"cannot read file: {exc.strerror or exc}"]) from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else load_yaml(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError) as exc:
        kind = "TOML" if path.suffix == ".toml" else "YAML"
        raise ScenarioError(str(path), [f"malformed {kind}: {exc}"]) from None
    if not isinstance(data, dict):
        got = type(data).__name__
        raise ScenarioError(str(path), [f"top level must be a mapping of fields, got {got}"])
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """`workers.count=100` -> ("workers.count", 100); the value is read as YAML."""
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise ValueError(f"override {text!r} must look like path=value, e.g. workers.count=8")
    try:
        value = load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ValueError(f"override {text!r}: value is not valid YAML ({exc})") from None
    return path.strip(), value


BUDGET_UNITS = ("commits", "epochs_per_worker", "seconds")
"""A budget's units, of which a scenario gives one: setting one replaces the others."""


def set_path(data: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `data` with the dotted `path` set to `value` (intermediate tables created).

    Setting the field that names a block's file (`import`, `path`, `data_dir`) drops the
    sha256 the block recorded of the previous file: validation records the new file's.
    Setting a budget's unit (`budget.commits`, `budget.epochs_per_worker`, `budget.seconds`)
    replaces the budget's other unit: a budget holds one."""
    head, _, rest = path.partition(".")
    out = dict(data)
    if head == "budget" and rest in BUDGET_UNITS and isinstance(out.get("budget"), Mapping):
        out["budget"] = {k: v for k, v in out["budget"].items() if k not in BUDGET_UNITS}
    if not rest:
        out = forget_derived(out, head)
        out[head] = value
        return out
    child = out.get(head)
    if child is not None and not isinstance(child, Mapping):
        raise ValueError(f"{path!r}: {head!r} holds {describe_value(child)}, not a table")
    out[head] = set_path(child or {}, rest, value)
    return out


def apply_overrides(data: dict[str, Any], overrides: Iterable[str] | Mapping[str, Any]) -> dict:
    """`data` with each `path=value` override (strings, or a mapping of paths to values) set."""
    items = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
    for path, value in items:
        data = set_path(data, path, value)
    return data


def parse_scenario(data: Mapping[str, Any], source: str, base_dir: Path | None = None) -> Scenario:
    """A mapping read as a Scenario (every field checked against the schema), or one
    ScenarioError naming `source` and listing every problem."""
    try:
        scenario = Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ScenarioError(source, [_describe(err, data) for err in exc.errors()]) from None
    _check_buildable(scenario, source)
    return scenario


def _check_buildable(scenario: Scenario, source: str) -> None:
    """Cross-field checks the timing stage makes when its input is built (e.g. a failure
    before its worker joins). Rules are built, and checked, before a run starts: building
    one here would load JAX into `gemsim trace`, which needs none."""
    from ._build import build_cluster, drop_push_of
    from ._protocol_blocks import check_protocol
    from ._windows import DynamicWindow, worker_windows
    from ._worker_specs import worker_specs

    try:
        check_protocol(scenario)
        dynamic = isinstance(getattr(scenario.optimizer, "window", None), DynamicWindow)
        worker_windows(scenario, worker_specs(scenario) if dynamic else None)
        drop_push_of(scenario)
    except ValueError as exc:
        raise ScenarioError(source, [str(exc)]) from None
    try:
        build_cluster(scenario, sizes=(1, 0))
    except ValueError as exc:
        raise ScenarioError(source, [f"workers: {exc}"]) from None


def load_scenario(
    path: str | Path, overrides: Iterable[str] | Mapping[str, Any] | None = None
) -> Scenario:
    """Load and validate a scenario file, with optional `path=value` overrides."""
    path = Path(path)
    data = read_document(path)
    source = str(path)
    if overrides:
        if isinstance(overrides, Mapping):
            shown = [f"{k}={v!r}" for k, v in overrides.items()]
        else:
            shown = list(overrides)
        source += " (with --set " + " ".join(shown) + ")"
        try:
            data = apply_overrides(data, overrides)
        except ValueError as exc:
            raise ScenarioError(source, [str(exc)]) from None
    return parse_scenario(data, source, base_dir=path.parent)


# --- error messages -------------------------------------------------------------------------


def _describe(err: dict[str, Any], data: Mapping[str, Any]) -> str:
    loc = _field_path(err["loc"], data)
    path = ".".join(str(p) for p in loc) or "(top level)"
    kind, msg = err["type"], err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        allowed = _allowed_fields(loc[:-1])
        hint = f"; allowed here: {', '.join(allowed)}" if allowed else ""
        return f"{path}: unknown field{hint}"
    if kind == "missing":
        return f"{path}: required field is missing"
    if not loc:  # a cross-field check: it names its fields; the input is the whole document
        return msg if re.match(r"^[a-z_]+(\.[a-z_\[\]0-9]+)+(: | \()", msg) else f"{path}: {msg}"
    return f"{path}: {msg} (got {describe_value(err.get('input'))})"


def _field_path(loc: tuple, data: Any) -> list:
    """Drop the tag values pydantic puts in the location of a tagged-union member."""
    out, node = [], data
    for item in loc:
        if isinstance(node, Mapping) and item not in node and _is_tag(item, node):
            continue
        if item in FORM_TAGS:  # which form (a list or a mapping) of the field was given
            continue
        if isinstance(node, Mapping) and item == "law" and item not in node:
            continue  # a mixture component's law sits beside its weight in the file
        out.append(item)
        node = node.get(item) if isinstance(node, Mapping) else _index(node, item)
    return out


def _is_tag(item: Any, node: Mapping) -> bool:
    """Whether `item` is the tag pydantic put in the location of a union member: a value of
    the node (`rule: gem` -> "gem"), or the tag of a rule given by import path."""
    return item in node.values() or (item == IMPORT_TAG and isinstance(node.get("rule"), Mapping))


def _index(node: Any, item: Any) -> Any:
    if isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
        return node[item]
    return None


def _allowed_fields(loc: list) -> list[str]:
    """Field names valid at `loc` in the schema (union of the members of a tagged union)."""
    models = [Scenario]
    for item in loc:
        if isinstance(item, int):
            continue
        nxt: list[type[BaseModel]] = []
        for model in models:
            field = model.model_fields.get(item)
            if field is not None:
                nxt.extend(_models_in(field.annotation))
        models = nxt
    return sorted({name for m in models for name in m.model_fields if name != "law"})


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
