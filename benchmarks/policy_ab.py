#!/usr/bin/env python3
"""The forwarding path of the working tree without a policy (A) and with one (B): what authorization costs.

A policy is checked at Open and at attach; per message only for an anonymous-relay message whose sender's
group restricts `targets`. This measures that the named-link path does not change, two ways:

* ``--mode instr``: instructions per message of the measured node (benchmarks/instr_ab.py's rounds under
  callgrind, deterministic), per path, once with each config;
* ``--mode time``: ``node_bench.py --workloads throughput,rpc-conc`` alternated, A and B in turn (the order
  swapped every pair), ``--pairs`` times (medians of msg/s and node CPU µs per message; RPC replies go
  through the anonymous relay, so there B pays the per-message `targets` check).

The policy (POLICY below) is a realistic one: five groups, the benchmark's clients (anonymous) in a group
whose `sources` and `targets` are three patterns that allow the benchmark's addresses.

    .venv/bin/python benchmarks/policy_ab.py --mode instr --paths node,ingress --count 10000
    .venv/bin/python benchmarks/policy_ab.py --mode time --pairs 7

Writes benchmarks/results/<timestamp>-policy-ab-<mode>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
sys.path.insert(0, str(BENCH_DIR))

import instr_ab  # noqa: E402

ALLOWED = ["q1", "rpc", "balanced/#", "multicast/#"]
POLICY = {
    "default_group": "deny",
    "groups": {
        "bench": {"users": ["anonymous"], "remote_hosts": ["localhost"], "sources": ALLOWED,
                  "targets": ALLOWED, "max_senders": 1000, "max_receivers": 1000, "max_sessions": 100},
        "om": {"users": ["nova", "neutron", "cinder"], "sources": ["openstack.org/om/#"],
               "targets": ["openstack.org/om/#"], "management": "none"},
        "owners": {"users": ["*"], "sources": ["user/${user}/#"], "targets": ["user/#"]},
        "admins": {"users": ["admin", "CN=ops,O=example"], "management": "write"},
        "remote": {"users": ["anonymous"], "remote_hosts": ["10.0.0.0/8"], "management": "redacted"},
    },
}


def with_policy(tmp: Path, node: str, client: int, inter: int | None, dial: list[int]) -> Path:
    """instr_ab's node config plus POLICY."""
    path = PLAIN_CONFIG(tmp, node, client, inter, dial)
    data = yaml.safe_load(path.read_text())
    data["policy"] = POLICY
    path.write_text(yaml.safe_dump(data))
    return path


PLAIN_CONFIG = instr_ab.node_config


def instr(a: argparse.Namespace) -> dict:
    rows = []
    for path in a.paths.split(","):
        counts: dict[str, list[float]] = {"plain": [], "policy": []}
        for i in range(a.rounds):
            for label, config in (("plain", PLAIN_CONFIG), ("policy", with_policy)):
                instr_ab.node_config = config
                counts[label].append(instr_ab.one_round(REPO, path, a))
                print(f"{path} round {i + 1}: {label:6} {counts[label][-1]:,.0f} instructions/msg",
                      flush=True)
        lo_a, lo_b = min(counts["plain"]), min(counts["policy"])
        rows.append({"path": path, "plain": lo_a, "policy": lo_b, "ratio": lo_b / lo_a, "runs": counts})
        print(f"{path}: without {lo_a:,.0f}, with a policy {lo_b:,.0f} instructions/msg: "
              f"{lo_b / lo_a - 1:+.2%}", flush=True)
    return {"count": a.count, "rounds": a.rounds, "rows": rows}


def bench_config(tmp: Path, policy: bool) -> Path:
    data = {"node": {"id": "bench", "link_capacity": 250},
            "listeners": [{"host": "127.0.0.1", "port": 0, "role": "normal"}],
            "addresses": {"default": "balanced",
                          "rules": [{"prefix": "multicast", "distribution": "multicast"}]}}
    if policy:
        data["policy"] = POLICY
    path = tmp / ("policy.yaml" if policy else "plain.yaml")
    path.write_text(yaml.safe_dump(data))
    return path


