"""A node's view of the mesh: SIGUSR1 makes it log one ``state {json}`` line on stderr; read the newest."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

STATE_MARK = b" state {"


class StateReader:
    """Follows one node's stderr log from where it last read, keeping the newest ``state`` found."""

    def __init__(self, pid: int, log: Path) -> None:
        self.pid = pid
        self.log = log
        self.state: dict[str, Any] | None = None
        self.updates = 0             # state lines read so far
        self._offset = 0

    def request(self) -> bool:
        """Ask the node for a state line (only once it is ready: SIGUSR1 kills it before)."""
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return False
        return True

    def skip_existing(self) -> None:
        """Ignore what the log holds now: only state lines written from here on count."""
        with contextlib.suppress(OSError):
            self._offset = self.log.stat().st_size

    def read(self) -> bool:
        """Read what the log gained since the last call; True if a new state line was among it."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return False
        end = chunk.rfind(b"\n") + 1              # complete lines only
        self._offset += end
        newest = None
        for line in chunk[:end].splitlines():
            if STATE_MARK in line:
                newest = line
        if newest is None:
            return False
        with contextlib.suppress(ValueError):
            self.state = json.loads(newest.split(b" state ", 1)[1])
            self.updates += 1
            return True
        return False

    @property
    def mesh(self) -> Mapping[str, Any]:
        return (self.state or {}).get("mesh") or {}


def read_states(readers: Mapping[str, StateReader], timeout: float = 2.0) -> None:
    """Ask every reader's node for a fresh state line and wait up to ``timeout`` s for all of them."""
    for reader in readers.values():
        reader.skip_existing()
    waiting = {node_id for node_id, reader in readers.items() if reader.request()}
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        time.sleep(0.02)
        waiting = {node_id for node_id in waiting if not readers[node_id].read()}
