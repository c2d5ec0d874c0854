"""Config-time checks of TLS files with Python's ``ssl`` module (no Proton needed).

Each check returns None when the file is usable, else a problem to report under the config key.
The node loads the same files into Proton at start-up; checking here makes ``check-config`` catch a
missing file, a wrong key or a key password that does not fit.
"""

from __future__ import annotations

import os
import ssl


def readable_file(path: str) -> str | None:
    """None if `path` is a readable regular file, else the problem."""
    if not os.path.exists(path):
        return f"no such file: {path!r}"
    if not os.path.isfile(path):
        return f"not a regular file: {path!r}"
    if not os.access(path, os.R_OK):
        return f"file not readable: {path!r}"
    return None


def read_password_file(path: str) -> tuple[str | None, str | None]:
    """(password, None) read from `path` (first line, newline stripped), or (None, problem)."""
    problem = readable_file(path)
    if problem is not None:
        return None, problem
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n"), None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read {path!r}: {exc}"


def check_cert_key(cert: str, key: str, password: str | None) -> tuple[str, str] | None:
    """None if `cert` and `key` load together, else (which key: "cert" or "key", problem)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
    except (ssl.SSLError, OSError):
        return "cert", f"not a PEM certificate: {cert!r}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key, password=password if password is not None else "")
    except ssl.SSLError as exc:
        if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
            return "key", f"the key does not match the certificate {cert!r}"
        why = ("wrong password in key_password_file" if password is not None
               else "not a PEM private key, or encrypted (set key_password_file)")
        return "key", f"cannot load the private key {key!r}: {why}"
    except OSError as exc:
        return "key", f"cannot read {key!r}: {exc}"
    return None


def check_ca(path: str) -> str | None:
    """None if `path` holds at least one PEM CA certificate, else the problem."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        return f"cannot load CA certificates from {path!r}: {getattr(exc, 'reason', None) or exc}"
    if not ctx.cert_store_stats().get("x509"):
        return f"no CA certificate in {path!r}"
    return None
