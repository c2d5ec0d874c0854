"""The SASL PLAIN users file and `meshrouter passwd`."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from router.security.users import (
    PasswordHash,
    UsersFile,
    UsersFileError,
    hash_password,
    load_users,
    parse_users,
)
from tests.support.nodes import REPO_ROOT


def passwd(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router", "passwd", *args], input=stdin, text=True,
                          capture_output=True, cwd=REPO_ROOT, timeout=30)


def test_hash_and_verify():
    h = hash_password("correct horse")
    assert h.startswith("$scrypt$ln=14,r=8,p=1$")
    parsed = PasswordHash.parse(h)
    assert parsed.verify(b"correct horse")
    assert not parsed.verify(b"Correct horse")
    assert hash_password("correct horse") != h                  # salted


@pytest.mark.parametrize("text, problem", [
    ("alice\n", "line 1: expected USER:HASH"),
    ("# c\n\nalice:plaintext\n", "line 3: not a $scrypt$ hash"),
    ("alice:$scrypt$ln=14,r=8$c2FsdA$a2V5\n", "line 1: malformed"),
    ("alice:$scrypt$ln=30,r=8,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5\n",
     "line 1: scrypt parameters out of range"),
    ("a b:$scrypt$ln=14,r=8,p=1$c2FsdA$a2V5\n", "line 1: invalid user name"),
])
def test_parse_errors(text, problem):
    with pytest.raises(UsersFileError) as info:
        parse_users(text)
    assert str(info.value).startswith(problem), info.value


def test_duplicate_user():
    h = hash_password("x")
    with pytest.raises(UsersFileError, match="line 2: user 'alice' listed twice"):
        parse_users(f"alice:{h}\nalice:{h}\n")


def test_passwd_command(tmp_path):
    path = tmp_path / "users"
    proc = passwd(str(path), "alice", stdin="first\n")
    assert proc.returncode == 0 and "user 'alice' set" in proc.stdout, proc
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.write_text("# meshrouter users\n" + path.read_text())
    assert passwd(str(path), "bob", stdin="bob-pw\n").returncode == 0
    assert passwd(str(path), "alice", stdin="second\n").returncode == 0
    users = load_users(str(path))
    assert sorted(users) == ["alice", "bob"]
    assert users["alice"].verify(b"second") and not users["alice"].verify(b"first")
    assert path.read_text().startswith("# meshrouter users\n")            # comments kept
    assert passwd(str(path), "bob", "--delete").returncode == 0
    assert sorted(load_users(str(path))) == ["alice"]
    proc = passwd(str(path), "bob", "--delete")
    assert proc.returncode == 1 and "no user 'bob'" in proc.stderr


@pytest.mark.parametrize("user, stdin, message", [("a:b", "pw\n", "invalid user name"),
                                                    ("carol", "\n", "empty password")])
def test_passwd_refuses(tmp_path, user, stdin, message):
    proc = passwd(str(tmp_path / "users"), user, stdin=stdin)
    assert proc.returncode == 2 and message in proc.stderr, proc
    assert not (tmp_path / "users").exists()


def test_passwd_refuses_to_rewrite_a_broken_file(tmp_path):
    path = tmp_path / "users"
    path.write_text("garbage line\n")
    proc = passwd(str(path), "alice", stdin="pw\n")
    assert proc.returncode == 2 and "line 1" in proc.stderr
    assert path.read_text() == "garbage line\n"


def test_users_file_rereads_on_change(tmp_path):
    path = tmp_path / "users"
    path.write_text(f"alice:{hash_password('a')}\n")
    users = UsersFile(str(path))
    assert list(users.users) == ["alice"]
    path.write_text(f"alice:{hash_password('a')}\nbob:{hash_password('b')}\n")
    users.refresh()
    assert sorted(users.users) == ["alice", "bob"]
    path.write_text("broken\n")
    with pytest.raises(UsersFileError):
        users.refresh()
    assert sorted(users.users) == ["alice", "bob"]                     # the last good table stays
