"""``telemetry: {dir, rotate_mb, sample}`` in a node's config.

Each key is declared once, as a field of :class:`TelemetryConfig`: its default is the field's, its checks
are in ``__post_init__`` and :meth:`TelemetryConfig.from_mapping`, and the field's metadata holds what the
docs/CONFIGURATION.md shows (``type`` and ``doc``; router.config.reference reads them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass(frozen=True)
class TelemetryConfig:
    """Where and how a node writes telemetry.

    ``dir``: directory for the ``.jsonl`` files (created if missing); ``rotate_mb``: start a new file
    before one would pass this size (MiB, > 0); ``sample``: fraction of delivery records kept,
    0..1, chosen by a counter (1.0 keeps all; 0.25 keeps every 4th). Events are never sampled.
    """

    dir: str | os.PathLike[str] = field(metadata={
        "type": "path", "doc": "directory for the record files (created if missing)"})
    rotate_mb: float = field(default=64, metadata={
        "type": "MiB > 0", "doc": "start a new file before one would pass this size"})
    sample: float = field(default=1.0, metadata={
        "type": "number 0–1", "doc": "fraction of delivery records kept, every Nth (events are always kept)"})

    def __post_init__(self) -> None:
        if not str(self.dir):
            raise ValueError("dir: must not be empty")
        rotate = self.rotate_mb
        if isinstance(rotate, bool) or not isinstance(rotate, int | float) or not rotate > 0:
            raise ValueError(f"rotate_mb: must be a number > 0, not {rotate!r}")
        sample = self.sample
        if isinstance(sample, bool) or not isinstance(sample, int | float) or not 0 <= sample <= 1:
            raise ValueError(f"sample: must be a number from 0 to 1, not {sample!r}")

    @property
    def path(self) -> Path:
        """``dir`` as a Path."""
        return Path(self.dir)

    @property
    def rotate_bytes(self) -> int:
        """``rotate_mb`` in bytes (at least 1)."""
        return max(1, int(self.rotate_mb * 1024 * 1024))

    @classmethod
    def from_mapping(cls, data: object) -> TelemetryConfig:
        """Build from the YAML ``telemetry:`` mapping; ValueError("KEY: problem") when it is bad."""
        if not isinstance(data, Mapping):
            raise ValueError(f"must be a mapping with keys {', '.join(_KEYS)}")
        unknown = sorted(str(k) for k in data if k not in _KEYS)
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown key (expected one of {', '.join(_KEYS)})")
        if "dir" not in data:
            raise ValueError("dir: required")
        if not isinstance(data["dir"], str):
            raise ValueError(f"dir: must be a string, not {data['dir']!r}")
        return cls(**{k: data[k] for k in _KEYS if k in data})


_KEYS = tuple(f.name for f in fields(TelemetryConfig))
