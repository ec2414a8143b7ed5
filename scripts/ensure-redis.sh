#!/usr/bin/env bash
# Sourced by the demo and test scripts: makes sure redis-server is installed (Debian package).
if ! { command -v redis-server || [ -x /usr/bin/redis-server ]; } >/dev/null 2>&1 || ! { command -v redis-cli || [ -x /usr/bin/redis-cli ]; } >/dev/null 2>&1; then
  echo "redis-server is missing: installing the Debian package redis-server..." >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2 && $SUDO apt-get install -y -qq redis-server >&2 || {
    echo "could not install redis-server; install it with: apt-get install redis-server" >&2
    exit 1
  }
fi
export PATH="$PATH:/usr/bin:/usr/sbin"
