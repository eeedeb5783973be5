"""The one strict YAML reader: safe tags only, a key given twice in a mapping is refused, and
alias expansion is bounded before any value is built.

PyYAML's safe loader keeps the last of two equal keys; a reviewer reading the file sees the
first. Aliases share nodes, so a 1 KB "billion laughs" document expands to billions of nodes
for whoever walks the result: the node graph is composed first and its expanded size counted
(memoised, linear in the graph), and a document over `MAX_EXPANDED_NODES` is refused.
Contracts and catalogues both go through `load_strict` (layer L0).

    data = load_strict(text)            # raises DuplicateYamlKey, YamlTooLarge or yaml.YAMLError
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_EXPANDED_NODES = 100_000  # far above any contract or catalogue, far below a bomb


class DuplicateYamlKey(ValueError):
    """A mapping repeats a key; the message names it and its line."""


class YamlTooLarge(ValueError):
    """The document would expand (through aliases) past the node limit, or refers to itself."""


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
    """Parse YAML text with safe tags, unique keys and bounded alias expansion."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def expanded_size(root: yaml.Node, limit: int = MAX_EXPANDED_NODES) -> int:
    """Nodes the document has once every alias is expanded; YamlTooLarge past `limit`."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        kids = _children(node)
        if not children_done:
            if id(node) in open_nodes:
                raise YamlTooLarge(f"line {node.start_mark.line + 1}: an alias refers to the node that contains it")
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
            continue
        open_nodes.discard(id(node))
        sizes[id(node)] = 1 + sum(sizes[id(k)] for k in kids)
        if sizes[id(node)] > limit:
            raise YamlTooLarge(
                f"the YAML expands to more than {limit} nodes (through aliases); "
                "write the values out instead of repeating anchors"
            )
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
