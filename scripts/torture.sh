#!/usr/bin/env bash
# Runs dlock-torture, the fault-injection safety harness (docs/safety.md), against private
# redis-servers (and, for the redlock-clock-* scenarios, valkey-servers) it starts and stops itself. Arguments go to dlock-torture, e.g. --quick,
# --json, --scenario client-pause, --rounds 50.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
# redlock-clock-jump and redlock-clock-offset move masters' wall clocks with libfaketime (Debian's package),
# which cannot wrap Debian's redis-server (built with jemalloc: it never starts), so their
# masters are Valkey (scripts/ensure-valkey.sh); every other scenario runs on Redis.
# (Not for what only prints: --help, --list, --version.)
informational=false
for arg in "$@"; do
  case $arg in -h|--help|--list|-V|--version) informational=true ;; esac
done
if [ "$informational" = false ] && [ -z "${DLOCK_TORTURE_FAKETIME:-}" ]; then
  faketime_lib() { dpkg -L libfaketime 2>/dev/null | grep '/libfaketime\.so\.1$' | head -1; }
  if [ -z "$(faketime_lib)" ]; then
    echo "libfaketime is missing (the redlock-clock-* scenarios need it): installing the Debian package libfaketime..." >&2
    source scripts/apt-install.sh
    apt_install libfaketime "install it with: apt-get install libfaketime, or set DLOCK_TORTURE_FAKETIME to libfaketime.so.1"
  fi
  DLOCK_TORTURE_FAKETIME=$(faketime_lib)
  export DLOCK_TORTURE_FAKETIME
fi
if [ "$informational" = false ] && [ -z "${DLOCK_TORTURE_VALKEY:-}" ]; then
  # In a subshell: REDIS_SERVER stays what it was for the other scenarios.
  DLOCK_TORTURE_VALKEY=$(unset REDIS_SERVER REDIS_CLI; source scripts/ensure-valkey.sh >&2; echo "$REDIS_SERVER")
  export DLOCK_TORTURE_VALKEY
fi
echo "building dlock and dlock-torture (the first build takes a couple of minutes)..." >&2
cargo build --quiet -p dlock-redis-cli -p dlock-torture
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
exec "${target_dir:-$PWD/target}/debug/dlock-torture" "$@"
