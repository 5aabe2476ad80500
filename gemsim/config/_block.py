"""Base model for every scenario block: unknown fields are errors, values are immutable."""

from pydantic import BaseModel, ConfigDict


class Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)
