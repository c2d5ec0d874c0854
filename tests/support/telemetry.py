"""Telemetry records a node wrote (router/telemetry/SCHEMA.md), read back as dicts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def records(directory: Path) -> list[dict]:
    """Every record of the node's Parquet files (JSON Lines too, if any), as dicts."""
    import pyarrow.parquet as pq

    out = []
    for f in sorted(directory.glob("*.parquet")):
        out += pq.read_table(f).to_pylist()
    for f in sorted(directory.glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def deliveries(directory: Path, addresses: Iterable[str] | None = None) -> list[dict]:
    """The delivery records, only those of ``addresses`` if given (the test's own traffic: reading a
    node's state through management makes deliveries too)."""
    wanted = None if addresses is None else set(addresses)
    return [r for r in records(directory)
            if r["kind"] == "delivery" and (wanted is None or r["address"] in wanted)]
