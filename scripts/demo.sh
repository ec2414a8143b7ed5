#!/usr/bin/env bash
# Demo: five `dlock run` processes contend for one lock while each does a read-sleep-write
# on a shared counter file. Every increment happens under the lock, so none is lost.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh

source scripts/build-dlock.sh
source scripts/private-redis.sh
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
for job in $(jobs -p); do [ "$job" = "$REDIS_PID" ] || wait "$job"; done

final=$(cat "$COUNTER")
echo "final counter: $final (expected 20)"
[ "$final" -eq 20 ]
