#!/usr/bin/env bash
# Runs the whole test suite against real redis-server processes (installed when missing).
# The README's Rust snippets and the API docs' examples are compiled as doc tests first;
# the last lines printed are the test runner's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
if cargo nextest --version >/dev/null 2>&1; then
  cargo test --workspace --doc
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
