#!/usr/bin/env bash
# Sourced: starts a private redis-server on the first free port from 16379 on, in a temp
# dir, and stops exactly that process on exit. Sets WORK, REDIS_PID and DLOCK_REDIS.
# A server is used only once it answers with the process id we started: a redis-server
# (or anything else) already listening on a port is never adopted, and nothing is written
# to it.
WORK=$(mktemp -d)
REDIS_PID=""
cleanup_private_redis() {
  if [ -n "$REDIS_PID" ]; then
    kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup_private_redis EXIT

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

for port in $(seq 16379 16479); do
  port_in_use "$port" && continue
  redis-server --port "$port" --bind 127.0.0.1 --save "" --dir "$WORK" \
    --logfile "$WORK/redis.log" --daemonize no &
  REDIS_PID=$!
  for _ in $(seq 50); do
    answered=$(redis-cli -p "$port" INFO server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p' || true)
    [ "$answered" = "$REDIS_PID" ] && break 2
    kill -0 "$REDIS_PID" 2>/dev/null || break # it exited: the port was taken meanwhile
    sleep 0.1
  done
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=""
done
[ -n "$REDIS_PID" ] || { echo "could not start a private redis-server on ports 16379-16479" >&2; exit 1; }
export DLOCK_REDIS="redis://127.0.0.1:$port"
