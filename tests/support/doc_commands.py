"""The commands README.md and the guides in docs/ show, read the way tests/docs checks them.

The convention (docs/CONTRIBUTING.md, "Commands in the guides"):

- a shell command is shown in a fenced ```` ```console ```` block, on a line starting with ``$ ``; a line
  ending in ``\\`` goes on on the next line, and lines starting with ``> `` continue it (a ``for`` loop);
- the lines after a command, up to the next command or comment, are what it prints (``...`` stands for
  lines left out; numbers, pids, times and reply addresses may differ);
- a line starting with ``# `` is a comment (``#1 ACCEPTED`` is output: no space after the ``#``);
- ```` ```sh ````, ```` ```bash ```` and ```` ```shell ```` blocks are not used (tests/docs fails on them),
  so no command escapes the check; a synopsis that is not a command goes in a ```` ```text ```` block;
- a ```` ```yaml ```` block whose first line is ``# NAME.yaml`` is the content of that file, which the
  commands next to it use (tests/docs writes it out before running them);
- the Python of a ```` ```python ```` block is run as it is by the tests that name it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.nodes import REPO_ROOT

FENCE = re.compile(r"^```(\S*)\s*$")
SHELL_LANGS = ("sh", "bash", "shell", "zsh", "shell-session")


def guides() -> list[Path]:
    """README.md and every guide in docs/."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, the file and the line of its first content line, its lines."""

    path: Path
    line: int
    lang: str
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip()) if lines[i].lstrip().startswith("```") else None
        if m is None:
            i += 1
            continue
        start, lang, body = i + 1, m.group(1), []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        yield Block(path, start + 1, lang, tuple(body))
        i += 1


@dataclass
class Command:
    """A ``$ `` command of a console block and the output shown under it."""

    path: Path
    line: int
    text: str
    output: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def commands(path: Path) -> Iterator[Command]:
    for block in blocks(path):
        if block.lang != "console":
            continue
        current: Command | None = None
        continuing = False
        for offset, raw in enumerate(block.lines):
            line = raw.rstrip()
            if continuing and current is not None:
                current.text += "\n" + line
                continuing = line.endswith("\\")
                continue
            if line.startswith("$ "):
                if current is not None:
                    yield _trimmed(current)
                current = Command(path, block.line + offset, line[2:])
                continuing = line.endswith("\\")
            elif line.startswith("> ") and current is not None and not current.output:
                current.text += "\n" + line[2:]
            elif line.startswith("# "):
                if current is not None:
                    yield _trimmed(current)
                current = None
            elif current is not None:
                current.output.append(line)
        if current is not None:
            yield _trimmed(current)


def _trimmed(command: Command) -> Command:
    while command.output and not command.output[-1].strip():
        command.output.pop()
    return command


def all_commands() -> list[Command]:
    return [c for path in guides() for c in commands(path)]


def find(path: Path, prefix: str) -> Command:
    """The one command of `path` that starts with `prefix`."""
    found = [c for c in commands(path) if c.text.startswith(prefix)]
    assert len(found) == 1, f"{path.name}: {len(found)} commands start with {prefix!r}"
    return found[0]


def yaml_file(path: Path, name: str) -> str:
    """The content of the ```yaml block of `path` whose first line is ``# NAME``."""
    found = [b for b in blocks(path) if b.lang == "yaml" and b.lines and b.lines[0].strip() == f"# {name}"]
    assert len(found) == 1, f"{path.name}: {len(found)} yaml blocks named {name}"
    return found[0].text


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang == "python"]


VARYING = re.compile(r"(?P<temp>temp\.[A-Za-z0-9_+/-]+)|(?P<number>\d+(?:\.\d+)?)|(?P<space>\s+)")
AS_PATTERN = {"temp": r"temp\.[A-Za-z0-9_+/-]+", "number": r"\d+(?:\.\d+)?", "space": r"\s+"}


def expected_lines(sample: list[str]) -> list[re.Pattern[str]]:
    """The sample output as patterns: numbers (durations, pids, ports), reply addresses and the width of
    table columns vary; the rest must be as shown."""
    patterns = []
    for line in sample:
        if line.strip() == "...":
            patterns.append(re.compile(r"\.\.\."))        # a marker: anything may stand here
            continue
        rx, pos = "", 0
        line = line.rstrip()
        for m in VARYING.finditer(line):
            rx += re.escape(line[pos:m.start()]) + AS_PATTERN[m.lastgroup]
            pos = m.end()
        patterns.append(re.compile("^" + rx + re.escape(line[pos:]) + "$"))
    return patterns


def matches(sample: list[str], actual: str) -> str | None:
    """None if `actual` shows every line of `sample` in order (a ``...`` line: anything between), else
    what is missing."""
    lines = [ln.rstrip() for ln in actual.splitlines()]
    pos = 0
    gap = False
    for pattern, shown in zip(expected_lines(sample), sample, strict=True):
        if pattern.pattern == r"\.\.\.":
            gap = True
            continue
        while pos < len(lines) and not pattern.match(lines[pos]):
            if not gap:
                return f"expected {shown!r}, got {lines[pos]!r}"
            pos += 1
        if pos == len(lines):
            return f"expected {shown!r}; not in the output"
        pos += 1
        gap = False
    return None


def words(text: str) -> list[str]:
    """A command's words: continuation lines joined; comments, leading ``VAR=value`` assignments, a
    trailing ``&`` and ``2>...`` redirections dropped."""
    out = shlex.split(text.replace("\\\n", " "), comments=True)
    while out and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", out[0]):
        out.pop(0)
    if out and out[-1] == "&":
        out.pop()
    return [w for w in out if not w.startswith("2>")]


def map_ports(text: str, ports: dict[int, int]) -> str:
    """`text` with each port of `ports` (a number after ``:``, ``=`` or a space: ``host:5703``, ``port=5680``,
    ``port: 5711``, ``--port 8080``) replaced by the one in use."""
    return re.sub(r"(?<=[:=\s])(\d{4,5})\b", lambda m: str(ports.get(int(m.group(1)), m.group(1))), text)
