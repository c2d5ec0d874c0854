"""Attack: many threads guessing PLAIN passwords from one host (issue 17, point 2).

Failed logins are tracked per remote host; a failing host waits longer and longer before its next check
and its checks queue apart, so another host's logins keep their latency. The failures are logged once
per host per interval, with the count, naming the host.
"""

from __future__ import annotations

import threading
import time

from tests.support.security import USERS, sasl_plain
from tests.support.waiting import wait_until

GUESSERS = 64
ATTACK_SECONDS = 12.0
LEGIT_LOGINS = 10
ATTACKER, LEGIT = "127.0.0.1", "127.0.0.2"


def _listener(users_file) -> dict:
    return {"sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file), "allow_plain_without_tls": True}}


def test_guessing_from_one_host_does_not_lock_out_another(secure_node, users_file):
    node, (url,) = secure_node([_listener(users_file)])
    assert sasl_plain(url, "alice", USERS["alice"], source=LEGIT) == 0
    stop = threading.Event()
    outcomes: list[int | None] = []

    def guess(i: int) -> None:
        n = 0
        while not stop.is_set():
            outcomes.append(sasl_plain(url, "alice", f"guess-{i}-{n}", source=ATTACKER, timeout=5))
            n += 1

    threads = [threading.Thread(target=guess, args=(i,), daemon=True) for i in range(GUESSERS)]
    for t in threads:
        t.start()
    time.sleep(2.0)                                      # the guessing is in full swing
    times = []
    ok = 0
    deadline = time.monotonic() + ATTACK_SECONDS
    while len(times) < LEGIT_LOGINS and time.monotonic() < deadline + 30:
        start = time.monotonic()
        result = sasl_plain(url, "alice", USERS["alice"], source=LEGIT, timeout=5)
        elapsed = time.monotonic() - start
        times.append(elapsed)
        ok += result == 0 and elapsed <= 5.0
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(timeout=15)
    print(f"legit logins ok within 5 s: {ok}/{len(times)}, times {[round(t, 2) for t in times]}; "
          f"guesses {len(outcomes)}: failed {outcomes.count(1)}, no answer {outcomes.count(None)}")
    assert ok >= 0.9 * LEGIT_LOGINS, times
    assert 0 not in outcomes                             # no guess succeeded

    def counted_line() -> bool:                          # the interval's count (10 s after the first)
        return any("failure(s) from there" in ln and not ln.split("(")[1].startswith("1 ")
                   for ln in node.stderr_path.read_text(errors="replace").splitlines())
    wait_until(counted_line, 15, "the line with the interval's count")
    log = node.stderr_path.read_text(errors="replace")
    lines = [ln for ln in log.splitlines() if "authentication failed for user" in ln]
    assert all(ATTACKER in ln for ln in lines), lines[:3]   # the peer host is named; the legit host never
    assert len(lines) <= 2 + (ATTACK_SECONDS + 20) / 10, len(lines)   # once per host per interval
    failed = [ln for ln in log.splitlines() if "failed: amqp:unauthorized-access" in ln]
    assert failed and all(ATTACKER in ln for ln in failed) and len(failed) <= 2 + (ATTACK_SECONDS + 20) / 10
    assert len(log.splitlines()) < 200, len(log.splitlines())     # not one line per guess


def test_failing_host_is_delayed_more_and_more(secure_node, users_file):
    node, (url,) = secure_node([_listener(users_file)])
    times = []
    for i in range(7):
        start = time.monotonic()
        assert sasl_plain(url, "bob", f"wrong-{i}", source=ATTACKER, timeout=15) == 1
        times.append(time.monotonic() - start)
    assert max(times[:3]) < 1.0, times                # the first failures cost nothing more
    assert times[-1] > 0.8 and times[-1] > times[3], times    # then each waits longer (0.25, 0.5, 1, 2 s)
    start = time.monotonic()
    assert sasl_plain(url, "bob", USERS["bob"], source=LEGIT) == 0     # another host: no wait
    assert time.monotonic() - start < 1.0
