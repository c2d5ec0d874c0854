#!/usr/bin/env python3
"""Reroute time after a node is killed (a mesh_bench.py scenario, also runnable alone).

Diamond A-B 1, B-D 1, A-C 5, C-D 5: a paced unsettled stream (amqpbench send --rate) from A to D crosses
B; B is killed with SIGKILL mid-stream; reroute = time from the kill until the first delivery after the gap
arrives at D (now through C). The receiver on D is a python-qpid-proton Container (in a thread here) that
timestamps every arrival. Audit: outcomes at the sender (amqpbench counts them, it does not resend) and
message ids at D (duplicates, missing). A fresh mesh per run. Goal: <= 100 ms.
Results: benchmarks/results/<timestamp>-<label>.json (mesh_bench.py's record).

  .venv/bin/python benchmarks/mesh_reroute.py --repeat 5 --reroute-rate 5000
  .venv/bin/python benchmarks/mesh_bench.py --scenarios reroute --reroute-rate 5000     # the same
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for _path in (BENCH_DIR, BENCH_DIR.parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from harness.loadgen import clients, start_client  # noqa: E402
from harness.mesh import running_mesh  # noqa: E402
from harness.meshruns import diamond_topology  # noqa: E402
from harness.paths import BenchError  # noqa: E402
from harness.report import fmt  # noqa: E402
from harness.sample import median as med  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

NAME = "reroute"
GOAL_S = 0.1


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This scenario's options."""
    ap.add_argument("--reroute-rate", type=float, default=2000.0, help="msg/s of the paced A -> D stream")
    ap.add_argument("--reroute-duration", type=float, default=3.0,
                    help="seconds of stream at that rate (count = rate x duration)")
    ap.add_argument("--reroute-kill-after", type=float, default=1.0,
                    help="seconds after the sender starts at which B is killed")
    ap.add_argument("--reroute-window", type=float, default=0.05,
                    help="the kill's gap must start within S s after the kill (default 0.05); a run whose "
                         "receiver was more than S s behind the paced schedule is flagged as backlogged")
    ap.add_argument("--reroute-idle", type=float, default=5.0,
                    help="the receiver on D stops after this many seconds without a message")


