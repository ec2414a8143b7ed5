#!/usr/bin/env bash
# Runs dlock-torture, the fault-injection safety harness (docs/safety.md), against private
# redis-servers it starts and stops itself. Arguments go to dlock-torture, e.g. --quick,
# --json, --scenario client-pause, --rounds 50.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
echo "building dlock and dlock-torture (the first build takes a couple of minutes)..." >&2
cargo build --quiet -p dlock-cli -p dlock-torture
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
exec "${target_dir:-$PWD/target}/debug/dlock-torture" "$@"
