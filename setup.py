"""Everything is in pyproject.toml but the node's C helper, which cffi builds with the wheel: router/adapter/
hotpath.c as router.adapter._hotpath (`make` builds it in place for a checkout)."""

from setuptools import setup

setup(cffi_modules=["router/adapter/hotpath_build.py:ffibuilder"])
