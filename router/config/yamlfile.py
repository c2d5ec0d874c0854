"""YAML as configuration files need it: safe, and a key given twice in one mapping is an error.

PyYAML's safe loader lets the second of two equal keys win silently; a config with `listeners:` twice
would then run without the first list. :func:`load_yaml` refuses it, naming both lines.

:func:`read_yaml_file` is the one reader of YAML files (node configs, topologies): every problem reading
or parsing the file becomes the caller's error type as ``(FILE, "<file>", PROBLEM)``, the problem in one
line with the line and column where the parser stopped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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


def read_yaml_file(path: str | os.PathLike[str], error: Callable[[str, str, str], Exception]) -> Any:
    """The parsed content of the YAML file at ``path``; unreadable or invalid: ``raise error(FILE, "<file>",
    PROBLEM)`` (``error`` is e.g. ConfigError or a subclass)."""
    source = os.fsdecode(os.fspath(path))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise error(source, "<file>", f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(source, "<file>", f"not valid UTF-8 text (byte offset {exc.start})") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise error(source, "<file>", yaml_problem(exc)) from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line, with the line and column where the parser stopped."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return f"invalid YAML: {problem}"
    text = f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        text += f" ({context} at line {context_mark.line + 1})"
    return text
