#!/usr/bin/env bash
# Sourced: builds the release `dlock` binary and sets DLOCK to its path, wherever cargo
# puts it (CARGO_TARGET_DIR, a workspace target-dir setting, or ./target). DLOCK_FEATURES
# (e.g. spawn, for `dlock bench --spawn`) are built in when set.
echo "building dlock (release; the first build takes a couple of minutes)..." >&2
cargo build --quiet --release -p dlock-redis-cli ${DLOCK_FEATURES:+--features "$DLOCK_FEATURES"}
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
DLOCK="${target_dir:-$PWD/target}/release/dlock"
[ -x "$DLOCK" ] || { echo "built dlock not found at $DLOCK" >&2; exit 1; }
