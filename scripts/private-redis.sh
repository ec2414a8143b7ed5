#!/usr/bin/env bash
# Sourced: starts a private redis-server on the first free port from 16379 on, in a temp
# dir, and stops exactly that process on exit. Sets WORK, REDIS_PID and DLOCK_REDIS.
# Needs $DLOCK (the dlock binary) to probe the server.
WORK=$(mktemp -d)
REDIS_PID=""
cleanup_private_redis() {
  if [ -n "$REDIS_PID" ]; then
    kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup_private_redis EXIT

for port in $(seq 16379 16479); do
  redis-server --port "$port" --bind 127.0.0.1 --save "" --dir "$WORK" \
    --logfile "$WORK/redis.log" --daemonize no &
  REDIS_PID=$!
  for _ in $(seq 50); do
    if "$DLOCK" --redis "redis://127.0.0.1:$port" acquire dlock-probe --ttl 10ms >/dev/null 2>&1; then
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
