#!/usr/bin/env bash
# Demo: five `dlock run` processes contend for one lock while each does a read-sleep-write
# on a shared counter file. Every increment happens under the lock, so none is lost.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh

cargo build --quiet --release -p dlock-cli
DLOCK="$PWD/target/release/dlock"
WORK=$(mktemp -d)
REDIS_PID=""
cleanup() {
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# A private redis-server on the first free port from 16379 on.
for port in $(seq 16379 16479); do
  redis-server --port "$port" --bind 127.0.0.1 --save "" --dir "$WORK" \
    --logfile "$WORK/redis.log" --daemonize no &
  REDIS_PID=$!
  for _ in $(seq 50); do
    if "$DLOCK" --redis "redis://127.0.0.1:$port" acquire demo-probe --ttl 10ms >/dev/null 2>&1; then
      break 2
    fi
    kill -0 "$REDIS_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=""
done
[ -n "$REDIS_PID" ] || { echo "could not start redis-server" >&2; exit 1; }
export DLOCK_REDIS="redis://127.0.0.1:$port"
echo "redis-server on port $port; 5 workers x 4 rounds on lock 'demo-counter'"

COUNTER="$WORK/counter"
echo 0 > "$COUNTER"
# The critical section: read, pause (so an unprotected race would lose updates), write.
CRITICAL='v=$(cat "$COUNTER"); sleep 0.05; echo $((v + 1)) > "$COUNTER"
echo "worker $WORKER holds $DLOCK_NAME with fencing token $DLOCK_FENCE: counter $v -> $((v + 1))"'
export COUNTER
for worker in 1 2 3 4 5; do
  (
    for _ in 1 2 3 4; do
      WORKER=$worker "$DLOCK" run demo-counter --ttl 5s -- sh -c "$CRITICAL"
    done
  ) &
done
wait $(jobs -p | grep -v "^$REDIS_PID$")

final=$(cat "$COUNTER")
echo "final counter: $final (expected 20)"
[ "$final" -eq 20 ]
