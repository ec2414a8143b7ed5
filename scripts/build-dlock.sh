#!/usr/bin/env bash
# Sourced: builds the release `dlock` binary and sets DLOCK to its path, wherever cargo
# puts it (CARGO_TARGET_DIR, a workspace target-dir setting, or ./target).
echo "building dlock (release; the first build takes a couple of minutes)..." >&2
cargo build --quiet --release -p dlock-cli
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
DLOCK="${target_dir:-$PWD/target}/release/dlock"
[ -x "$DLOCK" ] || { echo "built dlock not found at $DLOCK" >&2; exit 1; }
