"""A field marked `ADDED` (`gemsim/config/_block.py`) is left out of every dump of its block
while it holds its default, and written when it does not, in every way a block is dumped
(resolved configurations, run ids, the JSON of keys): what keeps the run ids of scenarios
written before the field existed."""

from __future__ import annotations

import json
from typing import Annotated

import pytest

from gemsim import config
from gemsim.config._block import ADDED, Block


def _blocks() -> list[type[Block]]:
    found, todo = [], [Block]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _added(cls: type[Block]) -> list[str]:
    return [n for n, f in cls.model_fields.items() if any(m is ADDED for m in f.metadata)]


def test_every_added_field_of_every_block_is_excluded_at_its_default_only():
    marked = [(cls, name) for cls in _blocks() for name in _added(cls)]
    assert len(marked) >= 20  # the scenario's blocks are imported with gemsim.config
    for cls, name in marked:
        field = cls.model_fields[name]
        assert field.exclude_if is not None, f"{cls.__name__}.{name}"
        assert field.exclude_if(field.default), f"{cls.__name__}.{name}"
        assert not field.exclude_if(object()), f"{cls.__name__}.{name}"


class _Inner(Block):
    kept: int = 1
    late: Annotated[bool, ADDED] = False
    listed: Annotated[list[int], ADDED] = []


class _Outer(Block):
    inner: list[_Inner] = []
    later: Annotated[float | None, ADDED] = None


class _Derived(_Inner):
    own: int = 2


@pytest.mark.parametrize(
    "dump",
    [
        lambda b: b.model_dump(),
        lambda b: b.model_dump(mode="json", by_alias=True),
        lambda b: json.loads(b.model_dump_json()),
    ],
)
def test_added_fields_are_dumped_only_where_they_differ_from_their_defaults(dump):
    block = _Outer(inner=[_Inner(), _Inner(late=True), _Inner(listed=[3]), _Inner(late=False)])
    assert dump(block) == {
        "inner": [{"kept": 1}, {"kept": 1, "late": True}, {"kept": 1, "listed": [3]}, {"kept": 1}]
    }
    assert dump(_Outer(later=0.5)) == {"inner": [], "later": 0.5}
    assert dump(_Derived(late=True)) == {"kept": 1, "late": True, "own": 2}
    assert dump(_Derived()) == {"kept": 1, "own": 2}


def test_a_scenario_keeps_its_id_with_an_added_field_at_its_default_and_changes_without():
    doc = {
        "name": "added",
        "seed": 0,
        "workers": {"count": 2, "compute": {"dist": "constant", "value": 1.0}},
        "budget": {"commits": 10},
    }
    plain = config.parse_scenario(doc, "doc")
    same = config.parse_scenario({**doc, "server": {"ties": "by_start"}}, "doc")  # the default
    other = config.parse_scenario({**doc, "server": {"ties": "by_worker"}}, "doc")
    assert "ties" not in config.resolved_config(plain)["server"]
    assert config.config_hash(same) == config.config_hash(plain)
    assert config.resolved_config(other)["server"]["ties"] == "by_worker"
    assert config.config_hash(other) != config.config_hash(plain)
