#!/usr/bin/env python3
"""`make bench`: the headline benchmarks in a few minutes, and the tables BENCHMARKS.md holds.

Runs each scenario script with short settings, one after the other (never two at once: they share the
cores), and prints, per question, its tables with the exact command, the date, the machine and the load
average before and after:

  node         one node, the C load generator against the node and client-to-client (node_bench.py)
  mesh         a chain of three and the four-node full mesh (mesh_bench.py chain,four-node)
  rpc          router.rpc calls through one node and across the mesh (rpc_bench.py)
  control      the control plane at scale: an address storm, many connections (scale_bench.py)
  startup      a node's start-up (startup_bench.py) and the four-node mesh's convergence (mesh_bench.py)
  qdrouterd    meshrouter and qdrouterd on the same paths, alternated (qdr_compare.py); only when qdrouterd
               is built (/work/shared/bench/qdr/build_qdrouterd.sh; else the section says how to build it)

    .venv/bin/python benchmarks/headline.py                  # everything (= make bench)
    .venv/bin/python benchmarks/headline.py --only node,rpc  # some of it
    .venv/bin/python benchmarks/headline.py --list           # the commands, without running them

Each scenario's output goes to benchmarks/results/<stamp>-headline-<name>.log and its own JSON result
file; benchmarks/results/<stamp>-headline.json holds every section (command, date, machine, load, tables).
Exit status 1 if a scenario failed (the others still run). For figures to quote, run the scenario itself
with its default (longer) settings: these are short runs on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.paths import BENCH_DIR, QDR_PREFIX, REPO, RESULTS_DIR, qdrouterd  # noqa: E402
from harness.report import host_info, machine, save_result, stamp  # noqa: E402
from harness.sample import load_average  # noqa: E402


@dataclass
class Section:
    """One question of BENCHMARKS.md: a heading and the scenario commands that answer it."""

    name: str
    heading: str
    commands: list[list[str]]
    needs_qdrouterd: bool = False
    results: list[dict] = field(default_factory=list)


SECTIONS = [
    Section("node", "One node", [
        ["node_bench.py", "--workloads", "throughput,throughput-presettled,rpc,rpc-conc", "--repeat", "1",
         "--label", "headline", "--bench-args", "--count 50000 --rpc-count 2000"]]),
    Section("mesh", "Chain and mesh", [
        ["mesh_bench.py", "--scenarios", "chain,four-node", "--repeat", "1", "--count", "50000",
         "--rpc-count", "2000", "--label", "headline-mesh"]]),
    Section("rpc", "RPC (router.rpc)", [
        ["rpc_bench.py", "--repeat", "1", "--calls", "1000", "--warmup", "100"]]),
    Section("control", "Control plane at scale", [
        ["scale_bench.py", "--addresses", "5000", "--connections", "2000", "--round-connections", "1000",
         "--label", "headline"]]),
    Section("startup", "Start-up and convergence", [
        ["startup_bench.py", "--runs", "5"],
        ["mesh_bench.py", "--scenarios", "convergence", "--repeat", "3", "--label", "headline-convergence"]]),
    Section("qdrouterd", "Against qdrouterd", [
        ["qdr_compare.py", "--rounds", "1", "--count", "50000"]], needs_qdrouterd=True),
]


NO_QDR = ("qdrouterd is not built (no {prefix}/sbin/qdrouterd): build it with `JOBS=1 nice -n 10 "
          "/work/shared/bench/qdr/build_qdrouterd.sh /tmp/anchors/qdr-src` (see its header), then run "
          "`make bench` again.")


def tables(output: str) -> list[str]:
    """The Markdown tables a scenario printed (blocks of consecutive lines starting with '|')."""
    blocks: list[list[str]] = []
    previous = False
    for line in output.splitlines():
        is_row = line.startswith("|")
        if is_row and not previous:
            blocks.append([])
        if is_row:
            blocks[-1].append(line)
        previous = is_row
    return ["\n".join(b) for b in blocks if len(b) >= 2]


def shown(cmd: list[str]) -> str:
    """The command as a reader would type it from the checkout."""
    return " ".join([".venv/bin/python", f"benchmarks/{cmd[0]}",
                     *(f"'{c}'" if " " in c else c for c in cmd[1:])])


def run(cmd: list[str], log: Path) -> dict:
    """One scenario, its output echoed into ``log``; its command, date, load, exit status and tables."""
    load_before = load_average()[0]
    t0 = time.monotonic()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"$ {shown(cmd)}", flush=True)
    lines: list[str] = []
    with open(log, "a", encoding="utf-8") as f:          # written as it runs: `tail -f` it
        f.write(f"$ {shown(cmd)}\n")
        f.flush()
        proc = subprocess.Popen([sys.executable, str(BENCH_DIR / cmd[0]), *cmd[1:]], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            f.write(line)
            f.flush()
        proc.wait()
    output = "".join(lines)
    took = time.monotonic() - t0
    found = tables(output)
    print(f"  exit {proc.returncode} after {took:.0f} s, {len(found)} table(s); "
          f"output in {log.relative_to(REPO)}", flush=True)
    result = {"command": shown(cmd), "date": date, "machine": machine(load=False), "seconds": round(took, 1),
              "load": [round(load_before, 2), round(load_average()[0], 2)], "exit": proc.returncode,
              "tables": found}
    if proc.returncode != 0:
        result["tail"] = output.splitlines()[-15:]
    return result


def markdown(section: Section) -> str:
    """The section as BENCHMARKS.md shows it: heading, then per command its line and its tables."""
    out = [f"## {section.heading}", ""]
    for r in section.results:
        if "skipped" in r:
            out += [r["skipped"], ""]
            continue
        load = f"load {r['load'][0]:.1f} → {r['load'][1]:.1f}"
        out += [f"`{r['command']}` — {r['date']}, {r['machine']} ({load})", ""]
        if r["exit"] != 0:
            out += [f"**failed** (exit {r['exit']}):", "", "```", *r["tail"], "```", ""]
        out += [t + "\n" for t in r["tables"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated section names: " + ",".join(s.name for s in SECTIONS))
    ap.add_argument("--list", action="store_true", help="print the commands and exit")
    a = ap.parse_args(argv)
    chosen = SECTIONS
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = sorted(set(names) - {s.name for s in SECTIONS})
        if unknown:
            ap.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(s.name for s in SECTIONS)}")
        chosen = [s for s in SECTIONS if s.name in names]
    if a.list:
        for s in chosen:
            for cmd in s.commands:
                print(f"{s.name:10s} {shown(cmd)}")
        return 0
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    run_stamp = stamp()
    print(f"headline benchmarks on {machine()}; git {host_info()['git_rev']}", flush=True)
    for s in chosen:
        if s.needs_qdrouterd and qdrouterd() is None:
            s.results.append({"skipped": NO_QDR.format(prefix=QDR_PREFIX)})
            print(f"[{s.name}] skipped: qdrouterd is not built", flush=True)
            continue
        print(f"[{s.name}] {s.heading}", flush=True)
        log = RESULTS_DIR / f"{run_stamp}-headline-{s.name}.log"
        s.results += [run(cmd, log) for cmd in s.commands]
    report = "\n".join(markdown(s) for s in chosen)
    print("\n" + report)
    path = save_result("headline", {"sections": {s.name: {"heading": s.heading, "results": s.results}
                                                 for s in chosen}, "markdown": report})
    print(f"Results: {os.path.relpath(path, REPO)}")
    failed = [s.name for s in chosen for r in s.results if r.get("exit", 0) != 0]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
