"""`make bench` prints BENCHMARKS.md's tables: built from a small record of the scenarios' JSON results
(tests/unit/data/headline_runs.json), each table has the header line, the rule line and row labels of the
table of the same title in BENCHMARKS.md, so the two cannot drift apart, and every row names its command,
date and machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness.tables import MESH, NOT_BESIDE, SPECS, Run, build_tables, report  # noqa: E402

RECORD = Path(__file__).resolve().parent / "data" / "headline_runs.json"
MACHINE = "M9"


def benchmarks_md_tables() -> dict[str, list[str]]:
    """Title of each ``## `` section of BENCHMARKS.md -> the lines of the first table under it."""
    out: dict[str, list[str]] = {}
    title = None
    for line in (ROOT / "BENCHMARKS.md").read_text().splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
        elif title and line.startswith("|"):
            out.setdefault(title, []).append(line)
        elif title in out:
            title = None                        # the first table of the section has ended
    return out


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def recorded_runs() -> list[Run]:
    return [Run(**{**r, "window": tuple(r["window"]), "load": tuple(r["load"])})
            for r in json.loads(RECORD.read_text())["runs"]]


@pytest.fixture(scope="module")
def built() -> dict[str, list[str]]:
    return {title: table.splitlines() for title, table in build_tables(recorded_runs(), MACHINE).items()}


def test_every_table_is_built_from_the_record(built):
    assert sorted(built) == sorted(SPECS)


@pytest.mark.parametrize("title", sorted(SPECS))
def test_header_and_rule_are_benchmarks_md(built, title):
    ours, theirs = built[title], benchmarks_md_tables()
    assert title in theirs, f"BENCHMARKS.md has no section '## {title}'"
    assert ours[0] == theirs[title][0], "header line differs from BENCHMARKS.md's"
    assert ours[1] == theirs[title][1], "rule line (alignment) differs from BENCHMARKS.md's"


@pytest.mark.parametrize("title", sorted(SPECS))
def test_row_labels_are_benchmarks_md(built, title):
    width, labels = len(SPECS[title][0]), SPECS[title][1]
    known = {tuple(cells(line)[:labels]) for line in benchmarks_md_tables()[title][2:]}
    rows = [cells(line) for line in built[title][2:]]
    assert rows
    for row in rows:
        assert len(row) == width, row
        assert tuple(row[:labels]) in known, f"row label {row[:labels]} is not one of BENCHMARKS.md's"


def test_every_row_names_command_date_and_machine(built):
    for lines in built.values():
        header = cells(lines[0])
        col = next(i for i, h in enumerate(header) if "date, machine" in h)
        for line in lines[2:]:
            row = cells(line)
            assert "2026-12-02 " in row[col] and f", {MACHINE}, load " in row[col], row
            assert "`" in line and ".py" in line, row          # the command that produced it


def test_qdrouterd_rows_carry_the_ratio_the_others_do_not(built):
    rows = {tuple(cells(line)[:2]): cells(line) for line in built[MESH][2:]}
    chain = rows[("chain A → B → C", "unsettled")]
    assert chain[2] == "`qdr_compare.py --rounds 1`"
    assert chain[4:] == ["103,000 msg/s", "64,000 msg/s", "**1.61**"]
    mesh = rows[("four-node mesh", "pre-settled")]
    assert mesh[2].startswith("`mesh_bench.py") and mesh[4] == "250,000 msg/s (3 lost)"
    assert mesh[5:] == [NOT_BESIDE, ""]
    assert rows[("one node", "unsettled throughput")][4] == "123,456 msg/s, 4.2 µs of node CPU per message"


def test_a_smaller_run_says_so_in_its_labels():
    runs = recorded_runs()
    scale = next(r for r in runs if r.script == "scale_bench.py")
    scale.result["connections"]["per_node"] = 500
    scale.result["storm"]["addresses"] = 5000
    table = build_tables([scale], MACHINE)["Control plane at scale"]
    assert "| `meshrouter stat -l` of 5,000 links |" in table
    assert "| RSS per idle connection (500 per node) |" in table


def test_a_failed_scenario_gives_no_rows_and_the_report_names_the_machine_label():
    runs = recorded_runs()
    for r in runs:
        if r.script != "startup_bench.py":
            r.result = None
    text = report(runs, MACHINE, "from --machine")
    assert text.startswith("Machine label: M9 (from --machine).")
    assert "## Start-up" in text and "## RPC" not in text and "## " + MESH not in text
