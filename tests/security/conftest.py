"""Fixtures for the security tests: test certificates, a users file, nodes with secure listeners.

``secure_node(listeners, **kw)`` starts a node (tests/conftest.py ``node_factory``) with a plain client
listener first (the fixture's own handle, used for management queries) followed by `listeners`, and
returns ``(node, urls)`` where ``urls[i]`` is the URL of ``listeners[i]`` (amqps:// with TLS).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pki import Pki, make_pki
from tests.support.ports import listener_urls
from tests.support.security import USERS, set_password


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def users_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users"
    for user, password in USERS.items():
        set_password(path, user, password)
    return path


@pytest.fixture
def secure_node(node_factory):
    def start(listeners: list[dict], node_id: str = "A", **kw):
        base = {"host": "127.0.0.1", "port": 0}
        full = [dict(base)] + [{**base, **lc} for lc in listeners]
        extra = kw.pop("extra", {}) or {}
        node = node_factory(node_id, extra={**extra, "listeners": full}, **kw)
        urls = listener_urls(node)
        assert len(urls) >= len(full), node.stdout_lines
        return node, urls[1:len(full)]

    return start
