"""One place for reading YAML, safely: every YAML that Crank reads (API descriptions, catalog files,
admin request bodies, definition files, translations) goes through `load`.

- Only plain data (a SafeLoader: no Python objects), read as JSON would read it: mapping keys are the
  strings written, timestamps stay strings.
- Aliases are budgeted: a document may not grow by more than `MAX_ALIAS_NODES` nodes through its
  aliases (a "billion laughs" document of a few hundred bytes expands to 10^9 nodes), and an alias may
  not contain itself.
- Nesting is bounded by `MAX_DEPTH`.

Every refusal is a `YAMLLimitError`, a `yaml.YAMLError`, so callers keep one `except`.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "YAMLLimitError", "load"]

MAX_ALIAS_NODES: Final = 100_000
"""The most nodes that aliases may add to a document, counted as if every alias were written out."""
MAX_DEPTH: Final = 256
"""The deepest nesting of mappings and sequences a document may have."""


class YAMLLimitError(yaml.YAMLError):
    """A document over one of this module's limits; the message says which."""


class _Loader(_SafeLoader):
    """YAML as JSON would read it: mapping keys are the strings written, timestamps stay strings."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)  # `<<` merge keys
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                )
            mapping[str(key_node.value)] = self.construct_object(value_node, deep=deep)
        return mapping


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _SafeLoader.yaml_implicit_resolvers.items()
}


def load(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The one YAML document in `text` (None for an empty one); `yaml.YAMLError` when it is not valid YAML
    or breaks a limit. `max_depth`: a lower nesting limit, for a document read where JSON would be (the admin
    API's request bodies take `crank._json.MAX_DEPTH`)."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # the composer recurses once per level
            raise YAMLLimitError(f"the document is nested more than {max_depth} levels deep") from None
        if node is None:
            return None
        _check(node, max_depth)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check(root: yaml.Node, max_depth: int) -> None:
    """Depth, self-containing aliases, and the nodes the aliases add, without expanding anything: each node's
    expanded size is computed once (aliases share the node they name), children before parents."""
    sizes: dict[int, int] = {}
    literal = 0
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in on_path:
            raise YAMLLimitError("an alias refers to a node that contains it")
        if key in sizes:
            continue  # an alias of a node already counted
        if depth > max_depth:
            raise YAMLLimitError(f"the document is nested more than {max_depth} levels deep")
        literal += 1
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _children(node))
    if sizes[id(root)] - literal > MAX_ALIAS_NODES:
        raise YAMLLimitError(f"aliases expand the document by more than {MAX_ALIAS_NODES} nodes")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
