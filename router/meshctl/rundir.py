"""The run directory of a mesh (default ``.mesh/<topology name>/``): per node ``<id>.yaml`` (config),
``<id>.stdout``, ``<id>.stderr`` (its output, the logs) and ``<id>.pid`` while it runs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path(".mesh")


@dataclass(frozen=True)
class RunDir:
    """Paths and pid files of one mesh's run directory."""

    path: Path

    @classmethod
    def for_topology(cls, name: str, directory: str | None = None) -> RunDir:
        return cls(Path(directory) if directory else DEFAULT_ROOT / name)

    def config(self, node_id: str) -> Path:
        return self.path / f"{node_id}.yaml"

    def stdout(self, node_id: str) -> Path:
        return self.path / f"{node_id}.stdout"

    def stderr(self, node_id: str) -> Path:
        return self.path / f"{node_id}.stderr"

    def pid_file(self, node_id: str) -> Path:
        return self.path / f"{node_id}.pid"

    def read_pid(self, node_id: str) -> int | None:
        """The pid recorded for ``node_id``, or None (no file, or not a pid)."""
        try:
            text = self.pid_file(node_id).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def write_pid(self, node_id: str, pid: int) -> None:
        self.pid_file(node_id).write_text(f"{pid}\n", encoding="ascii")

    def remove_pid(self, node_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.pid_file(node_id).unlink()

    def pid_nodes(self) -> list[str]:
        """Every node with a pid file here (whatever the topology says now)."""
        if not self.path.is_dir():
            return []
        return sorted(p.stem for p in self.path.glob("*.pid"))
