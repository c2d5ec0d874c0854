"""SASL server mechanisms for the node, plugged into Proton-C per transport.

Proton-C runs the SASL exchange itself (frames, states, the switch to AMQP) and asks a
*SASL implementation* (``pnx_sasl_implementation``, Proton's ``sasl_plugin.h``) which mechanisms to
offer and whether a client's credentials are good. Three implementations are used:

- Proton's built-in one (``default_sasl_impl``, C): ANONYMOUS and EXTERNAL, and the client side of
  every connection the node makes. Used by listeners that do not offer PLAIN.
- :class:`UsersFileSasl`: the built-in one with two entries replaced by Python callbacks: the offered
  list (PLAIN left out on a connection without TLS unless the listener allows it) and the check of
  the client's initial response. PLAIN is checked against a meshrouter users file (scrypt hashes) in
  a worker thread, so a ~50 ms hash never stalls the node; the outcome is posted when it is known.
  Checks wait in one queue per remote host, served round robin, and a host that keeps failing waits
  longer and longer before its next check (router.security.guessing): guessing costs the guesser,
  not the other hosts. Failures are logged once per host per interval, with the count.
- Cyrus SASL (Proton's default when it is built with it): PLAIN against a Cyrus sasldb (the system's
  SASL database, managed with ``saslpasswd2``). Cyrus reads one configuration per process, which
  :func:`configure_cyrus` writes before the first connection.

Why a plugin: Cyrus cannot check PLAIN against our own hashed file (it has no password callback for
PLAIN), and doing the SASL exchange in Python in front of Proton would mean doing TLS outside Proton
too (SASL runs above TLS) and copying every byte of those connections through Python. The plugin
entry points run only during the handshake: once SASL is done Proton's layer becomes a pass-through,
so an authenticated connection costs exactly what an anonymous one does.

The plugin API is exported by python-qpid-proton's ``cproton_ffi`` library but not declared in its
cffi module, so it is reached here with a second, ABI-mode cffi handle on the same library (same
process-wide state: dlopen returns the already loaded copy). The declarations below are those of
Proton 0.40's ``proton/sasl_plugin.h`` (python-qpid-proton is pinned to 0.40.0).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import cffi
import cproton_ffi
from cproton_ffi import ffi as pffi

from router.logs import LogEvery, cut
from router.security.guessing import CheckQueue
from router.security.users import PasswordHash, UsersFile, UsersFileError, hash_password

log = logging.getLogger(__name__)

_abi = cffi.FFI()
_abi.cdef("""
typedef struct pn_transport_t pn_transport_t;
typedef struct { size_t size; const char *start; } pn_bytes_t;
typedef struct pnx_sasl_implementation {
  void (*free)(pn_transport_t *);
  const char *(*list_mechanisms)(pn_transport_t *);
  bool (*init_server)(pn_transport_t *);
  bool (*init_client)(pn_transport_t *);
  void (*prepare_write)(pn_transport_t *);
  void (*process_init)(pn_transport_t *, const char *, const pn_bytes_t *);
  void (*process_response)(pn_transport_t *, const pn_bytes_t *);
  bool (*process_mechanisms)(pn_transport_t *, const char *);
  void (*process_challenge)(pn_transport_t *, const pn_bytes_t *);
  void (*process_outcome)(pn_transport_t *, const pn_bytes_t *);
  bool (*can_encrypt)(pn_transport_t *);
  ssize_t (*max_encrypt_size)(pn_transport_t *);
  ssize_t (*encode)(pn_transport_t *, pn_bytes_t, pn_bytes_t *);
  ssize_t (*decode)(pn_transport_t *, pn_bytes_t, pn_bytes_t *);
} pnx_sasl_implementation;
extern pnx_sasl_implementation default_sasl_impl;
extern pnx_sasl_implementation *cyrus_sasl_impl;
void pnx_sasl_set_implementation(pn_transport_t *, const pnx_sasl_implementation *, void *);
void pnx_sasl_set_context(pn_transport_t *, void *);
void pnx_sasl_set_succeeded(pn_transport_t *, const char *, const char *);
void pnx_sasl_set_failed(pn_transport_t *);
void pnx_sasl_set_desired_state(pn_transport_t *, int);
bool pnx_sasl_is_transport_encrypted(pn_transport_t *);
const char *pnx_sasl_get_external_username(pn_transport_t *);
void *malloc(size_t);
""")
_lib = _abi.dlopen(cproton_ffi.__file__)
_libc = _abi.dlopen(None)
_DEFAULT = _abi.addressof(_lib, "default_sasl_impl")
_FIELDS = ("free", "list_mechanisms", "init_server", "init_client", "prepare_write", "process_init",
           "process_response", "process_mechanisms", "process_challenge", "process_outcome",
           "can_encrypt", "max_encrypt_size", "encode", "decode")
if any(getattr(_DEFAULT, name) == _abi.NULL for name in _FIELDS):    # every entry is set in 0.40
    raise ImportError("Proton's SASL plugin table does not have the layout of python-qpid-proton 0.40 "
                      "(the version pyproject.toml pins)")
SASL_POSTED_OUTCOME = 7            # enum pnx_sasl_state
MECHANISMS = ("ANONYMOUS", "PLAIN", "EXTERNAL")
FAILURE_LOG_INTERVAL = 10.0        # seconds: one line per remote host per interval about its failures
_ANONYMOUS = _abi.new("char[]", b"anonymous")      # lives as long as the process: Proton keeps the pointer

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _worker() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sasl-plain")
        return _executor


def _t(transport: object) -> object:
    """A pn_transport_t* of cproton_ffi as the same pointer of this module's cffi handle."""
    return _abi.cast("pn_transport_t *", int(pffi.cast("uintptr_t", transport)))


