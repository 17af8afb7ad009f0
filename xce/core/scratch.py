"""`Overlay`: a dict seen through private changes, so a batch can be tried on a scratch state.

`ClusterState.check(events)` applies a batch to a scratch `ClusterState` whose containers are
overlays of the real ones: reads fall through to the real dict, writes and deletions stay in
the overlay, and the real state is never touched. That costs O(what the batch changes), not a
copy of a million jobs, which is what lets `ControllerService.commit` and the standby's
follower apply a batch whole or not at all.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

_GONE: Any = object()


class Overlay(MutableMapping[Any, Any]):
    """`base` plus local changes that never reach it.

    `nested=True` is for containers whose values are themselves changed in place (the
    per-array task dicts): a value read through the overlay is copied into it first, so an
    in-place change of the copy cannot leak into `base`. A `Counter` base keeps answering 0
    for a missing key, as the real one does.
    """

    __slots__ = ("base", "local", "nested")

    def __init__(self, base: MutableMapping[Any, Any], nested: bool = False) -> None:
        self.base = base
        self.local: dict[Any, Any] = {}
        self.nested = nested

    def __getitem__(self, key: Any) -> Any:
        if key in self.local:
            value = self.local[key]
            if value is _GONE:
                raise KeyError(key)
            return value
        value = self.base[key]
        if self.nested:
            value = self.local[key] = dict(value)
        return value

    def __contains__(self, key: object) -> bool:
        if key in self.local:
            return self.local[key] is not _GONE
        return key in self.base

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            return default
        return self[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.local[key] = value

    def __delitem__(self, key: Any) -> None:
        if key not in self:
            raise KeyError(key)
        self.local[key] = _GONE

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            value = self[key]
            self.local[key] = _GONE
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        self.local[key] = default
        return default

    def __iter__(self) -> Iterator[Any]:
        local = self.local
        for key in self.base:
            if local.get(key) is not _GONE:
                yield key
        for key, value in local.items():
            if value is not _GONE and key not in self.base:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)
