"""One YAML reader (router.config.yamlfile.read_yaml_file) for node configs and topologies.

The same bad file gives the same ``FILE: <file>: PROBLEM`` through ``load_config`` and ``load_topology``,
each as its own error type; the reader itself is checked on every kind of unreadable file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from router.config import ConfigError, load_config
from router.config.yamlfile import read_yaml_file
from router.meshctl.topology import TopologyError, load_topology

BAD_FILES = {
    "syntax": ("nodes: [\n", "invalid YAML at line 2, column 1: expected the node content"),
    "context": ("node:\n  id: A\n listeners: []\n",
                "invalid YAML at line 3, column 2: expected <block end>, but found '<block mapping start>'"
                " (while parsing a block mapping at line 1)"),
    "tab": ("node:\n\tid: A\n", "invalid YAML at line 2, column 1: found character '\\t' that cannot "
                                "start any token"),
    "duplicate key": ("node: {id: A}\nnode: {id: B}\n",
                      "invalid YAML at line 2, column 1: duplicate key 'node' (first at line 1)"),
    "python tag": ("node: !!python/object/apply:os.system ['true']\n", "invalid YAML at line 1, column 7: "),
    "not utf-8": (b"node:\n  id: \xff\xfe\n", "not valid UTF-8 text (byte offset 12)"),
}


def _write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "bad.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_config_and_topology_report_a_bad_file_alike(tmp_path: Path, kind: str) -> None:
    content, problem = BAD_FILES[kind]
    path = _write(tmp_path, content)
    with pytest.raises(ConfigError) as as_config:
        load_config(path)
    with pytest.raises(TopologyError) as as_topology:
        load_topology(path)
    assert type(as_config.value) is ConfigError
    for err in (as_config.value, as_topology.value):
        assert (err.file, err.key_path) == (str(path), "<file>")
        assert err.problem.startswith(problem), err.problem
    assert str(as_config.value) == str(as_topology.value)


@pytest.mark.parametrize("which", ["missing", "directory"])
def test_unreadable_file_names_the_file(tmp_path: Path, which: str) -> None:
    path = tmp_path / "nope.yaml" if which == "missing" else tmp_path
    with pytest.raises(ConfigError) as as_config:
        load_config(path)
    with pytest.raises(TopologyError) as as_topology:
        load_topology(path)
    assert str(as_config.value) == str(as_topology.value)
    assert str(as_config.value).startswith(f"{path}: <file>: cannot read file: ")


def test_reader_returns_the_data_and_raises_the_callers_error(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("a: [1, 2]\nb: {c: x}\n", encoding="utf-8")
    assert read_yaml_file(good, ConfigError) == {"a": [1, 2], "b": {"c": "x"}}
    assert read_yaml_file(_write(tmp_path, ""), ConfigError) is None

    class Mine(Exception):
        pass

    with pytest.raises(Mine) as info:
        read_yaml_file(_write(tmp_path, "a: [\n"), Mine)
    assert info.value.args[:2] == (str(tmp_path / "bad.yaml"), "<file>")
