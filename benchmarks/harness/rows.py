"""run_bench.py's results as node_bench.py's summary rows: the rate, the share of the direct
client-to-client baseline, latency, router CPU per message and peak RSS, and the notes of a workload."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.report import fmt
from harness.sample import median as median_of

RPC_WARMUP = 100  # run_bench.py runs every rpc-client with --warmup 100; those calls are in the CPU window
RATE_UNIT = {"throughput": "msg/s", "throughput-presettled": "msg/s", "rpc": "calls/s",
             "rpc-conc": "calls/s", "multicast": "msg/s/rcv"}
RATE_KEY = {"throughput": "msgs_per_s", "throughput-presettled": "msgs_per_s", "rpc": "calls_per_s",
            "rpc-conc": "calls_per_s", "multicast": "per_receiver_msgs_per_s"}


@dataclass
class Row:
    """One line of the summary table: a workload on one target."""

    workload: str
    target: str
    rate: float | None = None
    unit: str = ""
    vs_direct_pct: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    cpu_us_per_msg: float | None = None
    cpu_pct: float | None = None
    rss_peak_mib: float | None = None
    ok_runs: int = 0
    runs: int = 0
    notes: list[str] = field(default_factory=list)


def messages_of(workload: str, run: dict) -> int:
    """Deliveries the router sent on during a run (the CPU µs/msg denominator)."""
    if workload.startswith("throughput"):
        return int(run["received"])
    if workload.startswith("rpc"):
        return 2 * (int(run["completed"]) + RPC_WARMUP)  # request + reply, warm-up calls included
    if workload == "multicast":
        return int(sum(run["received"]))
    return 0


def cpu_us_per_msg(workload: str, run: dict) -> float | None:
    """Router CPU seconds sampled during the run (all pids) per message, in µs."""
    procs = run.get("router", {}).get("procs") or {}
    cpu = [p["cpu_s"] for p in procs.values()]
    n = messages_of(workload, run)
    if not cpu or None in cpu or n <= 0:
        return None
    return 1e6 * sum(cpu) / n


def summarize(workload: str, target: str, results: dict) -> Row:
    """One table row from run_bench.py's runs and medians of a workload."""
    runs = results["runs"].get(workload, [])
    med = results["median"].get(workload, {})
    ok = [r for r in runs if "error" not in r]
    row = Row(workload, target, rate=med.get(RATE_KEY[workload]), unit=RATE_UNIT[workload],
              ok_runs=len(ok), runs=len(runs))
    if workload.startswith("rpc"):
        row.p50_us, row.p99_us = med.get("p50_us"), med.get("p99_us")
    row.cpu_us_per_msg = median_of([cpu_us_per_msg(workload, r) for r in ok])
    row.cpu_pct = med.get("router_cpu_pct_total")
    if med.get("router_rss_peak_kb_sum"):
        row.rss_peak_mib = med["router_rss_peak_kb_sum"] / 1024
    if med.get("missing_total"):
        row.notes.append(f"missing {med['missing_total']:,}")
    if workload == "multicast" and ok:
        sent = min(r["sent"] for r in ok)
        if med.get("received_min", sent) < sent:
            row.notes.append(f"a receiver got only {med['received_min']:,} of {sent:,}")
    released = sum(r.get("released", 0) for r in ok)
    if released:
        row.notes.append(f"released {released:,}")
    for r in runs:
        if "error" in r:
            row.notes.append("error: " + r["error"].splitlines()[0][:80])
    return row


def add_direct_ratio(rows: list[Row]) -> None:
    """Fill vs_direct_pct of router rows from the direct row of the same workload."""
    direct = {r.workload: r.rate for r in rows if r.target == "direct"}
    for r in rows:
        base = direct.get(r.workload)
        if r.target != "direct" and base and r.rate is not None:
            r.vs_direct_pct = 100 * r.rate / base


def markdown_table(rows: list[Row]) -> str:
    """The summary as a Markdown table."""
    head = ("| workload | target | rate | vs direct | RPC p50 µs | RPC p99 µs | router CPU µs/msg "
            "| router CPU % | router peak RSS MiB | runs ok | notes |")
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        rate = "–" if r.rate is None else f"{r.rate:,.0f} {r.unit}"
        vs = "" if r.target == "direct" else fmt(r.vs_direct_pct, ".0f") + ("%" if r.vs_direct_pct else "")
        lines.append(f"| {r.workload} | {r.target} | {rate} | {vs} | {fmt(r.p50_us, ',.0f')} "
                     f"| {fmt(r.p99_us, ',.0f')} | {fmt(r.cpu_us_per_msg, '.1f')} | {fmt(r.cpu_pct, '.0f')} "
                     f"| {fmt(r.rss_peak_mib, '.1f')} | {r.ok_runs}/{r.runs} | {'; '.join(r.notes)} |")
    return "\n".join(lines)


def summary_rows(targets: dict[str, dict]) -> list[Row]:
    """Table rows, grouped by workload, router first, direct last."""
    rows = []
    names = list(targets)
    workloads = list(targets[names[0]]["results"]["runs"])
    for w in workloads:
        for t in names:
            if w in targets[t]["results"]["runs"]:
                rows.append(summarize(w, t, targets[t]["results"]))
    add_direct_ratio(rows)
    return rows
