"""What a ``meshrouter analyze`` run produced: the job (``job``) fills it, the page (``report``) reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Result:
    """What a run produced."""

    out_dir: Path
    report: Path
    summary: dict
    tables: dict[str, Path] = field(default_factory=dict)
    data: dict[str, list[dict]] = field(default_factory=dict)  # rows read back for the report
