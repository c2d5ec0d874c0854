"""Reporting for `make bench`: BENCHMARKS.md's tables built from the scenarios' JSON results.

Each table of :data:`SPECS` has the title (the ``## `` heading), the header line and the row labels of the
table of that title in BENCHMARKS.md, so a maintainer can paste the rows in; tests/unit/test_bench_tables.py
checks the header lines against BENCHMARKS.md. A row names the command that produced it, the date, the
machine label and the load average, and gives the ratio only where a peer ran in the same window.

A :class:`Run` is one scenario command as headline.py ran it: its script, how it is shown, its time
window, the load average before and after, and the JSON it wrote (None when it failed).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.report import markdown_table

MESH = "One node, a chain, a mesh: against qdrouterd"
RPC = "RPC"
CONTROL = "Control plane at scale"
STARTUP = "Start-up"

#: title -> (header, number of leading label columns): the tables of BENCHMARKS.md that `make bench` fills
SPECS: dict[str, tuple[tuple[str, ...], int]] = {
    MESH: (("case", "workload", "command", "date, machine", "meshrouter", "qdrouterd", "ratio"), 2),
    RPC: (("what", "command", "date, machine", "p50", "p99", "calls/s", "peer beside it", "ratio"), 1),
    CONTROL: (("measure", "result", "goal", "command, date, machine"), 1),
    STARTUP: (("what", "command", "date, machine", "result", "goal"), 1),
}
ALIGN = {MESH: "llllrrr", RPC: "lllrrrlr", CONTROL: "llll", STARTUP: "lllll"}

NOT_BESIDE = "– (not run beside it)"
#: qdr_compare.py's case and workload -> the row labels of the first table
QDR_ROWS = {("single", "rpc-conc"): ("one node", "rpc-conc, 50 outstanding"),
            ("chain", "throughput"): ("chain A → B → C", "unsettled"),
            ("chain", "throughput-presettled"): ("chain A → B → C", "pre-settled"),
            ("mesh4", "throughput"): ("four-node mesh", "unsettled"),
            ("mesh4", "throughput-presettled"): ("four-node mesh", "pre-settled")}


@dataclass
class Run:
    """One scenario command and what it wrote."""

    script: str                          # node_bench.py
    command: str                         # as BENCHMARKS.md shows it: `node_bench.py --repeat 1 ...`
    date: str                            # 2026-12-02
    window: tuple[str, str]              # ("06:40", "06:42"), UTC
    load: tuple[float, float]            # 1-minute load average before and after
    result: dict[str, Any] | None = None
    args: list[str] = field(default_factory=list)

    def where(self, machine: str) -> str:
        """The "date, machine" cell: `2026-12-02 06:40–06:42, M7, load 1.2–2.3` (one time within a minute)."""
        span = self.window[0] if self.window[0] == self.window[1] else "–".join(self.window)
        return f"{self.date} {span}, {machine}, load {self.load[0]:.1f}–{self.load[1]:.1f}"


def _med(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _n(v: float | None, spec: str = ",.0f", unit: str = "") -> str:
    return "–" if v is None else format(v, spec) + unit


def _code(run: Run) -> str:
    return f"`{run.command}`"


def _ok(runs: list[Run], script: str, extra: str = "") -> list[Run]:
    """The runs of ``script`` that wrote a result (and whose arguments contain ``extra``)."""
    return [r for r in runs if r.script == script and r.result is not None and extra in " ".join(r.args)]


# ---------------------------------------------------------------------------- one node, chain, mesh

def mesh_rows(runs: list[Run], machine: str) -> list[list[str]]:
    """The first table: node_bench.py and mesh_bench.py alone, or qdr_compare.py with qdrouterd beside."""
    rows: dict[tuple[str, str], list[str]] = {}
    for run in _ok(runs, "node_bench.py"):
        summary = {(s["workload"], s["target"]): s for s in run.result.get("summary", [])}
        thr, conc = summary.get(("throughput", "node")), summary.get(("rpc-conc", "node"))
        if thr:
            rows[("one node", "unsettled throughput")] = [
                _code(run), run.where(machine),
                f"{_n(thr['rate'])} msg/s, {_n(thr['cpu_us_per_msg'], '.1f')} µs of node CPU per message",
                NOT_BESIDE, ""]
        if conc:
            rows[("one node", "rpc-conc, 50 outstanding")] = [
                _code(run), run.where(machine), f"{_n(conc['rate'])} calls/s", NOT_BESIDE, ""]
    for run in _ok(runs, "mesh_bench.py"):
        res = run.result.get("results", {})
        for scenario, case in (("chain", "chain A → B → C"), ("four-node", "four-node mesh")):
            summary = res.get(scenario, {}).get("summary", {})
            for workload, label in (("throughput", "unsettled"), ("throughput-presettled", "pre-settled")):
                if workload in summary:
                    s = summary[workload]
                    lost = f" ({s['missing']:,} lost)" if s.get("missing") else ""
                    rows[(case, label)] = [_code(run), run.where(machine),
                                           f"{_n(s['msgs_per_s'])} msg/s{lost}", NOT_BESIDE, ""]
    for run in _ok(runs, "qdr_compare.py"):        # qdrouterd beside it: these rows take the place
        for s in run.result.get("summary", []):
            label = QDR_ROWS.get((s["case"], s["workload"]))
            if label is None:
                continue
            unit = "calls/s" if s["workload"].startswith("rpc") else "msg/s"
            ratio = "" if s.get("ratio") is None else f"**{s['ratio']:.2f}**"
            rows[label] = [_code(run), run.where(machine), f"{_n(s['median_mr'])} {unit}",
                           f"{_n(s['median_qdr'])} {unit}", ratio]
    order = [("one node", "unsettled throughput"), ("one node", "rpc-conc, 50 outstanding"),
             *QDR_ROWS.values()]
    return [[*label, *rows[label]] for label in dict.fromkeys(order) if label in rows]


# ----------------------------------------------------------------------------------------------- RPC

RPC_ROWS = {("one-node", "sequential"): "router.rpc, one node, sequential",
            ("one-node", "concurrent"): "router.rpc, one node, concurrent",
            ("four-node", "sequential"): "router.rpc, four-node mesh (one hop each way), sequential"}


def rpc_rows(runs: list[Run], machine: str) -> list[list[str]]:
    """router.rpc through one node and the four-node mesh (rpc_bench.py): medians of the runs."""
    rows = []
    for run in _ok(runs, "rpc_bench.py"):
        calls = run.result.get("runs", [])
        for (scenario, mode), what in RPC_ROWS.items():
            rs = [c for c in calls if c["scenario"] == scenario and c["mode"] == mode]
            if not rs:
                continue
            errors = sum(c["errors"] for c in rs)
            rate = _n(_med(c["calls_per_s"] for c in rs)) + (f" ({errors} errors)" if errors else "")
            rows.append([what, _code(run), run.where(machine),
                         _n(_med(c["p50_us"] for c in rs), ",.0f", " µs"),
                         _n(_med(c["p99_us"] for c in rs), ",.0f", " µs"), rate, "–", ""])
    return rows


# ----------------------------------------------------------------------------- control plane at scale

def control_rows(runs: list[Run], machine: str) -> list[list[str]]:
    """The address storm, `stat -l`, idle connections and connection rounds (scale_bench.py)."""
    rows = []
    for run in _ok(runs, "scale_bench.py"):
        out, where = run.result, f"{_code(run)}, {run.where(machine)}"
        storm = out["storm"]
        canaries = storm.get("canaries", {})
        rows += [["neighbour losses during and after the storm", str(out.get("losses_total", "–")), "0"],
                 ["C routes every address, after the last ATTACH written",
                  _n(storm.get("routed_after_last_attach_s"), ".2f", " s")
                  + f" ({storm['addresses']:,} receivers)", "≤ 1 s"]]
        if "B→D" in canaries:
            rows.append(["canary B → D during the storm, p99",
                         _n(canaries["B→D"].get("p99_ms"), ".1f", " ms"), "≤ 20 ms"])
        if "C→A" in canaries:
            rows.append(["canary C → A (through the storm's node)",
                         _n(canaries["C→A"].get("p99_ms"), ".1f", " ms"), "(no goal)"])
        if "stat" in out:
            rows.append([f"`meshrouter stat -l` of {storm['addresses']:,} links",
                         _n(out["stat"]["seconds"], ".2f", " s") + f" ({out['stat']['rows']:,} rows printed)",
                         "≤ 2 s"])
        if "connections" in out:
            c = out["connections"]
            rss = sorted(c["rss_per_connection_kib"].items())
            rows += [[f"RSS per idle connection ({c['per_node']:,} per node)",
                      ", ".join(f"{n} {v:.1f}" for n, v in rss) + " KiB",
                      "≤ 20 KiB"],
                     ["idle CPU of a node holding them",
                      ", ".join(f"{n} {100 * v:.1f}%" for n, v in sorted(c["idle_cpu_share"].items())), ""]]
        if "rounds" in out:
            r = out["rounds"]
            rows.append([f"B's RSS: start, after each of 3 rounds of {r['connections']:,} connections",
                         " → ".join(f"{x:.0f}" for x in r["rss_mib"]) + " MiB", "no growth after round 1"])
        rows = [[*row, where] for row in rows]
    return rows


# ------------------------------------------------------------------------------------------- start-up

def startup_rows(runs: list[Run], machine: str) -> list[list[str]]:
    """A node's start-up (startup_bench.py) and the four-node mesh's convergence (mesh_bench.py)."""
    rows = []
    for run in _ok(runs, "startup_bench.py"):
        opened, cpu = run.result["open_s"], run.result["cpu_s"]
        rows.append(["one node: exec → its Open answered", _code(run), run.where(machine),
                     f"**{1e3 * statistics.median(opened):.1f} ms** (median; {1e3 * min(opened):.1f}–"
                     f"{1e3 * max(opened):.1f}, {len(opened)} runs), "
                     f"{1e3 * statistics.median(cpu):.0f} ms of CPU",
                     "≤ 0.3 s"])
    for run in _ok(runs, "mesh_bench.py", "convergence"):
        s = run.result.get("results", {}).get("convergence", {}).get("summary")
        if not s:
            continue
        values = s.get("credit_values") or []
        spread = f"{min(values):.2f}–{max(values):.2f}, " if values else ""
        rows.append(["four-node mesh: first spawn → credit on C for B's receiver", _code(run),
                     run.where(machine),
                     f"**{_n(s['credit_s'], '.3f')} s** (median; {spread}{s['ok_runs']} of {s['runs']}); "
                     f"last node ready → credit: {_n(s['credit_after_ready_s'], '.2f')} s", "≤ 0.5 s"])
    return rows


BUILDERS: dict[str, Callable[[list[Run], str], list[list[str]]]] = {
    MESH: mesh_rows, RPC: rpc_rows, CONTROL: control_rows, STARTUP: startup_rows}


def build_tables(runs: list[Run], machine: str) -> dict[str, str]:
    """Title -> Markdown table (header, rule, rows) for every table with at least one row."""
    out = {}
    for title, build in BUILDERS.items():
        rows = build(runs, machine)
        if rows:
            out[title] = markdown_table(SPECS[title][0], rows, ALIGN[title])
    return out


def report(runs: list[Run], machine: str, machine_from: str) -> str:
    """Every table under its BENCHMARKS.md heading, with a line on where the machine label came from."""
    parts = [f"Machine label: {machine} ({machine_from}). Short runs on this machine: compare ratios "
             "measured in one window, not these figures with BENCHMARKS.md's."]
    for title, table in build_tables(runs, machine).items():
        parts += [f"## {title}", table]
    return "\n\n".join(parts) + "\n"
