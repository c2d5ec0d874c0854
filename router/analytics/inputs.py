"""Finding record files under RECORDS_DIR, without Spark (so that bad arguments fail fast)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

JSON_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIX = ".parquet"
MAGIC = b"PAR1"


@dataclass
class Inputs:
    """Record files found under a directory, and the ones skipped before Spark saw them."""

    json_files: list[str] = field(default_factory=list)
    parquet_files: list[str] = field(default_factory=list)
    bad_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    @property
    def count(self) -> int:
        """Files found, usable or not."""
        return len(self.json_files) + len(self.parquet_files) + len(self.bad_files)


def parquet_problem(path: Path) -> str | None:
    """Why a Parquet file cannot be read (truncated, not Parquet), or None if its frame looks whole."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(4)
            if size < 12 or head != MAGIC:
                return "not a Parquet file (no PAR1 header)"
            f.seek(size - 8)
            tail = f.read(8)
    except OSError as err:
        return f"unreadable: {err.strerror or err}"
    footer_len = struct.unpack("<I", tail[:4])[0]
    if tail[4:] != MAGIC or footer_len > size - 12:
        return "truncated Parquet file (no valid footer)"
    return None


def find_inputs(records_dir: Path) -> Inputs:
    """Every ``*.jsonl``/``*.json``/``*.parquet`` file under ``records_dir`` (recursively, sorted);
    hidden files and Spark's ``_SUCCESS``-style markers are ignored."""
    found = Inputs()
    for path in sorted(p for p in records_dir.rglob("*") if p.is_file()):
        if any(part.startswith((".", "_")) for part in path.relative_to(records_dir).parts):
            continue
        if path.suffix in JSON_SUFFIXES:
            found.json_files.append(str(path))
        elif path.suffix == PARQUET_SUFFIX:
            problem = parquet_problem(path)
            if problem:
                found.bad_files.append((str(path), problem))
            else:
                found.parquet_files.append(str(path))
    return found
