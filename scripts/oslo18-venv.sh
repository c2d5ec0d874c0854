#!/usr/bin/env bash
# Build (or keep) .venv-oslo18: oslo.messaging 18.3.1 and meshrouter installed with `pip install .[oslo]`
# (from a copy of the checkout, so the build leaves no meshrouter.egg-info with the amqp entry point in it:
# the main venv's oslo.messaging 14.9.3 would then see two amqp drivers), plus tests/oslo18/requirements.txt.
# Idempotent: nothing happens unless the requirements, the packaging or router/'s sources changed.
# Exit 3 with a message on stderr if it cannot be built (no network to PyPI, no compiler...).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(realpath -m "${OSLO18_VENV:-.venv-oslo18}")
REQS=tests/oslo18/requirements.txt
PYTHON=${PYTHON:-$(/usr/bin/python3 -c 'import sys, ensurepip; assert sys.version_info >= (3, 11)' \
    2>/dev/null && echo /usr/bin/python3 || echo python3)}
key=$( (cat "$REQS" pyproject.toml setup.py; find router -type f \( -name '*.py' -o -name '*.c' \) | sort \
    | xargs sha256sum) | sha256sum | cut -d' ' -f1)
if [[ -f "$VENV/.installed" && "$(cat "$VENV/.installed")" == "$key" ]]; then
    exit 0
fi
log=$(mktemp)
trap 'rm -rf "$log" "${src:-}"' EXIT
fail() { echo "oslo18-venv: cannot build $VENV: $1 (log: last lines below)" >&2; tail -20 "$log" >&2; exit 3; }
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv --clear "$VENV" >"$log" 2>&1 || fail "python3 -m venv failed"
    "$VENV/bin/python" -m pip install -q --upgrade pip >>"$log" 2>&1 || fail "pip upgrade failed (PyPI reachable?)"
fi
src=$(mktemp -d)
cp -r router pyproject.toml setup.py README.md "$src"/
find "$src" -name '__pycache__' -prune -exec rm -rf {} + -o -name '_hotpath*.so' -exec rm -f {} +
# python-qpid-proton built from source as in the main venv (pip reuses the wheel it built there)
"$VENV/bin/python" -m pip install -q --no-binary python-qpid-proton -r "$REQS" "$src[oslo]" >>"$log" 2>&1 \
    || fail "pip install failed (PyPI reachable? a C compiler and OpenSSL/SASL headers: scripts/system-deps.sh)"
"$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$src" >>"$log" 2>&1 \
    || fail "reinstalling meshrouter failed"
# (from another directory: the checkout may hold a meshrouter.egg-info of the main venv's editable install)
(cd / && "$VENV/bin/python" - <<'PY') >>"$log" 2>&1 || fail "the amqp entry point does not resolve to router.oslo"
from stevedore import driver
mgr = driver.DriverManager("oslo.messaging.drivers", "amqp", invoke_on_load=False)
assert mgr.driver.__module__ == "router.oslo.driver", mgr.driver
PY
echo "$key" > "$VENV/.installed"
