#!/usr/bin/env bash
# Runs `dlock bench` (release build) against a private redis-server. Extra arguments go to
# `dlock bench`, e.g. --duration 5s or --json.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
source scripts/build-dlock.sh
source scripts/private-redis.sh
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on port $port, $(nproc) cores"
"$DLOCK" bench "$@"
