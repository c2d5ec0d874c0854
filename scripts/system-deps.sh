#!/usr/bin/env bash
# Installs the Debian packages needed to compile python-qpid-proton from source (C compiler,
# Python headers, OpenSSL and Cyrus SASL headers found through pkg-config: without them pip builds
# Proton without TLS or Cyrus SASL, silently), venv support for the distribution's python3 (the Makefile
# prefers it), what TLS and SASL need at run time (Cyrus' PLAIN and ANONYMOUS plugins and its sasldb
# backend, saslpasswd2 to manage a sasldb, the openssl command the tests make certificates with), a Java
# runtime for PySpark (`meshrouter analyze`) and, optionally, the Proton-C library the benchmark load
# generator links against, and Chromium for the browser tests.
# Does nothing when everything is already there; needs root (or sudo) otherwise.
set -euo pipefail
want=(gcc make pkg-config python3-dev python3-venv libssl-dev libsasl2-dev
      libsasl2-modules libsasl2-modules-db sasl2-bin openssl)
[ "${WITH_BENCH:-0}" = 1 ] && want+=(libqpid-proton11-dev)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# `meshrouter analyze` (PySpark) needs a Java runtime; any Java 17+ on the PATH will do.
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
# Optional, for the tests only: a headless browser for the web console and report tests (skipped, saying
# so, without it).
optional=()
command -v chromium >/dev/null 2>&1 || optional+=(chromium)
[ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v apt-get >/dev/null; then
  [ ${#missing[@]} -eq 0 ] && exit 0
  echo "system-deps: missing ${missing[*]} and no apt-get here: install them by hand" >&2
  exit 1
fi
$SUDO apt-get update -qq || true
if [ ${#missing[@]} -gt 0 ]; then
  echo "system-deps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "system-deps: installing ${optional[*]} (optional: browser tests)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${optional[@]}" \
    || echo "system-deps: could not install ${optional[*]}: the browser tests will be skipped" >&2
fi
