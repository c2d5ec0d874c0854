"""benchmarks/ stays runnable: every scenario answers --help (so it imports the harness and what it
needs), headline.py lists what `make bench` runs and finds the result files, and the harness's
statistics and tables are right. The benchmarks themselves run with `make bench` (BENCHMARKS.md), not here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

from harness.report import markdown_table  # noqa: E402
from harness.sample import nearest_rank, percentile  # noqa: E402

#: helpers that other scenarios start (their own command lines, no --help) or import, not scenarios
HELPERS = {"large_client.py", "soak_traffic.py"}
SCENARIOS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in HELPERS)


def test_the_scenarios_are_there():
    assert {"headline.py", "node_bench.py", "mesh_bench.py", "mesh_convergence.py", "mesh_reroute.py",
            "rpc_bench.py", "scale_bench.py", "startup_bench.py", "qdr_compare.py",
            "soak_cycle.py"} <= set(SCENARIOS)


@pytest.fixture(scope="module")
def helps() -> dict[str, tuple[int, str, str]]:
    """Every scenario's ``--help``, all started at once: script -> (exit status, stdout, stderr)."""
    procs = {s: subprocess.Popen([sys.executable, str(BENCH / s), "--help"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for s in SCENARIOS}
    out = {}
    for s, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        out[s] = (proc.returncode, stdout, stderr)
    return out


@pytest.mark.parametrize("script", SCENARIOS)
def test_scenario_answers_help(helps, script):
    code, stdout, stderr = helps[script]
    assert code == 0, stderr[-2000:]
    assert stdout.startswith("usage:"), stdout[:500]


def test_headline_lists_the_headline_set():
    r = subprocess.run([sys.executable, str(BENCH / "headline.py"), "--list"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    sections = [line.split()[0] for line in r.stdout.splitlines()]
    assert sections == ["node", "mesh", "rpc", "control", "startup", "startup", "qdrouterd"]
    bad = subprocess.run([sys.executable, str(BENCH / "headline.py"), "--only", "nodes"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "unknown section(s) nodes" in bad.stderr


def test_headline_finds_the_result_file_a_scenario_names():
    from headline import RESULT_FILE

    out = ("run 1\nResults: benchmarks/results/20261202-0640-headline.json\n"
           "(details: benchmarks/results/20261202-0641-scale-headline.json)\nresults: none.json\n")
    assert RESULT_FILE.findall(out) == ["benchmarks/results/20261202-0640-headline.json",
                                        "benchmarks/results/20261202-0641-scale-headline.json"]


def test_percentiles():
    values = [5, 1, 4, 2, 3]
    assert percentile(values, 0.5) == 3 and percentile(values, 0.9) == pytest.approx(4.6)
    assert nearest_rank(values, 50) == 3 and nearest_rank(values, 99) == 5 and nearest_rank(values, 0) == 1
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_markdown_table():
    assert markdown_table(["what", "n"], [["x", 1]]) == "| what | n |\n|---|---:|\n| x | 1 |"
