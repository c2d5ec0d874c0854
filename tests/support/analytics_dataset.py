"""A three-node record set with known answers, written the way nodes write it (plus broken files).

Traffic (T0 is a whole epoch second):

- ``svc/a``: 100 deliveries produced and consumed at A; latency i+1 ms (i = 0..99); outcomes
  rejected 5, released 3, modified 2, accepted 90.
- ``svc/b``: 40 deliveries A -> B -> C (hops 0, 1, 2); latency at C (j+1)*0.5 ms, +1 ms at B, +2 ms at A.
- ``svc/c``: 20 pre-settled deliveries at B, and 3 dropped ones (out_link null).
- ``svc/d``: 10 deliveries C -> A (hops 0, 1) in a Parquet file; 8 accepted, 2 released; 3 ms at C, 1 ms at A.
- ``egress``: A's and C's records name it (svc/a: A; svc/b: C; svc/d: A); B's JSON files are in the
  format from before the field (no ``egress``: read as null). No record names a ``next_hop`` (B's
  files and the Parquet file lack the field, A's and C's JSON say null): no per-link utilisation.
- events: starvation on A/l1 (0.5 + 0.25 + 0.125 s, the last closed by link_down), A/l2 (0.0625 s),
  B/l1 (one closed 0.5 s interval, two open starts).

Broken input: 3 garbage lines, 1 truncated last line, 1 wrong-typed line (5 corrupt lines); 3
records missing required fields (invalid); a truncated Parquet file and a text file named
``.parquet`` (2 corrupt files); ``notes.txt`` is not a record file and is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from router.telemetry.jsonl import Formatter

T0 = 1_763_770_000
DELIVERY_KEYS = ("node", "address", "ingress", "hops", "in_link", "out_link", "outcome", "size", "arrival",
                 "settled", "egress")


@dataclass
class Dataset:
    """The valid records written (as dicts, times as written), for reference answers."""

    deliveries: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    corrupt_lines: int = 5
    invalid_records: int = 3
    corrupt_files: int = 2
    json_files: int = 0
    parquet_files: int = 1


def _d(node, address, ingress, hops, in_link, out_link, outcome, size, arrival, settled, egress) -> dict:
    # Times pass through "%.6f" and back, exactly as the writer and the reader see them.
    return dict(zip(DELIVERY_KEYS, (node, address, ingress, hops, in_link, out_link, outcome, size,
                                    float(f"{arrival:.6f}"), float(f"{settled:.6f}"), egress), strict=True))


def _e(node, event, link, address, peer, t) -> dict:
    return {"node": node, "event": event, "link": link, "address": address, "peer": peer,
            "time": float(f"{t:.6f}")}


def build() -> tuple[list[dict], list[dict], list[dict]]:
    """(deliveries for JSON, deliveries for Parquet, events)."""
    rows, parquet, events = [], [], []
    for i in range(100):
        outcome = "rejected" if i < 5 else "released" if i < 8 else "modified" if i < 10 else "accepted"
        arrival = T0 + i * 0.01
        settled = arrival + (i + 1) / 1000
        rows.append(_d("A", "svc/a", "A", 0, "client", "client", outcome, 100, arrival, settled, "A"))
    for j in range(40):
        arrival_a = T0 + 2 + j * 0.02
        lat_c = (j + 1) * 0.0005
        settled_c = arrival_a + 0.001 + lat_c
        rows.append(_d("A", "svc/b", "A", 0, "client", "inter-router", "accepted", 200, arrival_a,
                       settled_c + 0.001, "C"))
        rows.append(_d("B", "svc/b", "A", 1, "inter-router", "inter-router", "accepted", 200,
                       arrival_a + 0.0005, settled_c + 0.0005, None))  # B's files are old: no egress
        rows.append(_d("C", "svc/b", "A", 2, "inter-router", "client", "accepted", 200, arrival_a + 0.001,
                       settled_c, "C"))
    for k in range(20):
        arrival = T0 + 3 + k * 0.01
        rows.append(_d("B", "svc/c", "B", 0, "client", "client", "presettled", 50, arrival, arrival + 0.0001,
                       None))
    for k in range(3):
        arrival = T0 + 3.5 + k * 0.01
        rows.append(_d("B", "svc/c", "B", 0, "client", None, "dropped", 50, arrival, arrival + 0.0001, None))
    for m in range(10):  # Parquet rows carry "kind" like JSON ones
        outcome = "released" if m >= 8 else "accepted"
        arrival_c = T0 + 4 + m * 0.05
        parquet.append(_d("C", "svc/d", "C", 0, "client", "inter-router", outcome, 300, arrival_c,
                          arrival_c + 0.003, "A"))
        parquet.append(_d("A", "svc/d", "C", 1, "inter-router", "client", outcome, 300, arrival_c + 0.001,
                          arrival_c + 0.002, "A"))
    events += [
        _e("A", "conn_up", None, None, "client-1", T0),
        _e("A", "link_up", "A/l1", "svc/a", "client-1", T0 + 0.5),
        _e("A", "credit_starved_start", "A/l1", "svc/a", "client-1", T0 + 1.0),
        _e("A", "credit_starved_end", "A/l1", "svc/a", "client-1", T0 + 1.5),
        _e("A", "credit_starved_start", "A/l1", "svc/a", "client-1", T0 + 2.0),
        _e("A", "credit_starved_end", "A/l1", "svc/a", "client-1", T0 + 2.25),
        _e("A", "credit_starved_start", "A/l1", "svc/a", "client-1", T0 + 3.0),
        _e("A", "link_down", "A/l1", "svc/a", "client-1", T0 + 3.125),
        _e("A", "credit_starved_start", "A/l2", "svc/a", "client-2", T0 + 4.0),
        _e("A", "credit_starved_end", "A/l2", "svc/a", "client-2", T0 + 4.0625),
        _e("B", "credit_starved_start", "B/l1", "svc/b", "client-3", T0 + 1.0),
        _e("B", "credit_starved_start", "B/l1", "svc/b", "client-3", T0 + 5.0),
        _e("B", "credit_starved_start", "B/l1", "svc/b", "client-3", T0 + 6.0),
        _e("B", "credit_starved_end", "B/l1", "svc/b", "client-3", T0 + 6.5),
        _e("A", "conn_down", None, None, "client-1", T0 + 7),
    ]
    return rows, parquet, events


def _jsonl(node: str, deliveries: list[dict], events: list[dict]) -> str:
    f = Formatter(node)
    text = f.events([(e["event"], e["link"], e["address"], e["peer"], e["time"]) for e in events])
    text += f.deliveries([tuple(d[k] for k in DELIVERY_KEYS[1:]) for d in deliveries])
    if node == "B":  # written before records had "egress" and "next_hop": readers take them as null
        text = re.sub(r',"egress":[^,}]*,"next_hop":[^,}]*\}', "}", text)
        assert '"egress"' not in text
    return text


def write(directory: Path, spark) -> Dataset:
    """Write the record set under ``directory`` (JSON Lines per node, Parquet via ``spark``)."""
    rows, parquet, events = build()
    ds = Dataset(deliveries=rows + parquet, events=events)
    directory.mkdir(parents=True, exist_ok=True)
    for node in ("A", "B", "C"):
        mine = [r for r in rows if r["node"] == node]
        half = len(mine) // 2  # two files per node, like a rotation
        evs = [e for e in events if e["node"] == node]
        (directory / f"{node}-20261122T000000Z-000001.jsonl").write_text(_jsonl(node, mine[:half], evs))
        text = _jsonl(node, mine[half:], [])
        if node == "B":  # the node died while writing its last line
            torn = _d("B", "svc/c", "B", 0, "client", "client", "accepted", 1, T0, T0, "B")
            extra = _jsonl("B", [torn], [])
            text += extra[: len(extra) // 2]
        sub = directory / "later" if node == "C" else directory  # files in subdirectories are found too
        sub.mkdir(exist_ok=True)
        (sub / f"{node}-20261122T000000Z-000002.jsonl").write_text(text)
    (directory / "A-broken-000001.jsonl").write_text(
        'not json at all\n{"kind": "event", "node": "C", "event": "link_up", "link": "C/l9", "address": '
        '"svc/z", "peer": "p", "time": 1763770000.5}\n{"kind": "delivery", "node": \n'
        '42\n{"kind":"delivery","node":"A","address":"svc/a","ingress":"A","hops":"two","in_link":"client",'
        '"out_link":"client","outcome":"accepted","size":1,"arrival":1.0,"settled":2.0}\n'
        '{"kind":"delivery","node":"A","address":"svc/a"}\n{"kind":"heartbeat","node":"A"}\n{}\n\n')
    ds.events.append(_e("C", "link_up", "C/l9", "svc/z", "p", T0 + 0.5))
    (directory / "empty.jsonl").write_text("")
    (directory / "notes.txt").write_text("not a record file\n")
    ds.json_files = 8

    good = directory / "parquet"
    frame = spark.createDataFrame([{"kind": "delivery", **r} for r in parquet])
    frame.coalesce(1).write.mode("overwrite").parquet(str(good))
    part = next(good.glob("part-*.parquet"))
    part.rename(directory / "C-svc-d.parquet")
    for p in good.iterdir():
        p.unlink()
    good.rmdir()
    data = (directory / "C-svc-d.parquet").read_bytes()
    (directory / "C-truncated.parquet").write_bytes(data[: len(data) // 2])
    (directory / "fake.parquet").write_text("this is not parquet")
    return ds
