"""Fault tests: the system tests' fixtures (``proxy_factory``) apply here too."""

from tests.system.conftest import proxy_factory  # noqa: F401
