#!/usr/bin/env python3
"""Record the exact management requests qdrouterd's own qdstat and qdmanage send, for the tests to replay.

Usage (the tools built by ../shared/bench/qdr/build_qdrouterd.sh; they run on this project's
python-qpid-proton; a node or mesh with node ids A-D and a policy granting ``management: write`` must
listen on URL; the recorded commands create and delete a listener, a connector, an address and a vhost)::

    . /tmp/anchors/qdr/qdr_env.sh
    .venv/bin/python scripts/record_qdr_tools.py --bin /tmp/anchors/qdr/bin --bus 127.0.0.1:5701 \\
        --free-port 47731 --peer-port 5804 --out tests/management/data/qdr_tool_requests.json

Each command runs with ``PN_TRACE_FRM=1`` through a TCP relay that keeps the bytes the tool sends. The
frame trace gives the link each request went on (its target: ``$management`` or
``_topo/0/<node>/$management``) and the start of its payload; the relay's bytes give the whole payload
(the trace cuts long frames), and every payload must begin with what the trace shows. The output has, per
command, its arguments, its exit status and its requests: the target, the encoded message (base64) and, to
read, its application properties and body as JSON (``--outputs`` keeps what the commands printed).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from proton import Data, Message

TRANSFER, ATTACH = 0x14, 0x12
_ATTACH = re.compile(r"-> @attach\(18\) \[name=\"[^\"]*\", handle=(0x[0-9a-f]+), role=false.*?target=@target"
                     r"\(41\) \[address=\"([^\"]*)\"")
_TRANSFER = re.compile(r"-> @transfer\(20\) \[handle=(0x[0-9a-f]+)[^\]]*\] \((\d+)\) (.*)$")


def commands(port: int, peer: int) -> list[list[str]]:
    """The recorded commands (tool, then its arguments without -b)."""
    out = [["qdstat", v] for v in ("-g", "-c", "-l", "-a", "-n", "-m", "--autolinks", "--linkroutes",
                                   "--policy", "--vhosts", "--vhostgroups", "--vhoststats", "--edge",
                                   "--all-entities")]
    out += [["qdstat", "-r", "C", v] for v in ("-g", "-c", "-l", "-a", "-n")]
    out += [["qdstat", "--all-routers", v] for v in ("-g", "-n", "-a")]
    reads = ("get-types", "get-attributes", "get-attributes --type listener", "get-operations",
             "get-operations --type vhost", "get-annotations", "get-mgmt-nodes", "get-schema",
             "query --type router",
             "query --type listener", "query --type router.link",
             "query --type address name prefix distribution", "query --type vhost",
             "-r B query --type router")
    writes = (f"create --type listener --name l1 host=127.0.0.1 port={port}",
              "read --type listener --name l1",
              "update --type listener --name l1 maxFrameSize=65536", "delete --type listener --name l1",
              f"create --type connector host=127.0.0.1 port={peer} role=inter-router",
              f"read --type connector --name connector/127.0.0.1:{peer}",
              f"delete --type connector --name connector/127.0.0.1:{peer}",
              "create --type address prefix=fan distribution=multicast",
              "read --type address --name address/fan",
              "update --type address --name address/fan distribution=closest",
              "delete --type address --name address/fan", "create --type vhost --stdin",
              "read --type vhost --name vhost/example.com",
              "update --type vhost --name vhost/example.com allowUnknownUser=false",
              "delete --type vhost --identity vhost/example.com")
    out += [["qdmanage", *a.split()] for a in (*reads, *writes)]
    return out


VHOST = {"hostname": "example.com", "allowUnknownUser": True,
         "groups": {"$default": {"remoteHosts": "*", "sources": "*", "targets": "*",
                                 "allowDynamicSource": True, "allowAnonymousSender": True},
                    "admins": {"users": "alice, bob", "remoteHosts": "127.0.0.1", "maxSenders": 10,
                               "sourcePattern": "admin/#", "targetPattern": "admin/#"}}}


class Relay:
    """A one-connection TCP relay to `target` that keeps what the client sends."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target = target
        self.sent = bytearray()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        client, _ = self.server.accept()
        upstream = socket.create_connection(self.target)
        back = threading.Thread(target=self._pipe, args=(upstream, client, None), daemon=True)
        back.start()
        self._pipe(client, upstream, self.sent)
        back.join(5)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, keep: bytearray | None) -> None:
        try:
            while chunk := src.recv(65536):
                if keep is not None:
                    keep.extend(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> bytes:
        self.thread.join(10)
        self.server.close()
        return bytes(self.sent)


def transfers(stream: bytes) -> list[bytes]:
    """The payloads of the transfer frames in a client's byte stream (after the AMQP protocol header)."""
    if not stream.startswith(b"AMQP"):
        raise ValueError("the client did not start with the AMQP protocol header (SASL is not recorded)")
    pos, out = 8, []
    while pos + 8 <= len(stream):
        size, doff, _ = struct.unpack(">IBB", stream[pos:pos + 6])
        body = stream[pos + doff * 4:pos + size]
        pos += size
        if not body:
            continue                                   # an empty (heartbeat) frame
        data = Data()
        used = data.decode(body)
        data.rewind()
        data.next()
        data.enter()
        data.next()
        if data.get_object() == TRANSFER:
            out.append(body[used:])
    return out


def unquote(text: str) -> bytes:
    """The bytes of Proton's quoted payload text (``\\xHH`` escapes)."""
    out, i = bytearray(), 0
    while i < len(text):
        if text.startswith("\\x", i):
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            out.extend(text[i].encode())
            i += 1
    return bytes(out)


def record(tool: Path, args: list[str], bus: tuple[str, int], stdin: str | None) -> dict[str, Any]:
    relay = Relay(bus)
    env = {**os.environ, "PN_TRACE_FRM": "1"}
    proc = subprocess.run([sys.executable, str(tool), "-b", f"127.0.0.1:{relay.port}", *args], env=env,
                          input=stdin, capture_output=True, text=True, timeout=60)
    payloads = transfers(relay.close())
    trace = proc.stdout + proc.stderr
    targets: dict[str, str] = {}
    traced = []
    for line in trace.splitlines():
        if m := _ATTACH.search(line):
            targets[m[1]] = m[2]
        elif m := _TRANSFER.search(line):
            traced.append((targets[m[1]], int(m[2]), m[3].removesuffix(" ... (truncated)")))
    if len(traced) != len(payloads):
        raise SystemExit(f"{args}: {len(traced)} traced transfers, {len(payloads)} on the wire")
    requests = []
    for (target, size, quoted), payload in zip(traced, payloads, strict=True):
        if len(payload) != size or not payload.startswith(unquote(quoted)):
            raise SystemExit(f"{args}: a payload differs from its trace")
        m = Message()
        m.decode(payload)
        requests.append({"to": target, "message": base64.b64encode(payload).decode(),
                         "properties": dict(m.properties or {}), "body": m.body})
    return {"tool": tool.name, "args": args, "exit": proc.returncode, "requests": requests,
            "output": [line for line in proc.stdout.splitlines() if "FRAME:" not in line]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", type=Path, required=True, help="directory holding qdstat and qdmanage")
    p.add_argument("--bus", default="127.0.0.1:5701", help="HOST:PORT of node A")
    p.add_argument("--free-port", type=int, required=True, help="a free port for the created listener")
    p.add_argument("--peer-port", type=int, required=True, help="an inter-router port for the connector")
    p.add_argument("--reference", metavar="HOST:PORT",
                   help="also record the one-node reading commands against this qdrouterd")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--outputs", type=Path, help="also write what each command printed to this file")
    a = p.parse_args()
    recorded = _run(a.bin, commands(a.free_port, a.peer_port), a.bus)
    reference = []
    if a.reference:
        reading = [c for c in commands(a.free_port, a.peer_port) if "-r" not in c and "--all-routers" not in c
                   and c[1] not in ("create", "read", "update", "delete")]
        reference = _run(a.bin, reading, a.reference)
    if a.outputs:
        a.outputs.write_text("".join(f"$ {c['tool']} {' '.join(c['args'])}  (exit {c['exit']})\n" +
                                     "".join(line + "\n" for line in c["output"]) + "\n"
                                     for c in recorded + reference))
    for c in recorded + reference:
        del c["output"]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"tools": "qdstat and qdmanage 1.19.0", "free_port": a.free_port,
                                 "peer_port": a.peer_port, "commands": recorded,
                                 "qdrouterd_commands": reference}, indent=1) + "\n")
    return 0


def _run(bin_dir: Path, cmds: list[list[str]], bus: str) -> list[dict[str, Any]]:
    host, _, port = bus.rpartition(":")
    out = []
    for cmd in cmds:
        stdin = json.dumps(VHOST) if "--stdin" in cmd else None
        out.append(record(bin_dir / cmd[0], cmd[1:], (host, int(port)), stdin))
        print(f"{bus} {' '.join(cmd)}: {len(out[-1]['requests'])} request(s), exit {out[-1]['exit']}",
              file=sys.stderr)
    return out


if __name__ == "__main__":
    sys.exit(main())
