"""`meshrouter stat` and `mesh graph` against a node that requires TLS and SASL PLAIN (or EXTERNAL)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.nodes import REPO_ROOT
from tests.support.security import USERS


def _by_name(url: str) -> str:
    """The URL with the host name the test certificate carries (Proton checks DNS names, not IPs)."""
    return url.replace("127.0.0.1", "localhost")


def _stat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router", "stat", *args, "--timeout", "5"],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


def _listener(pki, users_file) -> dict:
    return {"tls": {"cert": pki.server.cert, "key": pki.server.key, "ca": pki.ca},
            "sasl": {"mechanisms": ["PLAIN"], "users_file": str(users_file)}}


def _external_listener(pki) -> dict:
    return {"tls": {"cert": pki.server.cert, "key": pki.server.key, "ca": pki.ca,
                    "require_client_cert": True},
            "sasl": {"mechanisms": ["EXTERNAL"]}}


def test_stat_with_tls_and_plain(secure_node, pki, users_file, tmp_path):
    node, (url,) = secure_node([_listener(pki, users_file)])
    url = _by_name(url)
    password = tmp_path / "pw"
    password.write_text(USERS["alice"] + "\n")
    r = _stat("-b", url, "-c", "--json", "--ssl-ca", pki.ca, "--sasl-user", "alice",
              "--sasl-password-file", str(password), "--sasl-mechanisms", "PLAIN")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["A"]
    ours = [c for c in rows if c["user"] == "alice"]
    assert len(ours) == 1 and ours[0]["security"].startswith("TLS") and ours[0]["saslMechanism"] == "PLAIN"
    assert ours[0]["authenticated"] is True


def test_stat_with_client_certificate(secure_node, pki):
    node, (url,) = secure_node([_external_listener(pki)])
    url = _by_name(url)
    r = _stat("-b", url, "-c", "--json", "--ssl-ca", pki.ca, "--ssl-cert", pki.client.cert,
              "--ssl-key", pki.client.key, "--sasl-mechanisms", "EXTERNAL")
    assert r.returncode == 0, r.stderr
    assert any(c["user"] == pki.client.subject for c in json.loads(r.stdout)["A"])


def test_stat_refused_without_credentials_is_one_clear_line(secure_node, pki, users_file, tmp_path):
    node, (url,) = secure_node([_listener(pki, users_file)])
    url = _by_name(url)
    wrong = tmp_path / "pw"
    wrong.write_text("not-the-password\n")
    for args in (("--ssl-ca", pki.ca), ("--ssl-ca", pki.ca, "--sasl-user", "alice", "--sasl-password-file",
                                        str(wrong), "--sasl-mechanisms", "PLAIN"),
                 ("--ssl-ca", pki.wrong_ca)):
        r = _stat("-b", url, "-g", *args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("meshrouter: error:"), (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert node.alive()
