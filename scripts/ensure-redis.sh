#!/usr/bin/env bash
# Sourced by the demo and test scripts: makes sure redis-server is installed (Debian package).
if ! { command -v redis-server || [ -x /usr/bin/redis-server ]; } >/dev/null 2>&1 || ! { command -v redis-cli || [ -x /usr/bin/redis-cli ]; } >/dev/null 2>&1; then
  echo "redis-server is missing: installing the Debian package redis-server..." >&2
  source "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
  apt_install redis-server "install it with: apt-get install redis-server"
fi
export PATH="$PATH:/usr/bin:/usr/sbin"