def one_run(config: Path, label: str, workloads: str, bench_args: str = "") -> dict[str, tuple[float, float]]:
    """workload -> (msg/s or calls/s, node CPU µs per message) of one node_bench run with `config`."""
    cmd = [sys.executable, str(BENCH_DIR / "node_bench.py"), "--workloads", workloads, "--repeat", "1",
           "--no-direct", "--label", label, "--config", str(config)]
    if bench_args:
        cmd += ["--bench-args", bench_args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("Results: ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"node_bench failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    record = json.loads((REPO / line.split(" ", 1)[1].strip()).read_text())
    wanted = workloads.split(",")
    return {row["workload"]: (row["rate"], row["cpu_us_per_msg"]) for row in record["summary"]
            if row["workload"] in wanted}


def timing(a: argparse.Namespace) -> dict:
    runs: dict[str, dict[str, list[tuple[float, float]]]] = {"plain": {}, "policy": {}}
    with tempfile.TemporaryDirectory(prefix="policy-ab-") as tmpdir:
        configs = {"plain": bench_config(Path(tmpdir), False), "policy": bench_config(Path(tmpdir), True)}
        for i in range(a.pairs):
            for label in ("plain", "policy") if i % 2 == 0 else ("policy", "plain"):    # alternate the order
                for w, r in one_run(configs[label], f"policy-ab-{label}", a.workloads, a.bench_args).items():
                    runs[label].setdefault(w, []).append(r)
                    print(f"pair {i + 1} {label:6} {w}: {r[0]:,.0f}/s, {r[1]:.2f} µs/msg", flush=True)
    rows = []
    for w in a.workloads.split(","):
        med = {label: (statistics.median(r[0] for r in runs[label][w]),
                       statistics.median(r[1] for r in runs[label][w])) for label in runs}
        rows.append({"workload": w, "plain": med["plain"], "policy": med["policy"],
                     "rate_ratio": med["policy"][0] / med["plain"][0],
                     "cpu_ratio": med["policy"][1] / med["plain"][1],
                     "runs": {k: v[w] for k, v in runs.items()}})
        print(f"{w}: without {med['plain'][0]:,.0f}/s {med['plain'][1]:.2f} µs/msg; with a policy "
              f"{med['policy'][0]:,.0f}/s {med['policy'][1]:.2f} µs/msg "
              f"(rate {rows[-1]['rate_ratio']:.3f}, CPU {rows[-1]['cpu_ratio']:.3f})", flush=True)
    return {"pairs": a.pairs, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("instr", "time"), required=True)
    ap.add_argument("--paths", default="node",
                    help=f"instr: comma-separated, from {', '.join(instr_ab.PATHS)}")
    ap.add_argument("--count", type=int, default=10000, help="instr: messages measured")
    ap.add_argument("--warmup", type=int, default=2000, help="instr: messages before measuring")
    ap.add_argument("--rounds", type=int, default=1, help="instr: rounds per config (lowest kept)")
    ap.add_argument("--pairs", type=int, default=5, help="time: A/B pairs")
    ap.add_argument("--workloads", default="throughput,rpc-conc", help="time: node_bench workloads")
    ap.add_argument("--bench-args", default="", help="time: passed on to run_bench.py (node_bench)")
    a = ap.parse_args()
    if a.mode == "instr" and not instr_ab.AMQPBENCH.exists():
        raise SystemExit("build the load generator first: benchmarks/node_bench.py builds benchmarks/build/")
    result = instr(a) if a.mode == "instr" else timing(a)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-policy-ab-{a.mode}.json"
    out.write_text(json.dumps({"mode": a.mode, "policy": POLICY, **result}, indent=2))
    print(f"Results: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
