#!/usr/bin/env python3
"""`make bench`: the headline benchmarks in a few minutes, printed as the tables BENCHMARKS.md holds.

Runs each scenario script with short settings, one after the other (never two at once: they share the
cores), reads the JSON result each one writes, and prints BENCHMARKS.md's tables (harness.tables): the same
title, columns and row labels, each row with the command that produced it, the date and time window, the
machine label and the load average, and the ratio only where a peer ran in the same window.

  node         one node, the C load generator (node_bench.py)            -> "One node, a chain, a mesh"
  mesh         a chain of three and the four-node full mesh (mesh_bench.py chain,four-node)    -> the same
  rpc          router.rpc calls through one node and across the mesh (rpc_bench.py)             -> "RPC"
  control      the control plane at scale: an address storm, many connections (scale_bench.py)
               -> "Control plane at scale" (smaller than BENCHMARKS.md's run: its labels say how much)
  startup      a node's start-up (startup_bench.py) and the four-node mesh's convergence (mesh_bench.py)
               -> "Start-up"
  qdrouterd    meshrouter and qdrouterd on the same paths, alternated (qdr_compare.py): its rows, with the
               ratio, replace the first table's; only when qdrouterd is built
               (/work/shared/bench/qdr/build_qdrouterd.sh; else the output says how to build it)

    .venv/bin/python benchmarks/headline.py                  # everything (= make bench)
    .venv/bin/python benchmarks/headline.py --only node,rpc  # some of it
    .venv/bin/python benchmarks/headline.py --list           # the commands, without running them
    BENCH_MACHINE=M7 make bench                              # the machine label of the rows

The machine label is --machine, else $BENCH_MACHINE, else this host's CPU; the output says which. Each
scenario's output goes to benchmarks/results/<stamp>-headline-<name>.log and its own JSON result file;
benchmarks/results/<stamp>-headline.json holds every run (command, window, load, result file) and the
tables. Exit status 1 if a scenario failed (the others still run). For figures to quote, run the scenario
itself with its default (longer) settings: these are short runs on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.paths import BENCH_DIR, QDR_PREFIX, REPO, RESULTS_DIR, qdrouterd  # noqa: E402
from harness.report import host_info, machine, save_result, stamp  # noqa: E402
from harness.sample import load_average  # noqa: E402
from harness.tables import Run, report  # noqa: E402


@dataclass
class Section:
    """A set of scenario commands; their rows go to the BENCHMARKS.md tables named in the docstring."""

    name: str
    heading: str
    commands: list[list[str]]
    needs_qdrouterd: bool = False
    runs: list[Run] = field(default_factory=list)


SECTIONS = [
    Section("node", "One node", [
        ["node_bench.py", "--workloads", "throughput,rpc-conc", "--repeat", "1", "--no-direct",
         "--label", "headline", "--bench-args", "--count 50000 --rpc-conc-count 5000"]]),
    Section("mesh", "Chain and mesh", [
        ["mesh_bench.py", "--scenarios", "chain,four-node", "--repeat", "1", "--count", "50000",
         "--four-node-workloads", "throughput,throughput-presettled", "--label", "headline-mesh"]]),
    Section("rpc", "RPC (router.rpc)", [
        ["rpc_bench.py", "--repeat", "1", "--calls", "1000", "--warmup", "100"]]),
    Section("control", "Control plane at scale", [
        ["scale_bench.py", "--addresses", "5000", "--connections", "2000", "--round-connections", "1000",
         "--canary-via-a", "--label", "headline"]]),
    Section("startup", "Start-up and convergence", [
        ["startup_bench.py", "--runs", "5"],
        ["mesh_bench.py", "--scenarios", "convergence", "--repeat", "3", "--label", "headline-convergence"]]),
    Section("qdrouterd", "Against qdrouterd", [
        ["qdr_compare.py", "--rounds", "1", "--count", "50000"]], needs_qdrouterd=True),
]


NO_QDR = ("qdrouterd is not built (no {prefix}/sbin/qdrouterd): the first table has no qdrouterd column "
          "figures. Build it with `JOBS=1 nice -n 10 /work/shared/bench/qdr/build_qdrouterd.sh "
          "/tmp/anchors/qdr-src` (see its header), then run `make bench` again.")
#: the line in which a scenario names the JSON it wrote (every one of them prints it)
RESULT_FILE = re.compile(r"(benchmarks/results/\S+?\.json)")


def shown(cmd: list[str]) -> str:
    """The command as BENCHMARKS.md's rows show it (the script in benchmarks/, then its arguments)."""
    return " ".join([cmd[0], *(f"'{c}'" if " " in c else c for c in cmd[1:])])


