"""The users file SASL PLAIN checks: one ``USER:HASH`` line per user, passwords hashed with scrypt.

Format (``#`` comments and blank lines are kept)::

    alice:$scrypt$ln=14,r=8,p=1$<salt, base64>$<key, base64>

``ln`` is log2 of scrypt's N. The parameters are stored per line, so stronger ones can be used later
without invalidating existing entries. ``meshrouter passwd FILE USER`` adds or replaces a user
(``--delete`` removes one); the node re-reads the file when it changes, so no restart is needed.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
import sys
import tempfile
from dataclasses import dataclass

SCHEME = "scrypt"
LOG_N, R, P = 14, 8, 1            # scrypt's interactive-login parameters: 16 MiB, ~50 ms per check
SALT_BYTES, KEY_BYTES = 16, 32
MAX_MEMORY = 64 * 1024 * 1024     # refuse entries that would need more than this to check


class UsersFileError(ValueError):
    """An unreadable or malformed users file; ``str(e)`` says where and what."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def hash_password(password: str, *, log_n: int = LOG_N, r: int = R, p: int = P) -> str:
    """A new salted scrypt hash of `password` in the users-file form."""
    salt = os.urandom(SALT_BYTES)
    key = hashlib.scrypt(password.encode(), salt=salt, n=2 ** log_n, r=r, p=p, dklen=KEY_BYTES,
                         maxmem=MAX_MEMORY)
    return f"${SCHEME}$ln={log_n},r={r},p={p}${_b64(salt)}${_b64(key)}"


@dataclass(frozen=True)
class PasswordHash:
    """One parsed hash: scrypt parameters, salt and derived key."""

    log_n: int
    r: int
    p: int
    salt: bytes
    key: bytes

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        parts = text.split("$")
        if len(parts) != 5 or parts[0] or parts[1] != SCHEME:
            raise ValueError(f"not a ${SCHEME}$ hash (write entries with `meshrouter passwd`)")
        try:
            params = dict(kv.split("=", 1) for kv in parts[2].split(","))
            log_n, r, p = int(params["ln"]), int(params["r"]), int(params["p"])
            salt, key = _unb64(parts[3]), _unb64(parts[4])
        except (ValueError, KeyError) as exc:
            raise ValueError(f"malformed ${SCHEME}$ hash ({exc})") from None
        if not (1 <= log_n <= 24 and 1 <= r <= 64 and 1 <= p <= 64) or 128 * r * 2 ** log_n > MAX_MEMORY:
            raise ValueError(f"scrypt parameters out of range (ln={log_n}, r={r}, p={p})")
        if not salt or len(key) < 16:
            raise ValueError("salt or key too short")
        return cls(log_n, r, p, salt, key)

    def verify(self, password: bytes) -> bool:
        """True if `password` matches (constant-time comparison)."""
        key = hashlib.scrypt(password, salt=self.salt, n=2 ** self.log_n, r=self.r, p=self.p,
                             dklen=len(self.key), maxmem=MAX_MEMORY)
        return hmac.compare_digest(key, self.key)


def check_user_name(user: str) -> str | None:
    """Why `user` cannot be a user name, or None if it can."""
    if not user:
        return "empty user name"
    if ":" in user or any(c.isspace() or ord(c) < 32 for c in user):
        return f"invalid user name {user!r}: no ':', whitespace or control characters"
    return None


def parse_users(text: str) -> dict[str, PasswordHash]:
    """Parse a users file's text; raises UsersFileError naming the line."""
    users: dict[str, PasswordHash] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, rest = line.partition(":")
        problem = check_user_name(user) if sep else "expected USER:HASH"
        if problem is None and user in users:
            problem = f"user {user!r} listed twice"
        if problem is None:
            try:
                users[user] = PasswordHash.parse(rest)
            except ValueError as exc:
                problem = str(exc)
        if problem is not None:
            raise UsersFileError(f"line {number}: {problem}")
    return users


def load_users(path: str) -> dict[str, PasswordHash]:
    """Read and parse a users file; raises UsersFileError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsersFileError(f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsersFileError(f"not valid UTF-8 text (byte offset {exc.start})") from None
    return parse_users(text)


class UsersFile:
    """A users file that is re-read when it changes (inode, size or modification time)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self.users: dict[str, PasswordHash] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the file if it changed; raises UsersFileError (the old table is kept then)."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise UsersFileError(f"cannot read file: {exc.strerror or exc}") from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)     # `passwd` replaces the file: a new inode
        if stamp != self._stamp:
            self.users = load_users(self.path)
            self._stamp = stamp


# ---- `meshrouter passwd` ------------------------------------------------------------------------------

def _read_password() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def set_user(path: str, user: str, password: str | None) -> bool:
    """Add or replace `user` (password None: delete it) in the users file, atomically.

    Other lines and comments are kept. Returns False when deleting a user that is not there.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = []
    parse_users("\n".join(lines))            # refuse to rewrite a file we cannot read back
    found = False
    out = []
    for line in lines:
        if line.strip().partition(":")[0] == user and not line.lstrip().startswith("#"):
            found = True
            if password is not None:
                out.append(f"{user}:{hash_password(password)}")
            continue
        out.append(line)
    if password is not None and not found:
        out.append(f"{user}:{hash_password(password)}")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".users-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in out))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return found or password is not None


def passwd_command(path: str, user: str, delete: bool) -> tuple[int, str]:
    """`meshrouter passwd`: (exit code, message)."""
    problem = check_user_name(user)
    if problem is not None:
        return 2, problem
    try:
        password = None if delete else _read_password()
        if password is not None and not password:
            return 2, "empty password"
        changed = set_user(path, user, password)
    except UsersFileError as exc:
        return 2, f"{path}: {exc}"
    except (OSError, ValueError) as exc:
        return 1, f"{path}: {exc}"
    if delete:
        return (0, f"{path}: user {user!r} deleted") if changed else (1, f"{path}: no user {user!r}")
    return 0, f"{path}: user {user!r} set"
