"""Named extension points: built-in entries, decorator registration, and an entry point group.

Backends and proposers are found the way inspect-ai finds its extensions: a package registers
an object under a name with the registry's decorator, and makes it discoverable through an
entry point group (the entry point names the module to import, or the object itself), so a
user's package adds one without editing SIL. Built-in entries may be given as "module:attr"
strings, imported on first use (the petri backend pulls in inspect-ai; the sim one does not).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


class Registry[T]:
    """Objects of one kind by name: built in, registered by decorator, or from an entry point group."""

    def __init__(
        self, kind: str, group: str, builtin: Mapping[str, T | str], adapt: Callable[[object], T | None] | None = None
    ) -> None:
        self.kind, self.group = kind, group
        self._builtin = dict(builtin)
        self._registered: dict[str, T] = {}
        # what an entry point that names an object (not a module that registers one) stands for here
        self._adapt = adapt or _callable

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: make `name` resolve to the decorated object."""

        def add(obj: T) -> T:
            if name in self._builtin:
                raise ValueError(f"{self.kind} name {name!r} is built in; choose another")
            self._registered[name] = obj
            return obj

        return add

    def names(self) -> list[str]:
        """Every name known: built in, registered, or offered by an entry point."""
        from importlib import metadata  # here: the sim audit imports a registry and starts faster without it

        offered = {ep.name for ep in metadata.entry_points(group=self.group)}
        return sorted(set(self._builtin) | set(self._registered) | offered)

    def get(self, name: str) -> T | None:
        """The object registered under `name`, importing its module or entry point if needed."""
        if name in self._builtin:
            entry = self._builtin[name]
            if isinstance(entry, str):
                module, _, attr = entry.partition(":")
                return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
            return entry
        if name not in self._registered:
            from importlib import metadata

            for ep in metadata.entry_points(group=self.group, name=name):
                try:
                    loaded = ep.load()  # importing the module runs its decorator
                except Exception as ex:  # a broken plugin is the user's to fix: say which and how
                    raise ImportError(
                        f"the {self.group!r} entry point {name!r} ({ep.value}) failed to import: "
                        f"{type(ex).__name__}: {ex}; fix or uninstall the package that provides it"
                    ) from None
                if name not in self._registered and (adapted := self._adapt(loaded)) is not None:
                    self._registered[name] = adapted
        return self._registered.get(name)


def _callable(loaded: object) -> Any:
    return loaded if callable(loaded) else None
