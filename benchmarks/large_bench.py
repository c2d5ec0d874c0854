#!/usr/bin/env python3
"""Large messages (issue 29): the rhea reproduction in a loop, head-of-line blocking, memory, a soak.

Every subcommand starts its own nodes on free ports (tests/support's NodeSet and ``build``, the node
processes the suite uses; topologies/four-node.yaml's edges and address rules) and stops them at the end.

    .venv/bin/python benchmarks/large_bench.py repro --runs 50            # C->B and A->B, fresh meshes
    .venv/bin/python benchmarks/large_bench.py hol --rounds 3             # RPC p50/p99 beside 100 MB
    .venv/bin/python benchmarks/large_bench.py hol --qdr                  # the same through qdrouterd
    .venv/bin/python benchmarks/large_bench.py rss --size-mb 1024         # node RSS while 1 GB crosses
    .venv/bin/python benchmarks/large_bench.py soak --minutes 10          # random sizes, both clients

* ``repro``: ../shared/repro/rhea-large-message-stall.js (a copy: tests/interop/js/stall.js) on a fresh
  four-node mesh per run, for each pair SEND:RECV; counts OK and STALL.
* ``hol``: the C load generator's rpc-client (sequential calls) on C against its rpc-server on B, first
  alone, then while its sender streams 100 MB messages from C to a receiver on B (the same pair of nodes);
  p50/p99 of the round trips in each case. Prints the medians of ``--rounds``.
* ``rss``: one ``--size-mb`` message from a python-qpid-proton sender that generates it chunk by chunk to a
  receiver that hashes it chunk by chunk, through one node and through two (one hop); the growth of each
  node's RSS over its RSS before the message, sampled every 50 ms; the SHA-256 at both ends.
* ``soak``: tests/support/mix.py's clients (python-qpid-proton and rhea) in turns through the four-node
  mesh for ``--minutes``: random sizes (log-uniform 10 B - 4 MB) and body kinds, pre-settled and unsettled,
  random sender and receiver nodes; every turn must deliver everything once and intact; at the end every
  node must hold nothing in flight.

Results: one JSON file per run in benchmarks/results/ and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for p in (REPO, REPO / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import yaml  # noqa: E402
from node_bench import ensure_client  # noqa: E402

from tests.support.meshes import build  # noqa: E402
from tests.support.nodes import NodeSet  # noqa: E402
from tests.support.state import node_state  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
HARNESS = Path("/work/shared/bench")
TOPOLOGY = REPO / "topologies" / "four-node.yaml"
JS_DIR = REPO / "tests" / "interop" / "js"
MB = 1024 * 1024


# ------------------------------------------------------------------------------------------------ nodes
def four_node_edges() -> tuple[list[str], list[tuple[str, str, int]]]:
    topo = yaml.safe_load(TOPOLOGY.read_text())
    return list(topo["nodes"]), [(e["from"], e["to"], e["cost"]) for e in topo["edges"]]


def start_mesh(tmp: Path, names: list[str] | None = None,
               edges: list[tuple[str, str, int]] | None = None) -> tuple[NodeSet, dict[str, Any]]:
    """Nodes started and converged (the four-node mesh unless `names`/`edges` say otherwise)."""
    if names is None:
        names, edges = four_node_edges()
    nodes = NodeSet(tmp)
    try:
        made = build(nodes.start, names, edges or [])
    except BaseException:
        nodes.stop_all()
        raise
    return nodes, made


def host_port(url: str) -> str:
    return url.split("://", 1)[1]


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def save(kind: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}-large-{kind}.json"
    data = {"command": " ".join(sys.argv), "when": time.strftime("%Y-%m-%d %H:%M:%S"), **data}
    path.write_text(json.dumps(data, indent=2))
    return path


# ------------------------------------------------------------------------------------------------ repro
def cmd_repro(a: argparse.Namespace) -> int:
    pairs = [tuple(p.split(":")) for p in a.pairs.split(",")]
    outcomes: dict[str, list[str]] = {f"{s}->{r}": [] for s, r in pairs}
    for i in range(a.runs):
        for send, recv in pairs:
            with tempfile.TemporaryDirectory(prefix="large-repro-") as tmp:
                nodes, made = start_mesh(Path(tmp))
                try:
                    ports = [made[n].url.rsplit(":", 1)[1] for n in (send, recv)]
                    proc = subprocess.run(["node", "stall.js", *ports], cwd=JS_DIR, capture_output=True,
                                          text=True, timeout=60)
                    line = (proc.stdout.strip().splitlines() or ["(no output) " + proc.stderr[-300:]])[-1]
                finally:
                    nodes.stop_all()
            outcomes[f"{send}->{recv}"].append(line)
            print(f"run {i + 1} {send}->{recv}: {line}", flush=True)
    rows = ["| pair | runs | OK | STALL |", "|---|---|---|---|"]
    for pair, lines in outcomes.items():
        ok = sum(ln.startswith("OK") for ln in lines)
        rows.append(f"| {pair} | {len(lines)} | {ok} | {len(lines) - ok} |")
    print("\n".join(rows))
    print("saved", save("repro", {"outcomes": outcomes}))
    return 0 if all(ln.startswith("OK") for lines in outcomes.values() for ln in lines) else 1


# ------------------------------------------------------------------------------------------------ hol
def _bench(client: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(client), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, timeout: float, what: str = "load generator") -> dict:
    """The last JSON line a client process printed (it is waited for)."""
    out, err = proc.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"{what} printed no result: {out[-500:]} {err[-500:]}")
    return json.loads(lines[-1])


def _wait_ready(proc: subprocess.Popen, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "READY" in line:
            return
        if not line and proc.poll() is not None:
            raise SystemExit(f"load generator exited: {proc.stderr.read()[-500:]}")
    raise SystemExit("load generator not ready")


def _js(*args: str) -> subprocess.Popen:
    return subprocess.Popen(["node", "big.js", *args], cwd=JS_DIR, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _js_result(proc: subprocess.Popen, timeout: float) -> dict:
    return _result(proc, timeout, "big.js")


def hol_round(client: Path, ingress: Any, send_url: str, recv_url: str, big_send_url: str, big_recv_url: str,
              calls: int, big_mb: int, big_count: int, rnd: int) -> dict:
    """RPC round trips C->B alone, then while rhea (tests/interop/js/big.js) streams `big_count`
    messages of `big_mb` MB from C to B."""
    rpc_addr, big_addr = f"hol/rpc-{rnd}", f"hol/big-{rnd}"
    server = _bench(client, "rpc-server", "--url", host_port(recv_url), "--addr", rpc_addr, "--credit", "100")
    _wait_ready(server)
    time.sleep(0.5)                                  # the address reaches C
    try:
        alone = _result(_bench(client, "rpc-client", "--url", host_port(send_url), "--addr", rpc_addr,
                               "--count", str(calls), "--warmup", "200"), 120)
        recv = _js("recv", big_recv_url, big_addr, str(big_count))
        assert "READY" in recv.stdout.readline()
        time.sleep(0.5)
        t0 = time.monotonic()
        send = _js("send", big_send_url, big_addr, str(big_mb * MB), str(big_count))
        if ingress is None:                        # qdrouterd: no streamsInProgress to wait for
            time.sleep(QDR_STREAM_START)
            streaming = time.monotonic()
        else:
            streaming = _wait_streaming(ingress, 60)   # rhea encodes a message before its first frame
        beside = _result(_bench(client, "rpc-client", "--url", host_port(send_url), "--addr", rpc_addr,
                                "--count", str(calls), "--warmup", "0"), 300)
        rpc_end = time.monotonic() - t0
        still = send.poll() is None and (ingress is None or node_state(ingress).streams > 0)
        sent = _js_result(send, 600)
        big_s = time.monotonic() - t0
        got = _js_result(recv, 120)
    finally:
        server.terminate()
        server.communicate(timeout=10)
    return {"alone": alone, "beside": beside, "big_sent": sent, "big_received": got,
            "streaming_after_s": streaming - t0, "rpc_done_after_s": rpc_end, "big_done_after_s": big_s,
            "overlapped": still}


def _wait_streaming(node: Any, timeout: float) -> float:
    """Wait until `node` streams a message (management's streamsInProgress); the time it did."""
    deadline = time.monotonic() + timeout
    while node_state(node).streams == 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"node {node.node_id} streamed nothing within {timeout} s")
        time.sleep(0.02)
    return time.monotonic()


