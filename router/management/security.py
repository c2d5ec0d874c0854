"""TLS and SASL settings of the management clients (`meshrouter stat`, `meshrouter mesh graph`).

Kept apart from router.management.client so that building the command line imports no Proton: this module
only describes the settings; :func:`router.management.client.connect_options` turns them into Proton's.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ClientSecurity:
    """How the client authenticates: TLS (CA to trust, our certificate) and SASL (mechanisms, user)."""

    ca: str | None = None             # trust only this CA; needed for amqps:// URLs
    cert: str | None = None           # our certificate and key (SASL EXTERNAL, mutual TLS)
    key: str | None = None
    verify_name: bool = True          # the node's certificate must name the URL's host
    user: str | None = None           # SASL PLAIN user; the password comes from password_file
    password_file: str | None = None
    mechanisms: str | None = None     # e.g. "PLAIN" or "EXTERNAL"; None: what the node offers

    def password(self) -> str:
        """The SASL PLAIN password: the first line of ``password_file`` (empty without one)."""
        return Path(self.password_file).read_text().splitlines()[0] if self.password_file else ""


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """The TLS / SASL options of the commands that read management (stat, mesh graph)."""
    group = parser.add_argument_group("connection security")
    group.add_argument("--ssl-ca", metavar="FILE", help="trust this CA (needed for amqps:// URLs)")
    group.add_argument("--ssl-cert", metavar="FILE", help="our certificate (mutual TLS, SASL EXTERNAL)")
    group.add_argument("--ssl-key", metavar="FILE", help="the key of --ssl-cert")
    group.add_argument("--ssl-no-verify-name", action="store_true",
                       help="accept a node certificate that does not name the URL's host")
    group.add_argument("--sasl-user", metavar="USER", help="authenticate as USER (SASL PLAIN)")
    group.add_argument("--sasl-password-file", metavar="FILE", help="first line: the password of --sasl-user")
    group.add_argument("--sasl-mechanisms", metavar="LIST", help='e.g. "PLAIN" or "EXTERNAL"')


def security_from_args(args: argparse.Namespace) -> ClientSecurity:
    return ClientSecurity(ca=args.ssl_ca, cert=args.ssl_cert, key=args.ssl_key,
                          verify_name=not args.ssl_no_verify_name, user=args.sasl_user,
                          password_file=args.sasl_password_file, mechanisms=args.sasl_mechanisms)
