"""What a newcomer meets before reading a line of code (issue 34): one default node URL for every client
command, an install without deprecation warnings, a README and a BENCHMARKS.md of a readable size."""

from __future__ import annotations

import shutil
import subprocess
import sys

import yaml

from router.cli import build_parser
from tests.support.nodes import REPO_ROOT


def test_stat_manage_and_console_ask_the_same_node_without_b() -> None:
    """Issue 34 (3): manage and console defaulted to 127.0.0.1:5672 (RabbitMQ's port), stat to 5700."""
    parser = build_parser()
    buses = {
        "stat": parser.parse_args(["stat", "-g"]).bus,
        "manage": parser.parse_args(["manage", "query", "--type", "listener"]).bus,
        "console": parser.parse_args(["console"]).bus,
    }
    assert len(set(buses.values())) == 1, buses
    listener = yaml.safe_load((REPO_ROOT / "config" / "node.yaml").read_text())["listeners"][0]
    assert buses["stat"] == f"amqp://{listener['host']}:{listener['port']}", "not the node of make run-node"
    tool = (REPO_ROOT / "examples" / "amqp_tool.py").read_text()
    assert f'DEFAULT_URL = "{buses["stat"]}"' in tool, "examples/amqp_tool.py asks another node"


def test_installing_prints_no_deprecation_warning(tmp_path) -> None:
    """Issue 34 (6): pip printed setuptools' "`project.license` as a TOML table is deprecated". pip
    prepares the metadata with the build backend pyproject.toml names, in an isolated environment, as an
    install does (``--dry-run``: nothing is installed). From a copy of the checkout: preparing the metadata
    writes meshrouter.egg-info into the source tree, and one in the checkout (with the `amqp` driver's
    entry point) would give the oslo 14.x tests two `amqp` drivers."""
    tree = tmp_path / "meshrouter"            # what scripts/oslo18-venv.sh copies for the same reason
    shutil.copytree(REPO_ROOT / "router", tree / "router",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO_ROOT / name, tree / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps",
                           "--ignore-installed",
                           "-v", "."], cwd=tree, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "Would install meshrouter" in out, out[-2000:]
    assert "project.license" not in out and "Deprecat" not in out, \
        [ln for ln in out.splitlines() if "eprecat" in ln or "license" in ln]


def test_the_front_doors_stay_short() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    benchmarks = (REPO_ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 300, f"README.md has {len(readme)} lines: move the detail into a guide in docs/"
    assert len(benchmarks) <= 400, f"BENCHMARKS.md has {len(benchmarks)} lines: current figures only"