def use_builtin(transport: object) -> None:
    """Let Proton's built-in C implementation (ANONYMOUS, EXTERNAL; any client side) run SASL."""
    _lib.pnx_sasl_set_implementation(_t(transport), _DEFAULT, _abi.NULL)


def use_cyrus(transport: object) -> None:
    """Let Cyrus SASL run SASL (Proton's default when built with it; see configure_cyrus)."""
    impl = _lib.cyrus_sasl_impl
    if impl == _abi.NULL:
        raise RuntimeError("python-qpid-proton was built without Cyrus SASL")
    _lib.pnx_sasl_set_implementation(_t(transport), impl, _abi.NULL)


def _copy_strdup(text: bytes) -> object:
    """A malloc'ed NUL-terminated copy (Proton's free entry point frees it with the transport)."""
    buf = _libc.malloc(len(text) + 1)
    _abi.memmove(buf, text + b"\0", len(text) + 1)
    return buf


class UsersFileSasl:
    """ANONYMOUS, EXTERNAL and PLAIN (against a users file) for the connections of one listener.

    `resolve(transport)` gives the Connection of a cproton_ffi transport pointer (None if unknown);
    `wake(conn)` is called in the event loop when a PLAIN outcome was posted, so the node writes it.
    """

    def __init__(self, mechanisms: tuple[str, ...], users: UsersFile, allow_plain_without_tls: bool,
                 loop: object, resolve: Callable[[object], object], wake: Callable[[object], None]) -> None:
        self.mechanisms = mechanisms
        self.users = users
        self.allow_insecure = allow_plain_without_tls
        self.loop = loop
        self.resolve = resolve
        self.wake = wake
        self.checks = CheckQueue()                 # PLAIN attempts waiting, per remote host
        self.busy = False                          # a check is in the worker (one at a time)
        self._timer: object = None                 # wakes the queue when a delayed host may go on
        self._failures = LogEvery(log, FAILURE_LOG_INTERVAL, self._failure_line, logging.INFO)
        self._flush_timer: object = None
        self._file_error: str | None = None
        self._offered: dict[tuple[bool, bool], object] = {}
        for encrypted in (False, True):
            for external in (False, True):
                names = [m for m in mechanisms
                         if (m != "PLAIN" or encrypted or allow_plain_without_tls)
                         and (m != "EXTERNAL" or external)]
                self._offered[encrypted, external] = _abi.new("char[]", " ".join(names).encode())
        impl = self.impl = _abi.new("pnx_sasl_implementation *")
        for name in _FIELDS:
            setattr(impl, name, getattr(_DEFAULT, name))
        # the callbacks must stay referenced as long as the implementation can be called
        self._list_cb = _abi.callback("const char *(pn_transport_t *)", self._list_mechanisms)
        self._init_cb = _abi.callback("void(pn_transport_t *, const char *, const pn_bytes_t *)",
                                      self._process_init)
        impl.list_mechanisms = self._list_cb
        impl.process_init = self._init_cb

    def install(self, transport: object) -> None:
        _lib.pnx_sasl_set_implementation(_t(transport), self.impl, _abi.NULL)

    # ---- entry points called by Proton (inside pn_transport_push / pn_transport_pending) -------------
    def _list_mechanisms(self, t: object) -> object:
        encrypted = bool(_lib.pnx_sasl_is_transport_encrypted(t))
        external = _lib.pnx_sasl_get_external_username(t) != _abi.NULL
        return self._offered[encrypted, external]

    def _process_init(self, t: object, mechanism: object, response: object) -> None:
        try:
            name = _abi.string(mechanism).decode("ascii", "replace")
            if name not in self.mechanisms:
                self._outcome(t, None)
            elif name == "ANONYMOUS":
                self._outcome(t, _ANONYMOUS)
            elif name == "EXTERNAL":
                ext = _lib.pnx_sasl_get_external_username(t)
                self._outcome(t, ext if ext != _abi.NULL else None)
            elif _lib.pnx_sasl_is_transport_encrypted(t) or self.allow_insecure:
                self._start_plain(t, _abi.buffer(response.start, response.size)[:] if response.size else b"")
            else:
                self._outcome(t, None)                    # PLAIN in the clear, not allowed here
        except Exception:
            log.exception("SASL: internal error checking credentials")
            self._outcome(t, None)

    @staticmethod
    def _outcome(t: object, user: object) -> None:
        if user is None:
            _lib.pnx_sasl_set_failed(t)
        else:
            _lib.pnx_sasl_set_succeeded(t, user, user)
        _lib.pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME)

    # ---- PLAIN: checked in a worker thread -----------------------------------------------------------
    def _start_plain(self, t: object, response: bytes) -> None:
        parts = response.split(b"\0")
        if len(parts) != 3 or (parts[0] and parts[0] != parts[1]):    # no proxy authorization
            self._outcome(t, None)
            return
        try:
            user = parts[1].decode("utf-8")
        except UnicodeDecodeError:
            self._outcome(t, None)
            return
        conn = self.resolve(pffi.cast("pn_transport_t *", int(_abi.cast("uintptr_t", t))))
        if conn is None:
            self._outcome(t, None)
            return
        host = _host_of(conn.peer)
        if not self.checks.add(host, (conn, user, parts[2]), time.monotonic()):
            self._failed(host, user)                  # its queue is full: failed without a hash
            self._outcome(t, None)
            return
        self._next_check()

    def _next_check(self) -> None:
        """Start the next check whose host may go now (round robin over hosts), or wake up when one may."""
        self._timer = None
        while not self.busy:
            now = time.monotonic()
            attempt, wake = self.checks.next_ready(now)
            if attempt is None:
                if wake is not None:
                    self._timer = self.loop.call_later(max(0.0, wake - now), self._next_check)
                return
            conn, user, password = attempt
            if conn.pn_transport is None or not conn.alive:
                continue                              # gone while it waited: no hash for it
            self.busy = True
            future = _worker().submit(self._verify, user, password)
            future.add_done_callback(lambda f, conn=conn, user=user: self._post(conn, user, f))

    def _failed(self, host: str, user: str) -> None:
        self._failures.note(host, time.monotonic(), user)
        if self._flush_timer is None:
            self._flush_timer = self.loop.call_later(FAILURE_LOG_INTERVAL, self._flush)

    def _flush(self) -> None:
        self._flush_timer = None
        self._failures.flush(time.monotonic())
        if self._failures._keys:
            self._flush_timer = self.loop.call_later(FAILURE_LOG_INTERVAL, self._flush)

    def drain_logs(self) -> None:
        """Log the failure counts not written yet (the node is stopping)."""
        self._failures.drain()

    def _failure_line(self, host: object, count: int, user: object) -> tuple:
        return ("SASL PLAIN: authentication failed for user %r from %s (%d failure(s) from there since its "
                "last line); its next check waits %.2g s", user, host, count, self.checks.delay(host))

    def _verify(self, user: str, password: bytes) -> bool:
        """Worker thread: re-read the users file if it changed, then check the password."""
        try:
            self.users.refresh()
            self._file_error = None
        except UsersFileError as exc:
            if str(exc) != self._file_error:
                self._file_error = str(exc)
                log.error("users file %s: %s (keeping the users read before)", self.users.path, exc)
        entry = self.users.users.get(user)
        if entry is None:
            _dummy().verify(password)                 # same time as for a known user
            return False
        return entry.verify(password)

    def _post(self, conn: object, user: str, future: Future) -> None:
        """Worker thread: hand the result to the event loop (gone when the node is stopping)."""
        try:
            self.loop.call_soon_threadsafe(self._done, conn, user, future)
        except RuntimeError:
            pass

    def _done(self, conn: object, user: str, future: Future) -> None:
        """Event loop: post the outcome, unless the connection went away meanwhile; start the next check."""
        self.busy = False
        ok = not future.cancelled() and future.exception() is None and future.result()
        if future.exception() is not None:
            log.error("SASL PLAIN: checking %r failed: %s", cut(user), future.exception())
        host = _host_of(conn.peer)
        self.checks.result(host, bool(ok), time.monotonic())
        if not ok:
            self._failed(host, user)
        self._next_check()
        transport = getattr(conn, "pn_transport", None)
        if transport is None or not getattr(conn, "alive", False):
            return
        t = _t(transport)
        if ok:
            buf = _copy_strdup(user.encode())
            _lib.pnx_sasl_set_context(t, buf)        # freed by Proton with the transport
            self._outcome(t, _abi.cast("char *", buf))
        else:
            self._outcome(t, None)
        self.wake(conn)


