"""The cheap commands of README.md and the guides, run for real against real nodes, print what they show.

Each test takes the command out of the guide (tests/support/doc_commands.py; the convention is in
docs/CONTRIBUTING.md), runs it as a user would from a checkout (``meshrouter`` as ``python -m router``,
the shipped topology copied to free ports: the guide's ports are mapped to those), and compares what it
printed with the lines the guide shows under it. So the newcomer's failures of issue 34 stay fixed:
``mesh up --tls`` from the checkout's default run directory, ``manage`` answering 403 without saying
which policy to add, the ``router.rpc`` snippet that timed out as written, the ``make run`` sample, the
multi-host loop that forgot ``rendered/pki``, a warning at every clean stop.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat as statmod
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.doc_commands import (
    blocks,
    commands,
    find,
    map_ports,
    matches,
    python_blocks,
    words,
    yaml_file,
)
from tests.support.meshctl import TOPOLOGIES, rewrite
from tests.support.nodes import REPO_ROOT
from tests.support.ports import free_ports

DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
TIMEOUT = 60.0


class Checkout:
    """A directory laid out as the checkout is (``topologies/four-node.yaml``, on free ports), where the
    guides' commands run with their default run directory (``.mesh/four-node``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "topologies").mkdir(parents=True, exist_ok=True)
        self.topology = rewrite(TOPOLOGIES / "four-node.yaml", root / "topologies" / "four-node.yaml",
                                fast=False)
        shipped = yaml.safe_load((TOPOLOGIES / "four-node.yaml").read_text())["nodes"]
        mine = yaml.safe_load(self.topology.read_text())["nodes"]
        self.ports = {shipped[n][k]: mine[n][k] for n in shipped
                      for k in ("client_port", "inter_router_port")}
        self.started = False

    def argv(self, text: str) -> list[str]:
        w = words(map_ports(text, self.ports))
        if Path(w[0]).name == "meshrouter":
            return [sys.executable, "-m", "router", *w[1:]]
        if Path(w[0]).name in ("python", "python3"):
            return [sys.executable, *w[1:]]
        raise AssertionError(f"not a command this test runs: {text}")

    def run(self, text: str, check: int | None = 0, **kw) -> subprocess.CompletedProcess[str]:
        if " mesh up" in text:
            self.started = True
        proc = subprocess.run(self.argv(text), cwd=kw.pop("cwd", self.root), capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL, **kw)
        if check is not None:
            assert proc.returncode == check, (f"{text}: exit {proc.returncode}\nstdout:\n{proc.stdout}\n"
                                              f"stderr:\n{proc.stderr}")
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def down(self) -> None:
        if self.started:
            subprocess.run([sys.executable, "-m", "router", "mesh", "down", "topologies/four-node.yaml"],
                           cwd=self.root, capture_output=True, timeout=TIMEOUT)
            self.started = False


def shows(sample: list[str], proc: subprocess.CompletedProcess[str]) -> None:
    """What the guide shows under a command is what it printed (on stdout, or on stderr for errors)."""
    problem = matches(sample, proc.stdout)
    if problem is not None and proc.stderr:
        problem = matches(sample, proc.stderr) and problem
    assert problem is None, f"{problem}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def shown_with_output(path: Path, text: str):
    """The first time `path` shows the command `text` with output under it."""
    return next(c for c in commands(path) if c.text == text and c.output and c.output != ["..."])


@pytest.fixture
def checkout(tmp_path):
    c = Checkout(tmp_path / "checkout")
    yield c
    c.down()


def stopped_quietly(log: str) -> None:
    """A clean stop: the node says so, and its management agent warns about nothing (connectors dialling
    a peer that is not up yet may warn at start)."""
    assert "stopped" in log, log
    warned = [ln for ln in log.splitlines() if " WARNING router.management" in ln]
    assert not warned, warned


def _no_warnings(run_dir: Path) -> None:
    for log in run_dir.glob("*.stderr"):
        stopped_quietly(log.read_text(errors="replace"))


# ---------------------------------------------------------------------------------------- the mesh


