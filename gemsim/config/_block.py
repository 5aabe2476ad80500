"""Base model for every scenario block: unknown fields are errors, values are immutable.

A field added after a release, whose default keeps earlier scenarios as they were, is marked
`ADDED` (`Annotated[T, ADDED] = default`): it is left out of the block's dump while it holds
its default, so that a scenario that does not use it resolves to the same configuration,
hence the same run id, as before the field existed.
"""

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
        if not isinstance(data, dict):
            return data
        for name, field in type(self).model_fields.items():
            if any(m is ADDED for m in field.metadata) and getattr(self, name) == field.default:
                data.pop(field.serialization_alias or field.alias or name, None)
                data.pop(name, None)
        return data
