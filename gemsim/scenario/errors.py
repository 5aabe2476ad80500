"""The one error users see: it names the file, the field path, the value and what is allowed."""

from __future__ import annotations


class ScenarioError(ValueError):
    """An invalid scenario file, override or sweep. The CLI prints it and exits with code 2."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid scenario {source}:\n{body}")


def describe_value(value: object, limit: int = 80) -> str:
    """A short, readable rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
