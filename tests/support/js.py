"""JavaScript AMQP clients (rhea, from npm) for interop tests: run with node from tests/interop/js.

:func:`js_client_dir` installs the pinned packages of tests/interop/js (package-lock.json, `npm ci`) once
per checkout, and skips the test, saying why, when node or npm is not installed or npm cannot fetch them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.nodes import REPO_ROOT

JS_DIR = REPO_ROOT / "tests" / "interop" / "js"
INSTALL_TIMEOUT = 300


def js_client_dir() -> Path:
    """tests/interop/js with its node_modules installed (or the calling test skipped)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian: apt-get install nodejs npm): no JavaScript client")
    stamp = JS_DIR / "node_modules" / ".package-lock.json"
    lock = JS_DIR / "package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
        proc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True,
                              text=True, timeout=INSTALL_TIMEOUT)
        if proc.returncode != 0:
            pytest.skip(f"npm ci in {JS_DIR} failed (no registry?): {proc.stderr.strip()[-300:]}")
    return JS_DIR


def run_js(script: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run tests/interop/js/SCRIPT with node."""
    directory = js_client_dir()
    return subprocess.run(["node", script, *args], cwd=directory, capture_output=True, text=True,
                          timeout=timeout)


def rhea_management_request(url: str, properties: dict[str, Any], body: Any = None) -> dict[str, Any]:
    """Send one management request with rhea; the response's application properties and body."""
    args = [url, json.dumps(properties)] + ([] if body is None else [json.dumps(body)])
    proc = run_js("management_request.js", *args)
    assert proc.returncode == 0, f"rhea client failed ({proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