def test_mesh_up_tls_from_the_checkout_then_status_and_down(checkout):
    """Issue 34 (1): ``mesh up --tls`` with the default run directory failed at once (cert paths written
    relative to the working directory, read relative to the config's folder)."""
    mesh = DOCS / "MESH.md"
    up = find(mesh, ".venv/bin/meshrouter mesh up --tls topologies/four-node.yaml")
    shows(up.output, checkout.run(up.text))
    a = yaml.safe_load((checkout.root / ".mesh" / "four-node" / "A.yaml").read_text())
    tls = next(lc["tls"] for lc in a["listeners"] if lc["role"] == "inter-router")
    assert all(Path(tls[k]).is_absolute() and Path(tls[k]).is_file() for k in ("cert", "key", "ca"))
    conns = json.loads(checkout.run(f"meshrouter stat -b amqp://127.0.0.1:{checkout.ports[5701]} -c --json")
                       .stdout)["A"]
    peers = [c for c in conns if c["role"] == "inter-router"]
    assert len(peers) == 3 and all(c["security"].startswith("TLS") and c["saslMechanism"] == "EXTERNAL"
                                   for c in peers), peers
    status = find(mesh, ".venv/bin/meshrouter mesh status topologies/four-node.yaml")
    shows(status.output, checkout.run(status.text))
    down = shown_with_output(mesh, ".venv/bin/meshrouter mesh down topologies/four-node.yaml")
    shows(down.output, checkout.run(down.text))
    checkout.started = False
    _no_warnings(checkout.root / ".mesh" / "four-node")
    # `tls: true` in the topology goes the same way (the other form of the failure)
    with checkout.topology.open("a") as f:
        f.write("tls: true\n")
    up = find(mesh, ".venv/bin/meshrouter mesh up topologies/four-node.yaml")
    shows(up.output, checkout.run(up.text))
    assert (checkout.root / ".mesh" / "four-node" / "pki" / "A.pem").is_file()


def test_make_run_prints_what_the_readme_shows(checkout):
    """Issue 34 (6): the README's ``make run`` sample said 'echo: hello 0' where the demo prints 'hello 0'."""
    recipe = re.search(r"^run:.*\n\t(.+)$", (REPO_ROOT / "Makefile").read_text(), re.M).group(1)
    command = recipe.replace("$(VENV)/bin/meshrouter", "meshrouter")
    sample = shown_with_output(README, "make run").output
    proc = subprocess.Popen(checkout.argv(command), cwd=checkout.root, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    checkout.started = True
    lines = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("mesh running"):
                break
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=TIMEOUT)
    checkout.started = False
    problem = matches(sample, "".join(lines))
    assert problem is None, f"{problem}\n{''.join(lines)}{rest}"
    assert proc.returncode == 0 and "mesh four-node: down" in rest


def test_two_nodes_joined_by_hand(tmp_path):
    """docs/MESH.md, "Connect two nodes by hand": the two files, check-config, run, stat; a clean stop
    logs no warning (issue 34 (6): 'management: the reply link was closed (None)' at every stop)."""
    mesh = DOCS / "MESH.md"
    ports = dict(zip((5711, 5811, 5712), free_ports(3), strict=True))
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(map_ports(yaml_file(mesh, name), ports))
    check = find(mesh, ".venv/bin/meshrouter check-config a.yaml")
    def run(text: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "router", *words(map_ports(text, ports))[1:]],
                              cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)

    shows(check.output, run(check.text))
    nodes = []
    try:
        for name in ("a.yaml", "b.yaml"):
            text = find(mesh, f".venv/bin/meshrouter run {name}").text
            err = open(tmp_path / f"{name}.stderr", "w")  # noqa: SIM115 (closed with the node)
            nodes.append((subprocess.Popen([sys.executable, "-m", "router", *words(text)[1:]], cwd=tmp_path,
                                           stdout=subprocess.DEVNULL, stderr=err), err))
        stat = find(mesh, ".venv/bin/meshrouter stat -b amqp://127.0.0.1:5712 -n")
        deadline, problem = time.monotonic() + 20, "not tried"
        while problem is not None and time.monotonic() < deadline:
            proc = run(stat.text)
            problem = matches(stat.output, proc.stdout) if proc.returncode == 0 else proc.stderr
            time.sleep(0.2)
        assert problem is None, problem
    finally:
        for node, err in nodes:
            node.send_signal(signal.SIGTERM)
            assert node.wait(15) == 0
            err.close()
    for name in ("a.yaml", "b.yaml"):
        stopped_quietly((tmp_path / f"{name}.stderr").read_text())


# ------------------------------------------------------------------------------- the README's tour


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The mesh of the README's tour, up once for the tests below (``mesh up`` as docs/MESH.md shows it)."""
    c = Checkout(tmp_path_factory.mktemp("demo"))
    up = find(DOCS / "MESH.md", ".venv/bin/meshrouter mesh up topologies/four-node.yaml")
    shows(up.output, c.run(up.text))
    yield c
    c.down()