QDR_STREAM_START = 1.5     # s after rhea's sender starts: its first 100 MB message is streaming by then
QDR_MESH4 = {n: f"amqp://127.0.0.1:{port}" for n, port in zip("ABCD", range(45701, 45705), strict=True)}


def cmd_hol(a: argparse.Namespace) -> int:
    client = ensure_client(HARNESS)
    if a.qdr:
        return _hol_report(a, [_hol_qdr(a, client, r) for r in range(a.rounds)], "qdrouterd")
    rounds = []
    with tempfile.TemporaryDirectory(prefix="large-hol-") as tmp:
        nodes, made = start_mesh(Path(tmp))
        try:
            rpc_from, rpc_to = a.rpc.split(":")
            big_from, big_to = a.big.split(":")
            for r in range(a.rounds):
                res = hol_round(client, made[big_from], made[rpc_from].url, made[rpc_to].url,
                                made[big_from].url, made[big_to].url, a.calls, a.big_mb, a.big_count, r)
                rounds.append(res)
                alone, beside = res["alone"], res["beside"]
                print(f"round {r + 1}: alone p50 {alone['p50_us']:.0f} us p99 {alone['p99_us']:.0f} us;"
                      f" beside {a.big_mb} MB: p50 {beside['p50_us']:.0f} us p99 "
                      f"{res['beside']['p99_us']:.0f} us max {res['beside']['max_us']:.0f} us; big "
                      f"{res['big_received']['received']}/{a.big_count} in {res['big_done_after_s']:.1f} s, "
                      f"overlapped={res['overlapped']}", flush=True)
        finally:
            failure = nodes.stop_all()
            if failure:
                print(failure)

    return _hol_report(a, rounds, "meshrouter")


