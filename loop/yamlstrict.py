"""The one strict YAML reader: safe tags only, and a key given twice in a mapping is refused.

PyYAML's safe loader keeps the last of two equal keys; a reviewer reading the file sees the
first. Contracts and catalogues both go through `load_strict`.

    data = load_strict(text)            # raises DuplicateYamlKey or yaml.YAMLError
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateYamlKey(ValueError):
    """A mapping repeats a key; the message names it and its line."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise DuplicateYamlKey(
                f"duplicate key {key!r} at line {key_node.start_mark.line + 1}: each field may appear once"
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_strict(text: str) -> Any:
    """Parse YAML text with safe tags and unique keys."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
