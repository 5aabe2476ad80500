"""The error an invalid scenario raises: it names the file, the field path, the value and
what is allowed."""

from __future__ import annotations

from gemsim._checks import UserError


class ScenarioError(UserError):
    """An invalid scenario file, override or sweep. The CLI prints it and exits with code 2."""

    def render(self) -> str:
        body = "\n".join(f"  - {p}" for p in self.problems)
        return f"invalid scenario {self.source}:\n{body}"