def _hol_qdr(a: argparse.Namespace, client: Path, r: int) -> dict:
    """One round through qdrouterd's four-node mesh (/work/shared/bench/qdr: `start_mesh.sh mesh4` first)."""
    rpc_from, rpc_to = a.rpc.split(":")
    big_from, big_to = a.big.split(":")
    res = hol_round(client, None, QDR_MESH4[rpc_from], QDR_MESH4[rpc_to], QDR_MESH4[big_from],
                    QDR_MESH4[big_to], a.calls, a.big_mb, a.big_count, r)
    print(f"qdrouterd round {r + 1}: alone p99 {res['alone']['p99_us']:.0f} us; beside p99 "
          f"{res['beside']['p99_us']:.0f} us; overlapped={res['overlapped']}", flush=True)
    return res


def _hol_report(a: argparse.Namespace, rounds: list[dict], router: str) -> int:
    def med(case: str, key: str) -> float:
        return statistics.median(r[case][key] for r in rounds)
    print(f"\n| {router}: RPC {a.rpc} (sequential, {a.calls} calls) | p50 | p99 | max |\n|---|---|---|---|")
    for case, label in (("alone", "alone"), ("beside", f"beside {a.big_count} x {a.big_mb} MB {a.big}")):
        print(f"| {label} | {med(case, 'p50_us') / 1000:.2f} ms | {med(case, 'p99_us') / 1000:.2f} ms | "
              f"{med(case, 'max_us') / 1000:.2f} ms |")
    print("saved", save("hol", {"router": router, "rounds": rounds}))
    return 0


# ------------------------------------------------------------------------------------------------ rss
RSS_CLIENT = REPO / "benchmarks" / "large_client.py"