def result_of(output: str) -> dict | None:
    """The JSON result a scenario wrote, from the last results path its output names."""
    found = RESULT_FILE.findall(output)
    if not found:
        return None
    path = REPO / found[-1]
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run(cmd: list[str], log: Path) -> Run:
    """One scenario, its output echoed into ``log``: its command, window, load and JSON result."""
    load_before = load_average()[0]
    t0 = time.monotonic()
    began = time.gmtime()
    print(f"$ .venv/bin/python benchmarks/{shown(cmd)}", flush=True)
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
    result = result_of(output) if proc.returncode == 0 else None
    print(f"  exit {proc.returncode} after {time.monotonic() - t0:.0f} s, "
          f"{'a result' if result else 'no result'}; output in {log.relative_to(REPO)}", flush=True)
    if proc.returncode != 0:
        print("  " + "\n  ".join(output.splitlines()[-15:]), flush=True)
    return Run(cmd[0], shown(cmd), time.strftime("%Y-%m-%d", began),
               (time.strftime("%H:%M", began), time.strftime("%H:%M", time.gmtime())),
               (load_before, load_average()[0]), result, cmd[1:])


def machine_label(option: str | None) -> tuple[str, str]:
    """The label of the rows' machine and where it came from."""
    if option:
        return option, "from --machine"
    if os.environ.get("BENCH_MACHINE"):
        return os.environ["BENCH_MACHINE"], "from $BENCH_MACHINE"
    return machine(load=False), "this host's CPU: name the machine with --machine or $BENCH_MACHINE"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated section names: " + ",".join(s.name for s in SECTIONS))
    ap.add_argument("--list", action="store_true", help="print the commands and exit")
    ap.add_argument("--machine", help="the machine label of the rows (default: $BENCH_MACHINE, else the CPU)")
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
                print(f"{s.name:10s} .venv/bin/python benchmarks/{shown(cmd)}")
        return 0
    label, label_from = machine_label(a.machine)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    run_stamp = stamp()
    print(f"headline benchmarks on {machine()}; git {host_info()['git_rev']}; machine label {label}",
          flush=True)
    notes = []
    for s in chosen:
        if s.needs_qdrouterd and qdrouterd() is None:
            notes.append(NO_QDR.format(prefix=QDR_PREFIX))
            print(f"[{s.name}] skipped: qdrouterd is not built", flush=True)
            continue
        print(f"[{s.name}] {s.heading}", flush=True)
        log = RESULTS_DIR / f"{run_stamp}-headline-{s.name}.log"
        s.runs += [run(cmd, log) for cmd in s.commands]
    runs = [r for s in chosen for r in s.runs]
    text = report(runs, label, label_from)
    failed = [f"{s.name} ({r.command})" for s in chosen for r in s.runs if r.result is None]
    print("\n" + text + "".join(f"\n{n}\n" for n in notes))
    path = save_result("headline", {"machine_label": label, "notes": notes, "markdown": text,
                                    "runs": [{**r.__dict__, "result": None} | {"ok": r.result is not None}
                                             for r in runs]})
    print(f"Results: {os.path.relpath(path, REPO)}")
    if failed:
        print(f"failed (no rows from them): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