def test_the_tour_stat(demo):
    stat = find(README, ".venv/bin/meshrouter stat -b amqp://127.0.0.1:5703 -n")
    shows(stat.output, demo.run(stat.text))
    for prefix in ("-g", "-r A -a", "--all-nodes -l --json"):
        command = find(DOCS / "OPERATIONS.md", f".venv/bin/meshrouter stat -b amqp://127.0.0.1:5703 {prefix}")
        demo.run(command.text)


def test_the_rpc_snippet_runs_as_written(demo):
    """Issue 34 (4): the snippet raised RpcTimeout as written (a fanout nobody subscribed to)."""
    (snippet,) = python_blocks(README)
    assert [b.text for b in python_blocks(DOCS / "RPC.md")] == [snippet.text], "README and RPC.md differ"
    printed = next(b for b in blocks(DOCS / "RPC.md") if b.lang == "text").lines
    proc = subprocess.run([sys.executable, "-c", map_ports(snippet.text, demo.ports)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == list(printed)


def test_the_topology_picture(demo):
    graph = find(README, ".venv/bin/meshrouter mesh graph topologies/four-node.yaml")
    demo.run(graph.text)
    assert (demo.root / "mesh-graph.png").stat().st_size > 0
    assert (demo.root / "mesh-graph.svg").exists()


def test_the_console_shows_the_four_nodes(demo):
    console = find(README, ".venv/bin/meshrouter console -b amqp://127.0.0.1:5703 --port 8080")
    (page,) = free_ports(1)
    demo.ports[8080] = page
    proc = subprocess.Popen(demo.argv(console.text), cwd=demo.root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline, nodes = time.monotonic() + 60, []
        while len(nodes) < 4 and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{page}/api/state", timeout=5) as r:
                    nodes = json.loads(r.read()).get("nodes", [])
            except OSError:
                continue
        assert len(nodes) == 4, nodes
    finally:
        proc.terminate()
        proc.wait(15)


def test_manage_says_which_policy_to_add_and_the_examples_work_with_it(checkout):
    """Issue 34 (2): on the demo mesh every write answered 403 without naming the fix."""
    security, operations = DOCS / "SECURITY.md", DOCS / "OPERATIONS.md"
    checkout.run(find(DOCS / "MESH.md", ".venv/bin/meshrouter mesh up topologies/four-node.yaml").text)
    create_rule = find(security, ".venv/bin/meshrouter manage -b amqp://127.0.0.1:5703 create --type "
                                 "address-rule")
    refused = checkout.run(create_rule.text, check=1)
    assert "403 CREATE needs management write access and this connection has 'read'" in refused.stderr
    suggested = yaml.safe_load(re.search(r"e\.g\. `(policy: .*?)`", refused.stderr).group(1))
    shown = next(yaml.safe_load(b.text) for b in blocks(security)
                 if b.lang == "yaml" and b.lines[0].startswith("policy:"))
    assert suggested == shown, "the 403 and docs/SECURITY.md suggest different policies"

    policy = next(b.text for b in blocks(security) if b.lang == "yaml" and b.lines[0].startswith("policy:"))
    with checkout.topology.open("a") as f:       # "a policy: section in the topology"
        f.write(policy)
    for text in (".venv/bin/meshrouter mesh down topologies/four-node.yaml",
                 ".venv/bin/meshrouter mesh up topologies/four-node.yaml"):
        checkout.run(text)
    shows(create_rule.output, checkout.run(create_rule.text))
    checkout.ports[5680] = free_ports(1)[0]
    for verb in ("create --type listener", "update --type listener", "delete --type listener",
                 "query --type policy-group"):
        command = find(operations, f".venv/bin/meshrouter manage -b amqp://127.0.0.1:5703 {verb}")
        shows(command.output, checkout.run(command.text))


# ---------------------------------------------------------------------------------------- configs


def test_check_config_examples(tmp_path):
    guide = DOCS / "CONFIGURATION.md"
    good = find(guide, ".venv/bin/meshrouter check-config config/node.yaml")
    proc = subprocess.run([sys.executable, "-m", "router", *words(good.text)[1:]], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)
    shows(good.output, proc)
    (tmp_path / "bad.yaml").write_text("node: {id: A}\nlisteners:\n  - {host: 127.0.0.1, port: 5700}\n"
                                       "  - {host: 127.0.0.1, port: 5700}\n")
    bad = find(guide, ".venv/bin/meshrouter check-config bad.yaml")
    proc = subprocess.run([sys.executable, "-m", "router", *words(bad.text)[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT)
    shows(bad.output, proc)
    assert proc.returncode == int(find(guide, "echo $?").output[0])


# ----------------------------------------------------------------------------------- deployment


FAKE_REMOTE = r"""
ROOT="$PWD/hosts"
ssh() { local host=$1; shift; echo "$*" >> "$ROOT/$host.ssh"
        if [ "$1" = mkdir ]; then mkdir -p "$ROOT/$host${@: -1}"; fi; }
scp() { local files=() opts=()
        for a in "$@"; do case "$a" in -*) opts+=("$a");; *) files+=("$a");; esac; done
        local dest=${files[-1]}; unset 'files[-1]'; local host=${dest%%:*} path=${dest#*:}
        mkdir -p "$ROOT/$host$path"; cp "${opts[@]}" "${files[@]}" "$ROOT/$host$path"; }
mkdir -p "$ROOT"
"""


def test_mesh_render_and_the_copy_loop_give_each_host_what_its_config_names(tmp_path):
    """Issue 34 (6): the loop of "Deploy a mesh on several machines" copied configs and units, not
    rendered/pki/. Here scp and ssh copy into hosts/<host>/ and log; each host must then hold every file
    its config names, its unit, and its own key (mode 0600), and not the CA's key."""
    guide = DOCS / "OPERATIONS.md"
    (tmp_path / "prod.yaml").write_text(yaml_file(guide, "prod.yaml"))
    render = find(guide, ".venv/bin/meshrouter mesh render prod.yaml")
    proc = subprocess.run([sys.executable, "-m", "router", *words(render.text)[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT)
    shows(render.output, proc)
    loop = find(guide, "for h in A B C D")
    proc = subprocess.run(["bash", "-c", FAKE_REMOTE + loop.text], cwd=tmp_path, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    for node in "ABCD":
        host = tmp_path / "hosts" / f"{node.lower()}.mesh.example"
        config = yaml.safe_load((host / "etc" / "meshrouter" / f"{node}.yaml").read_text())
        named = [v for section in (config["listeners"], config.get("connectors", []))
                 for entry in section for k, v in entry.get("tls", {}).items() if k in ("cert", "key", "ca")]
        assert named, f"{node}: no TLS files named (rendered without --tls?)"
        for path in named:
            assert (host / path.lstrip("/")).is_file(), f"{node}: {path} named by its config, not copied"
        assert statmod.S_IMODE(os.stat(host / f"etc/meshrouter/pki/{node}.key").st_mode) == 0o600
        assert not (host / "etc/meshrouter/pki/ca.key").exists()
        assert (host / f"etc/systemd/system/meshrouter-{node}.service").is_file()
        ssh_log = (tmp_path / "hosts" / f"{host.name}.ssh").read_text()
        assert f"systemctl enable --now meshrouter-{node}" in ssh_log


def test_reload_prints_what_the_guide_shows(tmp_path):
    """docs/OPERATIONS.md, "Change a running node": the node of config/node.yaml, edited as the sample's
    lines say (a listener added on 5673, one address rule changed, link_capacity changed), then reloaded."""
    command = find(DOCS / "OPERATIONS.md", "meshrouter reload /etc/meshrouter/A.yaml")
    client, added = free_ports(2)
    config = yaml.safe_load((REPO_ROOT / "config" / "node.yaml").read_text())
    config["listeners"][0]["port"] = client
    path = tmp_path / "A.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    node = subprocess.Popen([sys.executable, "-m", "router", "run", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        while not node.stdout.readline().startswith("ready:"):
            assert node.poll() is None, "the node did not start"
        config["listeners"].append({"host": "0.0.0.0", "port": added})
        config["addresses"]["rules"][-1]["prefix"] = "fanout"
        config["node"]["link_capacity"] = 2 * config["node"]["link_capacity"]
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        text = map_ports(command.text.replace("/etc/meshrouter/A.yaml", str(path)), {5673: added})
        proc = subprocess.run([sys.executable, "-m", "router", *words(text)[1:]], capture_output=True,
                              text=True, timeout=TIMEOUT)
        shows(command.output, proc)
    finally:
        node.send_signal(signal.SIGTERM)
        assert node.wait(15) == 0