def rss_case(client: str, node_pids: list[int], send_url: str, recv_url: str, size: int, tag: str) -> dict:
    """One message of `size` bytes from a client on `send_url` to one on `recv_url`; the nodes' RSS growth."""
    addr = f"rss/{tag}"
    if client == "rhea":
        recv = _js("recv", recv_url, addr, "1")
        send_cmd, cwd = ["node", "big.js", "send", send_url, addr, str(size), "1"], JS_DIR
    else:
        script = [sys.executable, str(RSS_CLIENT)]
        recv = subprocess.Popen([*script, "recv", recv_url, addr, str(size)], stdout=subprocess.PIPE,
                                text=True)
        send_cmd, cwd = [*script, "send", send_url, addr, str(size)], REPO
    assert "READY" in recv.stdout.readline()
    time.sleep(1.0)
    base = {pid: rss_of(pid) for pid in node_pids}
    peak = dict(base)
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for pid in node_pids:
                peak[pid] = max(peak[pid], rss_of(pid))
            time.sleep(0.05)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    send = subprocess.Popen(send_cmd, cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        sent = json.loads(send.communicate(timeout=1800)[0].strip().splitlines()[-1])
        got = json.loads(recv.communicate(timeout=120)[0].strip().splitlines()[-1])
    finally:
        stop.set()
        t.join()
        for p in (send, recv):
            if p.poll() is None:
                p.kill()
    if client == "rhea":
        identical = sent.get("sha256") == got.get("sha256") and got.get("bytes") == size and not got["bad"]
    else:
        identical = sent.get("sha256") == got.get("sha256") and got.get("received") == size
    return {"sent": sent, "received": got, "identical": identical,
            "seconds": got.get("seconds", got.get("s")),
            "rss_base_mib": {str(k): v / MB for k, v in base.items()},
            "rss_growth_mib": {str(k): (peak[k] - base[k]) / MB for k in node_pids}}


def cmd_rss(a: argparse.Namespace) -> int:
    size = a.size_mb * MB
    out = {}
    with tempfile.TemporaryDirectory(prefix="large-rss-") as tmp:
        nodes, made = start_mesh(Path(tmp), ["A", "B"], [("B", "A", 1)])
        try:
            pids = [made["A"].pid, made["B"].pid]
            out["one node"] = rss_case(a.client, pids[:1], made["A"].url, made["A"].url, size, "node")
            out["one hop"] = rss_case(a.client, pids, made["B"].url, made["A"].url, size, "hop")
        finally:
            nodes.stop_all()
    print(f"\n| {a.size_mb} MB message | MB/s | byte-identical | RSS growth per node |\n|---|---|---|---|")
    for case, r in out.items():
        rate = a.size_mb / r["seconds"] if r["seconds"] else float("nan")
        growth = ", ".join(f"{v:.1f} MiB" for v in r["rss_growth_mib"].values())
        print(f"| {case} | {rate:.0f} | {r['identical']} | {growth} |")
    print("saved", save("rss", {"size_mb": a.size_mb, "cases": out}))
    return 0 if all(r["identical"] for r in out.values()) else 1


# ------------------------------------------------------------------------------------------------ soak
KINDS = ("data", "binary", "string", "map", "sequence")


def soak_messages(rng: random.Random, n: int) -> list[dict]:
    """`n` messages of log-uniform sizes 10 B - 4 MB and random body kinds."""
    lo, hi = math.log(10), math.log(4 * MB)
    return [{"kind": rng.choice(KINDS), "size": int(math.exp(rng.uniform(lo, hi)))} for _ in range(n)]


def cmd_soak(a: argparse.Namespace) -> int:
    from tests.support.mix import run_mix
    rng = random.Random(a.seed)
    turns: list[dict] = []
    totals = {"turns": 0, "messages": 0, "bytes": 0, "stalls": 0, "lost": 0, "duplicated": 0, "changed": 0,
              "not_accepted": 0}
    with tempfile.TemporaryDirectory(prefix="large-soak-") as tmp:
        nodes, made = start_mesh(Path(tmp))
        names = list(made)
        end = time.monotonic() + a.minutes * 60
        try:
            while time.monotonic() < end:
                client = ("proton", "rhea")[totals["turns"] % 2]
                presettled = rng.random() < 0.5
                send = rng.choice(names)
                recv = rng.sample(names, rng.choice((1, 1, 2)))
                prefix = "multicast" if len(recv) > 1 else "balanced"
                msgs = soak_messages(rng, a.per_turn)
                spec = {"send": made[send].url, "recv": [made[n].url for n in recv], "presettled": presettled,
                        "address": f"{prefix}/soak-{totals['turns']}", "credit": rng.choice((5, 50, 200)),
                        "messages": msgs}
                t0 = time.monotonic()
                report = run_mix(client, spec, list(made.values()), recv, timeout=a.turn_timeout)
                n = len(msgs)
                totals["turns"] += 1
                totals["messages"] += n
                totals["bytes"] += sum(m["size"] for m in msgs)
                ok = report["status"] == "OK"
                totals["stalls"] += 0 if ok else 1
                for r in report.get("receivers", []):
                    totals["lost"] += n - (r["got"] - r["duplicates"])     # distinct messages missing
                    totals["duplicated"] += r["duplicates"]
                    totals["changed"] += len(r["bad"])
                if not presettled:
                    totals["not_accepted"] += n - report["outcomes"]["accepted"]
                turns.append({"client": client, "presettled": presettled, "send": send, "recv": recv,
                              "n": n, "status": report["status"], "s": time.monotonic() - t0,
                              "outcomes": report.get("outcomes")})
                mode = "pre-settled" if presettled else "unsettled"
                print(f"turn {totals['turns']}: {client} {mode} {send}->{','.join(recv)} {n} msgs: "
                      f"{report['status']} in {time.monotonic() - t0:.1f} s", flush=True)
            time.sleep(1)
            in_flight = {n: node_state(made[n]).in_flight for n in names}
            streams = {n: node_state(made[n]).streams for n in names}
        finally:
            failure = nodes.stop_all()
    totals["in_flight_at_end"] = in_flight
    totals["streams_at_end"] = streams
    totals["node_failure"] = failure
    print("\n| minutes | turns | messages | GB | stalls | lost | duplicated | changed | unsettled not "
          "accepted | in flight at end |\n|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {a.minutes} | {totals['turns']} | {totals['messages']} | {totals['bytes'] / 1e9:.2f} | "
          f"{totals['stalls']} | {totals['lost']} | {totals['duplicated']} | {totals['changed']} | "
          f"{totals['not_accepted']} | {sum(in_flight.values())} |")
    print("saved", save("soak", {"totals": totals, "turns": turns}))
    bad = sum(totals[k] for k in ("stalls", "lost", "duplicated", "changed")) + sum(in_flight.values())
    return 0 if bad == 0 and not failure else 1


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("repro", help="the rhea reproduction on fresh four-node meshes")
    r.add_argument("--runs", type=int, default=50)
    r.add_argument("--pairs", default="C:B,A:B", help="SEND:RECV node pairs, comma-separated")
    h = sub.add_parser("hol", help="RPC round trips beside 100 MB messages on the same pair of nodes")
    h.add_argument("--rounds", type=int, default=3)
    h.add_argument("--calls", type=int, default=2000)
    h.add_argument("--big-mb", type=int, default=100)
    h.add_argument("--big-count", type=int, default=5)
    h.add_argument("--rpc", default="C:B", help="RPC client's node:server's node")
    h.add_argument("--big", default="C:B", help="large messages' sender's node:receiver's node")
    h.add_argument("--qdr", action="store_true",
                   help="through qdrouterd's mesh4 (start it: ../shared/bench/qdr/start_mesh.sh mesh4)")
    s = sub.add_parser("rss", help="node RSS while one large message crosses one node and one hop")
    s.add_argument("--size-mb", type=int, default=1024)
    s.add_argument("--client", choices=("rhea", "proton"), default="rhea",
                   help="rhea (tests/interop/js/big.js, fast; it holds the message whole itself) or "
                        "python-qpid-proton (benchmarks/large_client.py, chunk by chunk, slower)")
    k = sub.add_parser("soak", help="random sizes and settle modes through the four-node mesh")
    k.add_argument("--minutes", type=float, default=10)
    k.add_argument("--per-turn", type=int, default=60)
    k.add_argument("--turn-timeout", type=float, default=180)
    k.add_argument("--seed", type=int, default=29)
    a = ap.parse_args(argv)
    return {"repro": cmd_repro, "hol": cmd_hol, "rss": cmd_rss, "soak": cmd_soak}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
