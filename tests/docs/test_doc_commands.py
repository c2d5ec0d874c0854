"""Every command README.md and docs/*.md show parses, names files that exist, and no command hides.

The convention the guides follow is in docs/CONTRIBUTING.md ("Commands in the guides") and
tests/support/doc_commands.py. Here each ``$ `` command is checked without running it: ``meshrouter``
commands by the real argument parser, ``make`` targets against the Makefile, ``python`` scripts by their
own parsers, qdstat / qdmanage commands against the requests recorded from the real tools, the rest by
``bash -n``. tests/docs/test_doc_runs.py runs the cheap ones for real and compares what they print.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from router.cli import build_parser, parse_args
from tests.support.doc_commands import SHELL_LANGS, Command, all_commands, blocks, guides
from tests.support.doc_commands import words as _words
from tests.support.nodes import REPO_ROOT
from tests.support.qdr_tools import recording

COMMANDS = all_commands()
REPO_DIRS = ("topologies/", "config/", "examples/", "docs/", "benchmarks/", "router/", "tests/")
SHELL_ONLY = {"echo", "export", ".", "for", "cd", "kill"}   # checked by `bash -n` alone


def _parses(parser_words: list[str], parser) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parse_args(parser, parser_words)
    except SystemExit as exc:
        raise AssertionError(f"does not parse: {err.getvalue().strip()}") from exc


def _repo_files_exist(words: list[str]) -> None:
    for w in words:
        if w.startswith(REPO_DIRS) and "{" not in w:
            assert (REPO_ROOT / w).exists(), f"{w}: no such file in the repository"


def _check_meshrouter(words: list[str]) -> None:
    _parses(words[1:], build_parser())
    _repo_files_exist(words[1:])


def _check_make(words: list[str]) -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    for target in words[1:]:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target}: no such target"


def _check_python(words: list[str]) -> None:
    args = words[1:]
    if args[:1] == ["-c"]:
        compile(args[1], "<python -c>", "exec")
        return
    if args[:1] == ["-m"]:
        if args[1] == "venv":
            return
        assert importlib.util.find_spec(args[1]) is not None, f"python -m {args[1]}: no such module"
        return
    script = args[0]
    if "qdstat" in script or "qdmanage" in script:
        _check_qdr_tool(Path(script).name, args[1:])
        return
    path = REPO_ROOT / script
    assert path.is_file(), f"{script}: no such file"
    source = path.read_text(encoding="utf-8")
    compile(source, script, "exec")
    if "\ndef parse_args(" in source:          # examples/amqp_tool.py: its own parser, imported
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                module.parse_args(args[1:])
        except SystemExit as exc:
            raise AssertionError(f"{script} {' '.join(args[1:])}: {err.getvalue().strip()}") from exc
    else:
        assert not args[1:], f"{script} takes no arguments here"


def _shape(args: list[str]) -> list[str]:
    """qdstat / qdmanage arguments without ``-b URL`` and with the values of KEY=VALUE left out."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-b", "--bus"):
            skip = True
        else:
            out.append(a.split("=", 1)[0] + "=" if "=" in a else a)
    return out


def _check_qdr_tool(tool: str, args: list[str]) -> None:
    recorded = [_shape(c["args"]) for c in recording()["commands"] if c["tool"] == tool]
    assert _shape(args) in recorded, (f"{tool} {' '.join(args)}: not among the commands recorded from the "
                                      "real tool (tests/management/data/qdr_tool_requests.json)")


def _check_pip(words: list[str]) -> None:
    assert words[1] == "install", words
    extras_known = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
                       ["optional-dependencies"])
    for spec in words[2:]:
        if spec.startswith("-") or spec == "python-qpid-proton":
            continue
        m = re.fullmatch(r"(?:meshrouter|\.)(?:\[([a-z0-9,]+)\])?", spec)
        assert m, f"pip install {spec}: not this project"
        for extra in filter(None, (m.group(1) or "").split(",")):
            assert extra in extras_known, f"pip install {spec}: no extra {extra!r} in pyproject.toml"


