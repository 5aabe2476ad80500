"""Base model for every scenario block: unknown fields are errors, values are immutable.

A field added after a release, whose default keeps earlier scenarios as they were, is marked
`ADDED` (`Annotated[T, ADDED] = default`): it is left out of the block's dump while it holds
its default, so that a scenario that does not use it resolves to the same configuration,
hence the same run id, as before the field existed.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializationInfo, model_serializer


class Added:
    """The mark of a field added after a release (see the module docstring)."""

    def __repr__(self) -> str:
        return "ADDED"


ADDED = Added()


class Block(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=False, allow_inf_nan=False, defer_build=True
    )

    @model_serializer(mode="wrap")
    def _without_added_defaults(self, handler, info: SerializationInfo):
        data = handler(self)
        added = _added_fields(type(self))
        if not added or not isinstance(data, dict):
            return data
        for name, default, key in added:
            if getattr(self, name) == default:
                data.pop(key, None)
                data.pop(name, None)
        return data


_ADDED_FIELDS: dict[type, tuple[tuple[str, Any, str], ...]] = {}


def _added_fields(cls: type[Block]) -> tuple[tuple[str, Any, str], ...]:
    """``(name, default, dumped key)`` of the class's `ADDED` fields, found once per class: a
    sweep dumps tens of thousands of blocks, most with none."""
    found = _ADDED_FIELDS.get(cls)
    if found is None:
        found = tuple(
            (name, field.default, field.serialization_alias or field.alias or name)
            for name, field in cls.model_fields.items()
            if any(m is ADDED for m in field.metadata)
        )
        _ADDED_FIELDS[cls] = found
    return found