def check(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """The kill must fall inside the stream."""
    if a.reroute_kill_after >= a.reroute_duration:
        ap.error("--reroute-kill-after must be shorter than --reroute-duration")


class GapReceiver(MessagingHandler):  # type: ignore[misc]
    """A python-qpid-proton receiver (Container in a thread) that records the arrival time and id of
    every message: the reroute gap needs every arrival, not only amqpbench's longest gap (the rate-paced
    amqpbench sender leaves a gap of up to 100 ms after its first message, which would hide it)."""

    def __init__(self, url: str, address: str, count: int, idle_s: float) -> None:
        super().__init__(prefetch=1000, auto_accept=True)
        self.url, self.address, self.count, self.idle_s = url, address, count, idle_s
        self.arrivals: list[tuple[float, int | None]] = []
        self.unique: set[int] = set()
        self.attached = threading.Event()
        self.done = threading.Event()
        self.error: str | None = None
        self._conn: Any = None
        self._thread = threading.Thread(target=self._run, name="gap-receiver", daemon=True)

    def start(self) -> None:
        """Run the Container in a background thread."""
        self._thread.start()

    def _run(self) -> None:
        try:
            Container(self).run()
        except Exception as e:  # report in the main thread
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.done.set()
            self.attached.set()

    def on_start(self, event: Any) -> None:
        """Connect, attach the receiver, start the idle timer."""
        self._conn = event.container.connect(self.url, reconnect=False)
        event.container.create_receiver(self._conn, self.address)
        event.container.schedule(0.1, self)

    def on_link_opened(self, event: Any) -> None:
        """The router attached our receiver."""
        self.attached.set()

    def on_message(self, event: Any) -> None:
        """Record arrival time and message id; stop once every id arrived."""
        mid = event.message.id
        mid = int(mid) if isinstance(mid, int) else None
        self.arrivals.append((time.time(), mid))
        if mid is not None:
            self.unique.add(mid)
        if len(self.unique) >= self.count:
            self._close()

    def on_timer_task(self, event: Any) -> None:
        """Stop after idle_s without a message (once something arrived)."""
        if self.done.is_set() or self._conn is None:
            return
        if self.arrivals and time.time() - self.arrivals[-1][0] > self.idle_s:
            self._close()
        elif self._conn.state & self._conn.LOCAL_ACTIVE:
            event.container.schedule(0.1, self)

    def on_transport_error(self, event: Any) -> None:
        """The connection to D failed."""
        cond = event.transport.condition
        self.error = f"transport error: {cond.name if cond else '?'}: {cond.description if cond else ''}"

    def _close(self) -> None:
        if self._conn is not None and self._conn.state & self._conn.LOCAL_ACTIVE:
            self._conn.close()

    def stop(self, timeout: float) -> None:
        """Wait for the receiver to finish (idle or complete), at most timeout s."""
        self.done.wait(timeout)

    def gap_after(self, t_kill: float, window: float) -> dict[str, Any]:
        """The interruption caused by a kill at t_kill. Deliveries that B had already written reach D's
        consumer at most a few ms after the kill, so the last one through B arrives before
        t_kill + window; the kill's gap is the longest inter-arrival gap that starts before then and
        ends after t_kill. reroute_s = end of that gap - t_kill (the first delivery through C);
        gap_s = its length; longest_gap_after_s = the longest gap anywhere after the kill (noise)."""
        times = sorted(t for t, _ in self.arrivals)
        after = [i for i in range(1, len(times)) if times[i] > t_kill]
        out: dict[str, Any] = {"reroute_s": None, "gap_s": None, "longest_gap_after_s": None,
                               "received_after_kill": len(after)}
        if not after:
            return out
        out["longest_gap_after_s"] = max(times[i] - times[i - 1] for i in after)
        near = [i for i in after if times[i - 1] <= t_kill + window]
        if near:
            i = max(near, key=lambda j: times[j] - times[j - 1])
            out["reroute_s"], out["gap_s"] = times[i] - t_kill, times[i] - times[i - 1]
        return out


def reroute_run(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path], i: int) -> dict[str, Any]:
    """One fresh diamond: paced unsettled stream A -> D through B, SIGKILL B mid-stream; the gap at D
    and the audit."""
    addr = f"reroute/{i}"
    count = int(a.reroute_rate * a.reroute_duration)
    topo = diamond_topology(a)
    rcv: GapReceiver | None = None
    with running_mesh(topo, tmp, keep) as mesh, clients() as cl:
        mesh.start()
        mesh.wait_converged()
        route_wait = mesh.wait_route("A", "D", "B")
        rcv = GapReceiver(mesh.url("D"), addr, count, a.reroute_idle)
        rcv.start()
        if not rcv.attached.wait(30) or rcv.error:
            raise BenchError(f"receiver on D not attached: {rcv.error}")
        mesh.wait_converged(address=(addr, "D"))
        snd = start_client(client, "send", mesh.url("A"),
                           ["--addr", addr, "--count", str(count), "--rate", str(a.reroute_rate)],
                           "sender on A")
        cl.append(snd)
        time.sleep(a.reroute_kill_after)
        mesh.check_alive()
        t_kill = time.time()
        mesh.kill9("B")
        mesh.children["B"].wait(5)
        limit = a.reroute_duration + a.reroute_idle + 30
        sr = snd.result(limit)
        rcv.stop(a.reroute_idle + 10)
        mesh.check_alive()
        after = mesh.state("A")["mesh"]
    if rcv.error:
        raise BenchError(f"receiver on D: {rcv.error}")
    gap = rcv.gap_after(t_kill, a.reroute_window)
    sent = sr.get("sent", 0)
    outcomes = {k: sr.get(k, 0) for k in ("accepted", "released", "modified", "rejected", "other")}
    settled = sum(outcomes.values())
    received = len(rcv.arrivals)
    unique = len(rcv.unique)
    duplicates = received - unique
    accepted_ok = outcomes["accepted"] <= unique <= outcomes["accepted"] + outcomes["modified"]
    times = [t for t, _ in rcv.arrivals]
    before = sum(1 for t in times if t <= t_kill)
    # how far behind the paced schedule D was when B died: if the mesh could not keep up with the rate,
    # arrivals after the kill are a backlog and the gap is not the reroute's alone
    lag = None
    if sr.get("t_start"):
        lag = min(count, a.reroute_rate * (t_kill - sr["t_start"])) / a.reroute_rate - before / a.reroute_rate
    return {
        **gap,
        "lag_at_kill_s": lag,
        "backlogged": lag is not None and lag > a.reroute_window,
        "received_before_kill": before,
        "last_receive_after_kill_s": (max(times) - t_kill) if times else None,
        "sent": sent, **outcomes, "unsettled": sent - settled,
        "received": received, "duplicates": duplicates, "missing": count - unique,
        "count": count, "audit_ok": settled == sent and duplicates == 0 and accepted_ok,
        "sender_timed_out": sr["timed_out"], "a_next_hop_d_after": after["next_hops"].get("D"),
        "rerouted": gap["reroute_s"] is not None,
        "route_wait_s": route_wait,
    }


