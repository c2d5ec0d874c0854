"""YAML as configuration files need it: safe, and a key given twice in one mapping is an error.

PyYAML's safe loader lets the second of two equal keys win silently; a config with `listeners:` twice
would then run without the first list. :func:`load_yaml` refuses it, naming both lines.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader; a duplicated mapping key raises ConstructorError at the second one."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:           # an unhashable key: the base class reports it
                continue
            if first is not None:
                raise ConstructorError(None, None, f"duplicate key {key!r} (first at line {first + 1})",
                                       key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse `text` like yaml.safe_load, refusing duplicated keys (yaml.YAMLError)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a subclass of SafeLoader)
