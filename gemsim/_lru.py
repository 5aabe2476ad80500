"""`Lru`: the per-process cache of what the runs of a sweep share, loaded or built once (data
sets, user models, compiled executors, worker specs)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any


class Lru:
    """A map of at most `size` loaded values; the least recently used goes first."""

    def __init__(self, size: int):
        self._size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, load: Callable[[], Any]) -> Any:
        """The value of `key`, loaded with `load()` the first time (or since it went)."""
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = load()
        self._items[key] = value
        while len(self._items) > self._size:
            self._items.popitem(last=False)
        return value

    def get_for(self, owner: Any, key: Hashable, load: Callable[[], Any]) -> Any:
        """The value loaded for the object `owner`, by identity, and `key`: `owner` is kept with
        it, so that its id is not another object's while the entry stands."""
        return self.get((id(owner), key), lambda: (owner, load()))[1]

    def values(self) -> Iterator[Any]:
        return iter(list(self._items.values()))
