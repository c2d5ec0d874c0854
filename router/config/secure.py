"""Checks of a listener's or connector's TLS and SASL keys together, with the files they name.

Run after every key has passed its own checker. Relative paths are resolved against the config file's
directory; a file must be readable, and a certificate, its key and the key's password must load together.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from router.config.keys import Invalid
from router.config.model import ConnectorConfig, ConnectorTls, ListenerConfig, ListenerTls


class Files:
    """Resolves paths against the config file's directory and checks that the files can be used."""

    def __init__(self, source: str) -> None:
        self.base = os.path.dirname(os.path.abspath(source)) if os.path.isfile(source) else os.getcwd()

    def file(self, value: str | None, path: str) -> str | None:
        if value is None:
            return None
        from router.security.files import readable_file

        full = os.path.normpath(os.path.join(self.base, os.path.expanduser(value)))
        problem = readable_file(full)
        if problem is not None:
            raise Invalid(path, problem)
        return full

    def cert_key(self, tls: ListenerTls | ConnectorTls, path: str) -> dict[str, Any]:
        """Resolved cert, key, password file and CA of a tls section, checked to load together."""
        from router.security.files import check_ca, check_cert_key, read_password_file

        out = {"cert": self.file(tls.cert, f"{path}.cert"), "key": self.file(tls.key, f"{path}.key"),
               "key_password_file": self.file(tls.key_password_file, f"{path}.key_password_file"),
               "ca": self.file(tls.ca, f"{path}.ca")}
        if out["ca"] is not None and (problem := check_ca(out["ca"])) is not None:
            raise Invalid(f"{path}.ca", problem)
        if (out["cert"] is None) != (out["key"] is None):
            which = "key" if out["cert"] is None else "cert"
            raise Invalid(f"{path}.{which}", "needs tls.cert and tls.key together")
        password = None
        if out["key_password_file"] is not None:
            password, problem = read_password_file(out["key_password_file"])
            if problem is not None:
                raise Invalid(f"{path}.key_password_file", problem)
        if out["cert"] is not None and (bad := check_cert_key(out["cert"], out["key"], password)):
            raise Invalid(f"{path}.{bad[0]}", bad[1])
        return out


def secure_listener(lc: ListenerConfig, path: str, files: Files) -> ListenerConfig:
    """Check a listener's TLS and SASL settings together, with their files; resolve their paths."""
    tls, sasl = lc.tls, lc.sasl
    if tls is not None:
        tls = dataclasses.replace(tls, **files.cert_key(tls, f"{path}.tls"))
        if tls.require_client_cert and tls.ca is None:
            raise Invalid(f"{path}.tls.require_client_cert", "needs tls.ca (the CAs that sign client "
                                                             "certificates)")
        if tls.require_client_cert and lc.websocket:
            raise Invalid(f"{path}.tls.require_client_cert",
                          "not available with websocket: true (a WebSocket listener's TLS is Python's, which "
                          "cannot hand a client certificate to SASL EXTERNAL): use a plain AMQP listener "
                          "for client certificates")
    mechs = sasl.mechanisms
    if "EXTERNAL" in mechs and (tls is None or not tls.require_client_cert):
        raise Invalid(f"{path}.sasl.mechanisms", "EXTERNAL needs tls with require_client_cert: true")
    if "PLAIN" in mechs:
        if (sasl.users_file is None) == (sasl.sasldb is None):
            key = "mechanisms" if sasl.users_file is None else "sasldb"
            raise Invalid(f"{path}.sasl.{key}", "PLAIN needs exactly one of sasl.users_file (a meshrouter "
                                                "users file) or sasl.sasldb (a Cyrus sasldb)")
        if tls is None and not sasl.allow_plain_without_tls and mechs == ("PLAIN",):
            raise Invalid(f"{path}.sasl.mechanisms", "PLAIN is refused on connections without TLS, so no "
                                                     "client could authenticate here: add tls, or set "
                                                     "sasl.allow_plain_without_tls: true")
    else:
        for key in ("users_file", "sasldb", "allow_plain_without_tls"):
            if getattr(sasl, key):
                raise Invalid(f"{path}.sasl.{key}", "only used with PLAIN: add PLAIN to sasl.mechanisms")
    users_file = files.file(sasl.users_file, f"{path}.sasl.users_file")
    if users_file is not None:
        from router.security.users import UsersFileError, load_users  # hashlib: not every node needs it

        try:
            load_users(users_file)
        except UsersFileError as exc:
            raise Invalid(f"{path}.sasl.users_file", f"{users_file}: {exc}") from None
    sasl = dataclasses.replace(sasl, users_file=users_file,
                               sasldb=files.file(sasl.sasldb, f"{path}.sasl.sasldb"))
    return dataclasses.replace(lc, tls=tls, sasl=sasl)


def secure_connector(cc: ConnectorConfig, path: str, files: Files) -> ConnectorConfig:
    """Check a connector's TLS and SASL settings with their files; resolve their paths."""
    tls = cc.tls
    if tls is not None:
        tls = dataclasses.replace(tls, **files.cert_key(tls, f"{path}.tls"))
    mechs = cc.sasl_mechanisms or ()
    if "EXTERNAL" in mechs and (tls is None or tls.cert is None):
        raise Invalid(f"{path}.sasl.mechanisms", "EXTERNAL needs tls.cert and tls.key (our client "
                                                 "certificate)")
    return dataclasses.replace(cc, tls=tls)


def one_sasldb(listeners: list[ListenerConfig]) -> None:
    """Cyrus reads one configuration per process: every listener must use the same sasldb."""
    first: tuple[int, str] | None = None
    for i, lc in enumerate(listeners):
        db = lc.sasl.sasldb
        if db is None:
            continue
        if first is None:
            first = (i, db)
        elif db != first[1]:
            raise Invalid(f"listeners[{i}].sasl.sasldb",
                          f"only one sasldb per node (Cyrus reads one configuration per process); "
                          f"listeners[{first[0]}] uses {first[1]!r}")