def _host_of(peer: str) -> str:
    """The remote host of a connection's "host:port" peer (IPv6 hosts keep their colons)."""
    return peer.rsplit(":", 1)[0]


_dummy_hash: PasswordHash | None = None


def _dummy() -> PasswordHash:
    global _dummy_hash
    if _dummy_hash is None:
        _dummy_hash = PasswordHash.parse(hash_password(os.urandom(8).hex()))
    return _dummy_hash


# ---- Cyrus (sasldb) ----------------------------------------------------------------------------------

CYRUS_APP = "meshrouter"
_cyrus_dir: str | None = None


def configure_cyrus(sasldb: str, mechanisms: tuple[str, ...]) -> None:
    """Point Cyrus at `sasldb` (process-wide, before the first connection uses Cyrus)."""
    global _cyrus_dir
    from cproton_ffi.lib import pn_sasl_config_name, pn_sasl_config_path

    if _cyrus_dir is not None:
        return
    _cyrus_dir = tempfile.mkdtemp(prefix="meshrouter-sasl-")
    atexit.register(shutil.rmtree, _cyrus_dir, True)
    with open(os.path.join(_cyrus_dir, f"{CYRUS_APP}.conf"), "w", encoding="utf-8") as f:
        f.write("pwcheck_method: auxprop\nauxprop_plugin: sasldb\n"
                f"sasldb_path: {os.path.abspath(sasldb)}\nmech_list: {' '.join(mechanisms)}\n")
    pn_sasl_config_path(pffi.NULL, _cyrus_dir.encode())
    pn_sasl_config_name(pffi.NULL, CYRUS_APP.encode())
