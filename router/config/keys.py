"""How a config key is declared: once, as a dataclass field that carries its checker and its doc.

``declare(check, doc, default)`` returns a ``dataclasses.field``. The field's name is the YAML key (unless
``name`` says otherwise), its default is the key's default (none: the key is required), ``check``
validates a value and ``doc`` is the key's line in docs/CONFIGURATION.md. So a dataclass
of the model is at once what the node runs from, the validation table of its YAML mapping and the
reference's rows.

Rules:

* Keys are checked in field order: unknown keys of a mapping first, then each key, a nested mapping
  wholly before the next key. That order is the order errors are reported in, so it is part of the
  contract (``check-config`` prints the first error).
* An absent key, and a key with nothing after it (``key:``, YAML null), take the field's default; a
  required key must be present, and null is then checked like any other value.
* A checker takes ``(value, key_path)``, returns the value to store and raises :class:`Invalid`; it is a
  :class:`Check`, which also says in a few words what it accepts (the reference's "type" column).
* ``group`` puts a field of a flat dataclass into a YAML mapping of its own (``NodeConfig.link_capacity``
  is ``node.link_capacity``); the group is required when one of its keys is.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: The entry of a field's metadata that makes it a config key.
KEY = "router.config.key"


class Invalid(Exception):
    """A bad value at ``key_path``; :func:`router.config.parse_config` adds the file's name."""

    def __init__(self, key_path: str, problem: str) -> None:
        super().__init__(key_path, problem)
        self.key_path = key_path
        self.problem = problem


@dataclass(frozen=True)
class Check:
    """A checker, ``(value, key_path) -> value``, with what it accepts in the reference's words."""

    fn: Callable[[Any, str], Any]
    accepts: str
    keys: type | None = None   # the value is a mapping with the keys of this dataclass ...
    many: bool = False         # ... or a list of such mappings
    named: bool = False        # ... or a mapping of names to such mappings

    def __call__(self, value: Any, path: str) -> Any:
        return self.fn(value, path)


@dataclass(frozen=True)
class Key:
    """How one YAML key is read and documented: the metadata of the dataclass field that holds it."""

    check: Check
    doc: str                   # one line for the reference
    name: str = ""             # the YAML key, when it is not the field's name
    group: str = ""            # the YAML mapping the key sits in, for a field of a flat dataclass
    required: bool = False     # required in YAML although the dataclass has a default (for code)
    show: str = ""             # the default as the reference shows it, when the value would mislead


@dataclass(frozen=True)
class Slot:
    """One YAML key of a dataclass: the field it fills, how, and the field's default."""

    field: str
    key: Key
    required: bool
    default: Any               # MISSING when the dataclass has none


#: YAML key -> its slot, or a group (a mapping of its own: YAML key -> slot).
Layout = Mapping[str, "Slot | Mapping[str, Slot]"]


def declare(check: Check, doc: str, default: Any = MISSING, *,
            factory: Callable[[], Any] | Any = MISSING, hash: bool | None = None, **how: Any) -> Any:
    """The field of a config key; ``how`` holds :class:`Key`'s optional attributes."""
    return dataclasses.field(default=default, default_factory=factory, hash=hash,
                             metadata={KEY: Key(check, doc, **how)})


@functools.cache
def layout(cls: type) -> Layout:
    """The YAML keys of dataclass ``cls`` in field order (fields without a :class:`Key` are not keys)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        k = f.metadata.get(KEY)
        if k is None:
            continue
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        slot = Slot(f.name, k, default is MISSING or k.required, default)
        target = out.setdefault(k.group, {}) if k.group else out
        target[k.name or f.name] = slot
    return out


def read(cls: type, value: object, path: str) -> dict[str, Any]:
    """Check the mapping ``value`` against the keys of ``cls``; field name -> value, for keys given."""
    out: dict[str, Any] = {}
    _read(value, path, layout(cls), out)
    return out


def section(cls: type[T]) -> Check:
    """The checker of a mapping with the keys of dataclass ``cls``; it returns a ``cls``."""
    return Check(lambda value, path: cls(**read(cls, value, path)), "map", keys=cls)


def _required(item: Slot | Mapping[str, Slot]) -> bool:
    if isinstance(item, Slot):
        return item.required
    return any(slot.required for slot in item.values())


def _read(value: object, path: str, keys: Layout, out: dict[str, Any]) -> None:
    if not isinstance(value, Mapping):
        raise wrong_type(value, "a mapping", path or "<root>")
    for name in value:
        if name not in keys:
            raise Invalid(join(path, name), f"unknown key {name!r} (allowed: {', '.join(keys)})")
    for name, item in keys.items():
        key_path = join(path, name)
        required = _required(item)
        if name not in value:
            if required:
                raise Invalid(key_path, "missing required key")
        elif value[name] is None and not required:
            pass  # "key:" with nothing after it means "use the default"
        elif isinstance(item, Slot):
            out[item.field] = item.key.check(value[name], key_path)
        else:
            _read(value[name], key_path, item, out)


# ------------------------------------------------------------------------------ problem wording


def join(path: str, key: object) -> str:
    """``path.key``, or ``key`` at the top."""
    return f"{path}.{key}" if path else str(key)


def type_name(value: object) -> str:
    """A YAML value's type in the words of the error messages."""
    for kind, name in ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "float"),
                       (str, "string"), (Mapping, "mapping"), (list, "list")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def wrong_type(value: object, expected: str, path: str) -> Invalid:
    """``wrong type: expected EXPECTED, got TYPE [VALUE]`` at ``path``."""
    got = type_name(value)
    if isinstance(value, bool | int | float | str):
        got += f" {value!r}"
    return Invalid(path, f"wrong type: expected {expected}, got {got}")
