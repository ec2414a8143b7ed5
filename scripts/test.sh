#!/usr/bin/env bash
# Runs the whole test suite against real redis-server processes (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast "$@"
fi
