# meshrouter: `make run` starts the four-node mesh demo, `make test` runs the whole suite.
VENV   ?= .venv
# The interpreter the venv is made from: the distribution's /usr/bin/python3 when it is 3.11+ and can make a
# venv, else python3 from the PATH. Debian's links the interpreter statically; pyenv's default build here
# (--enable-shared, no --enable-optimizations) costs the node ~12% more CPU per message (BENCHMARKS.md before
# issue 34 at commit 14a84a7, "The hot path in C").
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys, ensurepip; assert sys.version_info >= (3, 11)' \
            2>/dev/null && echo /usr/bin/python3 || echo python3)
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: run run-node test lint bench clean bytecode hotpath oslo18

# the second venv of the oslo.messaging 18.3.1 tests (tests/oslo18): oslo.messaging 18.3.1, this repo
# installed with `pip install .[oslo]`, the 18.3.1 functional tests' own requirements; cached, rebuilt
# when its inputs change (scripts/oslo18-venv.sh; the tests build it themselves when it is missing)
oslo18:
	bash scripts/oslo18-venv.sh

$(STAMP): pyproject.toml scripts/system-deps.sh scripts/build_proton.py
	bash scripts/system-deps.sh
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# python-qpid-proton's Proton-C extension compiled from its source (gcc, OpenSSL, SASL) with 1 KiB
	# transport buffers: an idle connection ~11 KiB instead of ~20 (scripts/build_proton.py)
	$(PY) scripts/build_proton.py
	$(PY) -m pip install -q --no-binary python-qpid-proton -e '.[test]'
	# oslo.messaging 14.9.3 here has its own `amqp` driver: keep it the only one (router/oslo is for 15+)
	$(PY) scripts/oslo-entry-point.py
	touch $(STAMP)

# byte-compile router/ (an editable install is not compiled, and with PYTHONDONTWRITEBYTECODE set every node
# start would compile ~110 modules: ~0.35 s instead of ~0.14 s from exec to a listener that answers; issue 21)
bytecode: $(STAMP) hotpath
	$(PY) -m compileall -q router >/dev/null

# the hot path's grouped Proton calls, router/adapter/hotpath.c, compiled with cffi into router/adapter/_hotpath
# (issue 21; rebuilt only when the source changed)
hotpath: $(STAMP)
	$(PY) router/adapter/hotpath_build.py >/dev/null

# the four-node mesh of topologies/four-node.yaml, an RPC demo (caller on C, server on A), then kept up
run: $(STAMP) bytecode
	$(VENV)/bin/meshrouter mesh run topologies/four-node.yaml --demo A:C

# one node alone, on amqp://127.0.0.1:5700
run-node: $(STAMP) bytecode
	$(VENV)/bin/meshrouter run config/node.yaml

test: $(STAMP) bytecode
	$(VENV)/bin/ruff check router tests benchmarks
	bash scripts/ensure-rabbitmq.sh
	# .venv-oslo18 for tests/oslo18 and tests/oslo/test_compat18.py, before their per-test time limits run
	# (a failure is reported by those tests, with the builder's message)
	-bash scripts/oslo18-venv.sh
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check router tests benchmarks

bench: $(STAMP) bytecode
	WITH_BENCH=1 bash scripts/system-deps.sh
	$(PY) benchmarks/headline.py

clean:
	rm -rf $(VENV) .venv-oslo18 .pytest_cache router/adapter/_hotpath*.so
