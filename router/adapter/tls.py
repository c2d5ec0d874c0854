"""Proton SSL domains (OpenSSL contexts) for listeners and connectors.

A domain is made once per listener or connector and shared by its connections; `pn_ssl_init` puts a
connection's transport under it before any byte is exchanged. Trust is exactly the configured `ca`
file: Proton also loads OpenSSL's default CA paths into every domain, which would let any publicly
issued client certificate pass a listener's client check, so those paths are pointed at an empty
directory while a domain is created (OpenSSL reads them from SSL_CERT_FILE / SSL_CERT_DIR then).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from cproton_ffi import ffi
from cproton_ffi.lib import (
    PN_SSL_ANONYMOUS_PEER,
    PN_SSL_MODE_CLIENT,
    PN_SSL_MODE_SERVER,
    PN_SSL_VERIFY_PEER,
    PN_SSL_VERIFY_PEER_NAME,
    pn_ssl_domain,
    pn_ssl_domain_free,
    pn_ssl_domain_set_credentials,
    pn_ssl_domain_set_peer_authentication,
    pn_ssl_domain_set_protocols,
    pn_ssl_domain_set_trusted_ca_db,
    pn_ssl_present,
)


class TlsSetupError(ValueError):
    """A TLS setting Proton refused: `key` is the setting's name within the tls section."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(key, problem)
        self.key = key
        self.problem = problem


_empty_dir: str | None = None


@contextlib.contextmanager
def _configured_cas_only() -> Iterator[None]:
    """Point OpenSSL's default CA locations at an empty directory (kept for the process's life:
    OpenSSL looks CAs up there during each handshake)."""
    global _empty_dir
    if _empty_dir is None:
        _empty_dir = tempfile.mkdtemp(prefix="meshrouter-noca-")
        atexit.register(shutil.rmtree, _empty_dir, True)
    saved = {k: os.environ.get(k) for k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSL_CERT_URI")}
    os.environ["SSL_CERT_FILE"] = os.path.join(_empty_dir, "none.pem")
    os.environ["SSL_CERT_DIR"] = _empty_dir
    os.environ["SSL_CERT_URI"] = f"file:{_empty_dir}"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _new_domain(mode: int) -> object:
    if not pn_ssl_present():
        raise TlsSetupError("", "this python-qpid-proton build has no TLS support "
                                "(install libssl-dev, then rebuild: make clean && make)")
    with _configured_cas_only():
        domain = pn_ssl_domain(mode)
    if domain == ffi.NULL:
        raise TlsSetupError("", "OpenSSL could not create a TLS context")
    return domain


def _set(domain: object, rc: int, key: str, problem: str) -> None:
    if rc != 0:
        pn_ssl_domain_free(domain)
        raise TlsSetupError(key, problem)


def _b(text: str | None) -> object:
    return text.encode() if text is not None else ffi.NULL


def server_domain(cert: str, key: str, password: str | None, ca: str | None, require_client_cert: bool,
                  protocols: tuple[str, ...]) -> object:
    """A server domain: our certificate, and the client certificate check when it is required."""
    d = _new_domain(PN_SSL_MODE_SERVER)
    _set(d, pn_ssl_domain_set_credentials(d, _b(cert), _b(key), _b(password)), "key",
         f"Proton could not load the certificate {cert!r} with the key {key!r}")
    if ca is not None:
        _set(d, pn_ssl_domain_set_trusted_ca_db(d, _b(ca)), "ca", f"Proton could not load {ca!r}")
    mode = PN_SSL_VERIFY_PEER if require_client_cert else PN_SSL_ANONYMOUS_PEER
    if require_client_cert:
        _set(d, pn_ssl_domain_set_peer_authentication(d, mode, _b(ca)), "require_client_cert",
             f"Proton could not require client certificates signed by {ca!r}")
    if protocols:
        _set(d, pn_ssl_domain_set_protocols(d, " ".join(protocols).encode()), "protocols",
             f"OpenSSL refused the protocols {' '.join(protocols)!r}")
    return d


def client_domain(ca: str, cert: str | None, key: str | None, password: str | None, verify_peer_name: bool,
                  protocols: tuple[str, ...]) -> object:
    """A client domain: the peer's certificate checked against `ca` (and its name), ours if any."""
    d = _new_domain(PN_SSL_MODE_CLIENT)
    if cert is not None:
        _set(d, pn_ssl_domain_set_credentials(d, _b(cert), _b(key), _b(password)), "key",
             f"Proton could not load the certificate {cert!r} with the key {key!r}")
    _set(d, pn_ssl_domain_set_trusted_ca_db(d, _b(ca)), "ca", f"Proton could not load {ca!r}")
    mode = PN_SSL_VERIFY_PEER_NAME if verify_peer_name else PN_SSL_VERIFY_PEER
    _set(d, pn_ssl_domain_set_peer_authentication(d, mode, _b(ca)), "ca",
         f"Proton could not verify peers with {ca!r}")
    if protocols:
        _set(d, pn_ssl_domain_set_protocols(d, " ".join(protocols).encode()), "protocols",
             f"OpenSSL refused the protocols {' '.join(protocols)!r}")
    return d