def _check_spark_class(words: list[str]) -> None:
    pyspark = importlib.util.find_spec("pyspark")
    assert pyspark is not None and pyspark.origin
    assert (Path(pyspark.origin).parent / "bin" / "spark-class").exists(), "pyspark has no bin/spark-class"


def check(command: Command) -> None:
    syntax = subprocess.run(["bash", "-n"], input=command.text.replace("\n>", "\n") + "\n", text=True,
                            capture_output=True, timeout=10)
    assert syntax.returncode == 0, f"bash -n: {syntax.stderr.strip()}"
    words = _words(command.text)
    program = words[0]
    name = Path(program).name
    if name == "meshrouter":
        _check_meshrouter(words)
    elif name == "make":
        _check_make(words)
    elif name in ("python", "python3"):
        _check_python(words)
    elif name == "pip":
        _check_pip(words)
    elif program == "$SPARK_HOME/bin/spark-class":
        _check_spark_class(words)
    elif program in SHELL_ONLY:
        pass
    else:
        raise AssertionError(f"no check for the program {program!r}: add one to "
                             "tests/docs/test_doc_commands.py")


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_the_command_parses_and_names_files_that_exist(command: Command) -> None:
    check(command)


def test_the_guides_show_commands_and_the_checker_finds_them() -> None:
    assert len(COMMANDS) >= 50
    shown = {c.path.name for c in COMMANDS}
    assert {"README.md", "MESH.md", "OPERATIONS.md", "SECURITY.md", "CONFIGURATION.md"} <= shown


@pytest.mark.parametrize("path", guides(), ids=lambda p: p.name)
def test_no_shell_block_escapes_the_check(path: Path) -> None:
    """Commands are shown in ```console blocks only: a ```sh block would be read by nobody."""
    for block in blocks(path):
        assert block.lang not in SHELL_LANGS, (f"{path.name}:{block.line}: a ```{block.lang} block; show "
                                               "commands in ```console with `$ ` (docs/CONTRIBUTING.md)")
        if block.lang != "console":
            assert not any(line.startswith("$ ") for line in block.lines), \
                f"{path.name}:{block.line}: `$ ` lines outside a ```console block"


@pytest.mark.parametrize("path", guides(), ids=lambda p: p.name)
def test_every_yaml_block_is_yaml_and_a_whole_node_config_passes_check_config(path: Path, tmp_path) -> None:
    """A config shown in a guide is one a node accepts (those naming certificate or users files aside: the
    files are the reader's)."""
    for block in blocks(path):
        if block.lang != "yaml":
            continue
        data = yaml.safe_load(block.text)
        if not (isinstance(data, dict) and {"node", "listeners"} <= data.keys()):
            continue
        if re.search(r"\b(cert|key|ca|users_file|sasldb|key_password_file):", block.text):
            continue
        config = tmp_path / "shown.yaml"
        config.write_text(block.text)
        proc = subprocess.run([sys.executable, "-m", "router", "check-config", str(config)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"{path.name}:{block.line}: {proc.stderr.strip()}"


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    slugs = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"#{1,6} ", line):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            slugs.add(slug)
    return slugs


@pytest.mark.parametrize("path", guides(), ids=lambda p: p.name)
def test_every_link_to_a_file_of_the_repository_exists(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        linked = (path.parent / target) if target else path
        assert linked.exists(), f"{path.name}: link to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{path.name}: link to {target}#{anchor}: no such heading"


def test_a_broken_command_is_caught() -> None:
    """The checks can fail: a wrong option, a missing file, a missing target, an unknown program."""
    doc = REPO_ROOT / "README.md"
    bad = ["meshrouter stat --no-such-option", "meshrouter mesh up topologies/no-such.yaml",
           "make no-such-target", "python examples/amqp_tool.py send", "frobnicate --now",
           "python $QDR_HOME/bin/qdstat --no-such-view"]
    for text in bad:
        with pytest.raises(AssertionError):
            check(Command(doc, 1, text))
    check(Command(doc, 1, "meshrouter stat -b amqp://127.0.0.1:5703 -n"))
