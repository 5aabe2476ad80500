"""Base model for every scenario block: unknown fields are errors, values are immutable.

A field added after a release, whose default keeps earlier scenarios as they were, is marked
`ADDED` (`Annotated[T, ADDED] = default`): it is left out of the block's dump while it holds
its default, so that a scenario that does not use it resolves to the same configuration,
hence the same run id, as before the field existed.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict


class Added:
    """The mark of a field added after a release (see the module docstring)."""

    def __repr__(self) -> str:
        return "ADDED"


ADDED = Added()


class _IsDefault:
    """`exclude_if` of an `ADDED` field: whether its value is the field's default."""

    def __init__(self, default: Any):
        self.default = default

    def __call__(self, value: Any) -> bool:
        return value == self.default


class Block(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=False, allow_inf_nan=False, defer_build=True
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # The mark becomes the field's own `exclude_if`, which pydantic-core applies as it
        # dumps: a model serializer on every block called back into Python for each of the
        # tens of thousands of blocks a sweep dumps (0.2 s of a 16-run sweep of 256 groups).
        # The schema is not built yet (`defer_build`), so it is built with them.
        for field in cls.model_fields.values():
            if field.exclude_if is None and any(m is ADDED for m in field.metadata):
                field.exclude_if = _IsDefault(field.default)
