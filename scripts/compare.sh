#!/usr/bin/env bash
# Peers side by side (not run in CI): installs dlock's peers from the package registries
# into a temporary directory (nothing global), starts one private redis-server on a free
# loopback port, runs the loops of `dlock bench` over each implementation against it, one
# after another in this one run, and prints one table (docs/benchmarks.md, "Peers side by
# side", says what each column measures).
#
# The peers, pinned:
#   PyPI (pip --target):       redis[hiredis]==8.1.0 (redis-py's Lock, default settings and
#                              again with a 1 ms sleep), python-redis-lock==4.0.1,
#                              pottery==3.0.1 (Redlock), redis-fifo-lock==0.3.2
#   npm (npm install --prefix): redis-semaphore@5.8.0 over ioredis@5.11.1 (default settings,
#                              and again with a 1 ms retryInterval)
#   crates.io:                 rslock =0.10.0 (scripts/compare/rust, a cargo project of its
#                              own with its own Cargo.lock and target directory)
# dlock runs twice: through the same Rust driver as rslock (every column, commands per
# acquisition included) and through `dlock bench --json` itself (scripts/build-dlock.sh;
# its seq, handoff, handoff_fair and handoff_semaphore rows), as a cross-check.
#
# Options:
#   --duration SECS  how long each loop runs (default 5)
#   --keep           keep the temporary directory (installs, logs, raw JSON lines)
#   --json           print one JSON object per table row instead of the table
#   --skip-failed    a peer that cannot be installed or fails goes on the table marked
#                    as failed, and the others run; without it the script stops there
#   --no-bench       leave out the `dlock bench` cross-check (and its release build)
# Environment: DLOCK_COMPARE_TARGET, the Rust driver's target directory (default
# ${XDG_CACHE_HOME:-~/.cache}/dlock-compare/target, kept between runs to save the build);
# CARGO_TARGET_DIR, where scripts/build-dlock.sh builds dlock.
set -euo pipefail

duration=5
keep=false
json=false
skip_failed=false
with_bench=true
while [ $# -gt 0 ]; do
  case "$1" in
    --duration)
      duration="${2:-}"
      shift 2 || { echo "--duration needs a number of seconds" >&2; exit 2; }
      ;;
    --keep) keep=true; shift ;;
    --json) json=true; shift ;;
    --skip-failed) skip_failed=true; shift ;;
    --no-bench) with_bench=false; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ "$duration" =~ ^[0-9]+([.][0-9]+)?$ ]] || ! awk -v d="$duration" 'BEGIN { exit !(d >= 0.1 && d <= 3600) }'; then
  echo "--duration $duration is out of range: give seconds from 0.1 to 3600" >&2
  exit 2
fi
duration_ms=$(awk -v d="$duration" 'BEGIN { printf "%d", d * 1000 }')

cd "$(dirname "$0")/.."
root=$PWD
compare="$root/scripts/compare"

PY_REDIS="redis[hiredis]==8.1.0"
# Each PyPI peer in a directory of its own, beside the one redis-py every peer uses.
declare -A PY_PINS=([redis-py]="" [python-redis-lock]="python-redis-lock==4.0.1"
  [pottery]="pottery==3.0.1" [redis-fifo-lock]="redis-fifo-lock==0.3.2")
NPM_PINS=(redis-semaphore@5.8.0 ioredis@5.11.1)
rust_target="${DLOCK_COMPARE_TARGET:-${XDG_CACHE_HOME:-$HOME/.cache}/dlock-compare/target}"