def scenario(a: argparse.Namespace, client: Path, tmp: Path, keep: list[Path]) -> dict[str, Any]:
    """Repeat reroute_run on fresh diamonds."""
    runs = []
    for i in range(a.repeat):
        try:
            r = reroute_run(a, client, tmp, keep, i)
        except BenchError as e:
            r = {"error": str(e)}
        runs.append(r)
        print(f"[reroute] #{i + 1}: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                                    for k, v in r.items()}), flush=True)
        time.sleep(0.5)
    ok = [r for r in runs if "error" not in r]
    summary: dict[str, Any] = {k: med([r[k] for r in ok])
                               for k in ("reroute_s", "gap_s", "longest_gap_after_s", "lag_at_kill_s")}
    summary["reroute_values"] = [r["reroute_s"] for r in ok]
    for k in ("sent", "accepted", "released", "modified", "rejected", "other", "unsettled", "received",
              "duplicates", "missing"):
        summary[k] = sum(r[k] or 0 for r in ok)
    summary.update(ok_runs=len(ok), runs=len(runs), audit_ok=sum(r["audit_ok"] for r in ok),
                   rerouted=sum(r["rerouted"] for r in ok), backlogged=sum(r["backlogged"] for r in ok))
    return {"topology": "diamond A-B 1, B-D 1, A-C 5, C-D 5", "runs": runs, "summary": summary,
            "rate": a.reroute_rate}


def markdown(a: argparse.Namespace, res: dict[str, Any]) -> list[str]:
    """The reroute table."""
    lines: list[str] = []
    if "reroute" in res:
        r = res["reroute"]["summary"]

        def ms(v: float | None) -> str:
            return fmt(None if v is None else 1000 * v, ".0f")

        vals = " ".join(ms(v) for v in r["reroute_values"])
        head = f"reroute (diamond, {a.reroute_rate:g} msg/s unsettled A → D, kill -9 B)"
        lines += [f"| {head} | median | runs |",
                  "|---|---:|---|",
                  f"| kill → first delivery at D via C | {ms(r['reroute_s'])} ms "
                  f"| {vals} ms ({r['rerouted']}/{r['runs']} rerouted) |",
                  f"| gap in arrivals at D across the kill | {ms(r['gap_s'])} ms | |",
                  f"| longest gap anywhere after the kill (noise) | {ms(r['longest_gap_after_s'])} ms | |",
                  f"| D behind the paced schedule at the kill | {ms(r['lag_at_kill_s'])} ms "
                  f"| {r['backlogged']} run(s) backlogged |",
                  f"| audit, all runs: sent / accepted / released / modified / rejected / unsettled "
                  f"| {r['sent']:,} / {r['accepted']:,} / {r['released']:,} / {r['modified']:,} / "
                  f"{r['rejected']:,} / {r['unsettled']:,} | |",
                  f"| audit, all runs: received at D / duplicates / missing ids | {r['received']:,} / "
                  f"{r['duplicates']:,} / {r['missing']:,} "
                  f"| audit consistent in {r['audit_ok']}/{r['ok_runs']} |",
                  ""]
    return lines


def target(res: dict[str, Any]) -> str:
    """The goal line: rerouted within GOAL_S."""
    v = res[NAME]["summary"]["reroute_s"]
    return (f"reroute <= {1000 * GOAL_S:.0f} ms: {fmt(None if v is None else 1000 * v, '.0f')} ms "
            f"({'met' if v is not None and v <= GOAL_S else 'missed'})")


if __name__ == "__main__":
    import mesh_bench
    sys.exit(mesh_bench.main(only=NAME))
