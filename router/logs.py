"""Logging for the node process: one line per event on stderr, and a guard against log floods."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Hashable, Mapping

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_HANDLER_FLAG = "_meshrouter_handler"
_module_levels_set: set[str] = set()  # loggers whose level the last setup_logging() call set


LOG_CUT = 120     # characters of a peer-supplied string a log line keeps


def cut(value: object, limit: int = LOG_CUT) -> str:
    """A string a peer chose (node id, container id, user name, error description) for a log line: cut
    at `limit` characters, saying how long it was, so that a peer cannot write 5,000-character lines."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


class OneLineFormatter(logging.Formatter):
    """Standard formatter that folds multi-line output (messages, tracebacks) onto one line."""

    def format(self, record: logging.LogRecord) -> str:
        return " | ".join(super().format(record).splitlines())


def parse_level(level: str | int) -> int:
    """``"debug"``/``"INFO"``/``logging.WARNING`` -> the numeric level; ValueError if unknown."""
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    number = logging.getLevelNamesMapping().get(str(level).upper())
    if number is None:
        raise ValueError(f"unknown log level {level!r}")
    return number


def setup_logging(level: str, per_module: Mapping[str, str] | None = None) -> None:
    """Send all logging to stderr at ``level``, with ``per_module`` levels set on loggers by name.

    Idempotent: calling it again replaces the handler and the per-module levels of the previous call.
    Handlers installed by others (e.g. pytest's capture) are left alone.
    """
    root_level = parse_level(level)  # validate everything before changing anything
    module_levels = {name: parse_level(value) for name, value in (per_module or {}).items()}
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_FLAG, False):
            root.removeHandler(handler)
            handler.close()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    setattr(handler, _HANDLER_FLAG, True)
    root.addHandler(handler)
    root.setLevel(root_level)

    for name in _module_levels_set:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _module_levels_set.clear()
    for name, module_level in module_levels.items():
        logging.getLogger(name).setLevel(module_level)
        _module_levels_set.add(name)


class LogOnce:
    """Log a repeating failure once per key, then stay quiet until :meth:`reset` says it recovered.

    Example::

        warn = LogOnce(logging.getLogger("router.node"))
        warn.once(("connect", peer), logging.WARNING, "cannot reach %s: %s", peer, err)  # logged
        warn.once(("connect", peer), logging.WARNING, "cannot reach %s: %s", peer, err)  # suppressed
        warn.reset(("connect", peer))  # after success: the next failure is logged again

    Keys stay remembered until reset, so use keys from a bounded set (peers, links, listeners). Keys
    that come from the network (a peer's node id) are not: beyond ``max_keys`` the oldest key is
    forgotten, so memory stays bounded whatever peers send (its next failure is logged again).
    """

    def __init__(self, logger: logging.Logger | str, max_keys: int = 1024) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self._suppressed: dict[Hashable, int] = {}  # key -> repeats swallowed since it was logged
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def once(self, key: Hashable, level: int | str, msg: str, *args: object, **kwargs: object) -> bool:
        """Log ``msg % args`` unless ``key`` was already logged since its last reset; True if logged."""
        with self._lock:
            if key in self._suppressed:
                self._suppressed[key] += 1
                return False
            if len(self._suppressed) >= self._max_keys:
                del self._suppressed[next(iter(self._suppressed))]   # the oldest
            self._suppressed[key] = 0
        kwargs.setdefault("stacklevel", 2)
        self.logger.log(parse_level(level), msg, *args, **kwargs)  # type: ignore[arg-type]
        return True

    def reset(self, key: Hashable) -> int:
        """Forget ``key`` so its next failure is logged; returns how many repeats were suppressed."""
        with self._lock:
            return self._suppressed.pop(key, 0)

    def reset_all(self) -> None:
        """Forget every key."""
        with self._lock:
            self._suppressed.clear()

    def __contains__(self, key: Hashable) -> bool:
        """True while ``key`` is being suppressed (logged once, not reset yet)."""
        with self._lock:
            return key in self._suppressed


class LogEvery:
    """Count a repeating event per key and log one line per key per interval, with the count.

    The first event of a key is logged at once; later ones are counted and logged together when the
    interval has passed, by the next :meth:`note` of that key or by :meth:`flush` (call it from a
    timer so that a burst's tail is logged too). ``format(key, count, detail)`` makes the line's
    arguments: it returns ``(msg, *args)``. Keys come from the network (remote hosts), so at most
    ``max_keys`` are kept: beyond that the oldest is flushed and forgotten.

    Example::

        failures = LogEvery(log, 60.0, lambda host, n, user: ("%s: %d failures (user %s)", host, n, user))
        failures.note("10.0.0.7", now, "bob")   # logged now
        failures.note("10.0.0.7", now + 1, "bob")  # counted
        failures.flush(now + 61)                  # "10.0.0.7: 1 failures (user bob)"
    """

    def __init__(self, logger: logging.Logger | str, interval: float,
                 fmt: Callable[[Hashable, int, object], tuple], level: int = logging.WARNING,
                 max_keys: int = 4096) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.interval = interval
        self.fmt = fmt
        self.level = level
        self.max_keys = max_keys
        self._keys: dict[Hashable, list] = {}   # key -> [last logged at, count since, last detail]

    def note(self, key: Hashable, now: float, detail: object = None) -> None:
        """One more event of `key` at `now` (monotonic seconds); `detail` names the latest one."""
        entry = self._keys.get(key)
        if entry is None:
            if len(self._keys) >= self.max_keys:
                oldest = next(iter(self._keys))
                self._emit(oldest, self._keys.pop(oldest))
            self._keys[key] = [now, 0, detail]
            self.logger.log(self.level, *self.fmt(key, 1, detail))
            return
        entry[1] += 1
        entry[2] = detail
        if now - entry[0] >= self.interval:
            self._emit(key, entry)
            entry[0], entry[1] = now, 0

    def flush(self, now: float) -> None:
        """Log the counts whose interval has passed; forget keys quiet for a whole interval."""
        for key, entry in list(self._keys.items()):
            if now - entry[0] >= self.interval:
                if entry[1]:
                    self._emit(key, entry)
                    entry[0], entry[1] = now, 0
                else:
                    del self._keys[key]

    def drain(self) -> None:
        """Log every count still pending, whatever its interval (the process is stopping)."""
        for key, entry in list(self._keys.items()):
            self._emit(key, entry)
            entry[1] = 0

    def _emit(self, key: Hashable, entry: list) -> None:
        if entry[1]:
            self.logger.log(self.level, *self.fmt(key, entry[1], entry[2]))