source scripts/ensure-redis.sh
# Sets WORK (a fresh temp dir), REDIS_PID and DLOCK_REDIS; its own clean-up trap is
# replaced below by one that also honours --keep.
source scripts/private-redis.sh
url="$DLOCK_REDIS"
cleanup() {
  if [ -n "${REDIS_PID:-}" ]; then
    kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
    REDIS_PID=""
  fi
  if $keep; then
    echo "kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$WORK/logs"
results="$WORK/results.jsonl"
: >"$results"

# A peer that could not be installed or run: stop, or with --skip-failed mark its rows.
failed() { # failed LABEL... -- REASON
  local labels=() reason
  while [ "$1" != "--" ]; do labels+=("$1"); shift; done
  reason="$2"
  echo "compare: $reason" >&2
  $skip_failed || exit 1
  for label in "${labels[@]}"; do
    python3 -c 'import json, sys; print(json.dumps({"impl": sys.argv[1], "failed": sys.argv[2]}))' \
      "$label" "$reason" >>"$results"
  done
}
show_log() { tail -n 15 "$1" | sed 's/^/    /' >&2; }

command -v python3 >/dev/null || { echo "compare: python3 is needed (for the PyPI peers and the table)" >&2; exit 1; }

# -- install ----------------------------------------------------------------------------
declare -A ready=()
echo "installing the PyPI peers into $WORK/py (pip --target)..." >&2
for peer in redis-py python-redis-lock pottery redis-fifo-lock; do
  pins=("$PY_REDIS")
  [ -n "${PY_PINS[$peer]}" ] && pins+=("${PY_PINS[$peer]}")
  log="$WORK/logs/install-$peer.log"
  if python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$WORK/py/$peer" "${pins[@]}" >"$log" 2>&1; then
    ready[$peer]=1
  else
    show_log "$log"
    labels=("$peer")
    [ "$peer" = redis-py ] && labels=("redis-py Lock" "redis-py Lock, sleep=1ms")
    [ "$peer" = pottery ] && labels=("pottery Redlock")
    failed "${labels[@]}" -- "PyPI: could not install ${pins[*]} for $peer (registry unreachable, pip missing or a failed build: see the log above)"
  fi
done

echo "installing the npm peer into $WORK/npm (npm install --prefix)..." >&2
log="$WORK/logs/install-npm.log"
if command -v npm >/dev/null && command -v node >/dev/null &&
  npm install --prefix "$WORK/npm" --no-audit --no-fund --loglevel=error "${NPM_PINS[@]}" >"$log" 2>&1; then
  ready[redis-semaphore]=1
else
  [ -s "$log" ] && show_log "$log"
  failed "redis-semaphore" "redis-semaphore, retryInterval 1ms" -- "npm: could not install ${NPM_PINS[*]} (registry unreachable, node or npm missing: see the log above)"
fi

echo "building the Rust driver (rslock 0.10.0 and dlock) into $rust_target..." >&2
log="$WORK/logs/build-rust.log"
if command -v cargo >/dev/null &&
  cargo build --release --quiet --manifest-path "$compare/rust/Cargo.toml" --target-dir "$rust_target" >"$log" 2>&1; then
  ready[rust]=1
  driver="$rust_target/release/dlock-compare-peers"
else
  [ -s "$log" ] && show_log "$log"
  failed "dlock mutex" "dlock fair mutex" "rslock 0.10.0" -- "crates.io: could not build scripts/compare/rust with rslock 0.10.0 (registry unreachable, or cargo missing)"
fi

if $with_bench; then
  log="$WORK/logs/build-dlock.log"
  # A shell of its own: build-dlock.sh exits the shell that sources it on failure, and
  # errexit does not reach into a subshell tested by `if`.
  if DLOCK=$(bash -ec 'source scripts/build-dlock.sh; echo "$DLOCK"' 2>"$log"); then
    ready[bench]=1
  else
    show_log "$log"
    failed "dlock mutex (dlock bench)" "dlock fair mutex (dlock bench)" -- "could not build dlock (scripts/build-dlock.sh)"
  fi
fi

# -- run --------------------------------------------------------------------------------
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') at $url, $(nproc) cores; ${duration}s per loop" >&2
# A driver's loops take about 3 durations; a hung one is stopped well after that.
limit=$(awk -v d="$duration" 'BEGIN { printf "%d", d * 6 + 120 }')

run_peer() { # run_peer LABEL... -- COMMAND...
  local labels=() log
  while [ "$1" != "--" ]; do labels+=("$1"); shift; done
  shift
  log="$WORK/logs/run-${labels[0]//[^A-Za-z0-9]/_}.log"
  echo "running ${labels[*]}..." >&2
  local status=0
  timeout --foreground "$limit" "$@" >"$log.out" 2>"$log" || status=$?
  case "$status" in
    0) cat "$log.out" >>"$results" ;;
    130 | 143) exit "$status" ;; # interrupted (Ctrl-C): no peer failed
    124)
      show_log "$log"
      failed "${labels[@]}" -- "${labels[0]} did not finish within ${limit}s (log above)"
      ;;
    *)
      show_log "$log"
      failed "${labels[@]}" -- "${labels[0]} failed while running, exit status $status (log above)"
      ;;
  esac
}

if [ -n "${ready[rust]:-}" ]; then
  run_peer "dlock mutex" -- "$driver" --url "$url" --duration "$duration" --peer dlock
  run_peer "dlock fair mutex" -- "$driver" --url "$url" --duration "$duration" --peer dlock-fair
fi
if [ -n "${ready[bench]:-}" ]; then
  echo "running dlock bench (every scenario; the table reads four)..." >&2
  log="$WORK/logs/run-dlock-bench.log"
  status=0
  timeout --foreground $((limit * 20)) "$DLOCK" --redis "$url" bench --json --duration "${duration_ms}ms" \
    --renew-locks 1 >"$WORK/bench.jsonl" 2>"$log" || status=$?
  case "$status" in
    0) python3 "$compare/table.py" --from-bench <"$WORK/bench.jsonl" >>"$results" ;;
    130 | 143) exit "$status" ;;
    *)
      show_log "$log"
      failed "dlock mutex (dlock bench)" "dlock fair mutex (dlock bench)" -- "dlock bench failed while running, exit status $status (log above)"
      ;;
  esac
fi
if [ -n "${ready[rust]:-}" ]; then
  run_peer "rslock 0.10.0" -- "$driver" --url "$url" --duration "$duration" --peer rslock
fi
for peer in redis-py redis-py-1ms python-redis-lock pottery redis-fifo-lock; do
  install="${peer%-1ms}"
  [ -n "${ready[$install]:-}" ] || continue
  case "$peer" in
    redis-py) label="redis-py Lock" ;;
    redis-py-1ms) label="redis-py Lock, sleep=1ms" ;;
    pottery) label="pottery Redlock" ;;
    *) label="$peer" ;;
  esac
  run_peer "$label" -- env PYTHONPATH="$WORK/py/$install" python3 "$compare/peers.py" --url "$url" --duration "$duration" --peer "$peer"
done
if [ -n "${ready[redis-semaphore]:-}" ]; then
  for peer in redis-semaphore redis-semaphore-1ms; do
    label="redis-semaphore"
    [ "$peer" = redis-semaphore-1ms ] && label="redis-semaphore, retryInterval 1ms"
    run_peer "$label" -- env NODE_PATH="$WORK/npm/node_modules" node "$compare/peers.mjs" --url "$url" --duration "$duration" --peer "$peer"
  done
fi

# -- report -----------------------------------------------------------------------------
if $json; then
  python3 "$compare/table.py" --json <"$results"
else
  python3 "$compare/table.py" <"$results"
fi
