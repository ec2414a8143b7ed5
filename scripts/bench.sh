#!/usr/bin/env bash
# Runs `dlock bench` (release build) against a private redis-server it starts and stops
# itself (--spawn, built in with the feature `spawn`, which the published binary leaves off).
# Extra arguments go to `dlock bench`, e.g. --quick, --duration 5s or --json.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
DLOCK_FEATURES=spawn source scripts/build-dlock.sh
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $(nproc) cores" >&2
"$DLOCK" bench --spawn "$@"
