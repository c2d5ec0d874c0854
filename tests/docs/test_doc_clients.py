"""docs/CLIENTS.md, run for real: the one-node tour with examples/amqp_tool.py against the node of
``make run-node`` (config/node.yaml on a free port; the tool gets ``--url`` for it), each transcript
compared with what the tool prints."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.doc_commands import blocks, commands, find, matches, words
from tests.support.nodes import REPO_ROOT
from tests.support.ports import free_port

GUIDE = REPO_ROOT / "docs" / "CLIENTS.md"
TIMEOUT = 30.0


@pytest.fixture
def run_node(tmp_path):
    """`make run-node`'s node (config/node.yaml) on a free port: its URL."""
    config = yaml.safe_load((REPO_ROOT / "config" / "node.yaml").read_text())
    port = free_port()
    config["listeners"][0]["port"] = port
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([sys.executable, "-m", "router", "run", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    shown = find(GUIDE, "make run-node").output
    printed = [proc.stdout.readline(), proc.stdout.readline()]
    assert matches(shown, "".join(printed).replace(f":{port}", ":5700")) is None, printed
    yield f"amqp://127.0.0.1:{port}"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def _argv(text: str, url: str) -> list[str]:
    w = words(text)
    assert w[0] == "python" and w[1] == "examples/amqp_tool.py", text
    return [sys.executable, str(REPO_ROOT / w[1]), "--url", url, *w[2:]]


def _start(text: str, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(_argv(text, url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(text: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(text, url), capture_output=True, text=True, timeout=TIMEOUT)


def _shown_after(comment: str) -> list[str]:
    """The transcript lines the guide shows under a ``# `` comment that continues an earlier command."""
    for block in blocks(GUIDE):
        if comment in block.lines:
            rest = block.lines[block.lines.index(comment) + 1:]
            return [ln for ln in rest if ln.strip()]
    raise AssertionError(f"no {comment!r} in {GUIDE.name}")


def _served(url: str, address: str) -> None:
    """Wait until the node has a consumer for `address` (so a client started next finds credit)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        out = subprocess.run([sys.executable, "-m", "router", "stat", "-b", url, "-a", "--json"],
                             capture_output=True, text=True, timeout=TIMEOUT).stdout
        if address in out:
            return
        time.sleep(0.2)
    raise AssertionError(f"{address}: no consumer")


def _same(shown: list[str], printed: str) -> None:
    problem = matches(shown, printed)
    assert problem is None, f"{problem}\n{printed}"


def test_info_credit_and_outcomes(run_node):
    url = run_node
    info = find(GUIDE, "python examples/amqp_tool.py info")
    _same(info.output, _run(info.text, url).stdout)

    send = find(GUIDE, "python examples/amqp_tool.py send tour/queue --count 3")
    sender = _start(send.text, url)
    assert sender.stdout.readline().rstrip() == send.output[0]        # waiting for credit...
    recv = find(GUIDE, "python examples/amqp_tool.py recv tour/queue --count 3")
    _same(recv.output, _run(recv.text, url).stdout)
    rest, _ = sender.communicate(timeout=TIMEOUT)
    _same(_shown_after("# ... and terminal 2 completes"), rest)

    picky = find(GUIDE, "python examples/amqp_tool.py recv tour/picky --outcome reject")
    rejecter = _start(picky.text, url)
    _served(url, "tour/picky")
    reject = find(GUIDE, 'python examples/amqp_tool.py send tour/picky --body "take this"')
    _same(reject.output, _run(reject.text, url).stdout)
    rejecter.send_signal(signal.SIGINT)                              # "(Ctrl-C to stop it)"
    out, err = rejecter.communicate(timeout=TIMEOUT)
    assert out.splitlines()[0] == picky.output[0]
    assert picky.output[1].removeprefix("^C") in err


def test_rpc_with_a_dynamic_reply_address(run_node):
    url = run_node
    serve = find(GUIDE, "python examples/amqp_tool.py rpc-server tour/echo")
    server = _start(serve.text, url)
    _served(url, "tour/echo")
    call = find(GUIDE, 'python examples/amqp_tool.py rpc-call tour/echo "hello router" --count 3')
    _same(call.output, _run(call.text, url).stdout)
    server.send_signal(signal.SIGINT)
    out, _ = server.communicate(timeout=TIMEOUT)
    _same(serve.output, out)


def test_the_transcripts_are_checked_here() -> None:
    """Every amqp_tool command CLIENTS.md shows is one of those run above."""
    shown = {c.text for c in commands(GUIDE) if "amqp_tool.py" in c.text}
    source = Path(__file__).read_text()
    assert all(text.removeprefix("python examples/amqp_tool.py ") in source for text in shown), shown
