"""The web console (issue 20, point 4) in a real headless browser (Chromium, Debian's package): the page
loads against a running four-node mesh, shows 4 nodes and their links, and follows a node that stops."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.support.meshctl import up
from tests.support.nodes import REPO_ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _page(url: str) -> str:
    """The page's DOM after its scripts ran (a few seconds of the page's time)."""
    proc = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={os.environ.get('TMPDIR', '/tmp')}/mr-console-{os.getpid()}",
                           "--virtual-time-budget=3000", "--dump-dom", url],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _shown(dom: str) -> tuple[int, int, str]:
    nodes = re.search(r'id="node-count">(\d+)<', dom)
    edges = re.search(r'id="edge-count">(\d+)<', dom)
    status = re.search(r'id="status"[^>]*>([^<]*)<', dom)
    assert nodes and edges and status, dom[:3000]
    return int(nodes[1]), int(edges[1]), status[1]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (Debian: apt-get install chromium; "
                                             "scripts/system-deps.sh tries): the console is not tested in a "
                                             "browser")
def test_console_shows_the_mesh_and_follows_a_node_that_stops(meshctl, tmp_path):
    m = meshctl("four-node")
    urls, _, _ = up(m)
    console = subprocess.Popen([sys.executable, "-m", "router", "console", "-b", urls["C"], "--port", "0",
                                "--interval", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO_ROOT)
    try:
        line = console.stdout.readline()
        match = re.match(r"console: (http://\S+/) ", line)
        assert match, line + console.stderr.read()
        page = match[1]
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(page + "nothing-here", timeout=10)
        assert info.value.code == 404
        deadline = time.monotonic() + 30
        while True:
            shown = _shown(_page(page))
            if shown[:2] == (4, 6) or time.monotonic() > deadline:
                break
        assert shown[:2] == (4, 6), shown               # four-node.yaml: every pair linked
        assert "(node C)" in shown[2]
        dom = _page(page)
        for node in "ABCD":
            assert f'data-node="{node}"' in dom

        os.kill(m.pids()["D"], signal.SIGTERM)           # D stops: the page follows within seconds
        stopped = time.monotonic()
        while True:
            shown = _shown(_page(page))
            if shown[:2] == (3, 3) or time.monotonic() - stopped > 30:
                break
        assert shown[:2] == (3, 3), shown
        print(f"\nconsole: D gone from the page {time.monotonic() - stopped:.1f} s after it stopped")
        assert 'data-node="D"' not in _page(page)
    finally:
        console.terminate()
        console.wait(10)
