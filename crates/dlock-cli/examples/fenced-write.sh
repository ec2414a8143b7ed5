#!/bin/sh
# fenced-write FILE: replaces FILE with standard input as the holder of fencing token
# $DLOCK_FENCE (which `dlock run` gives its command), unless a write with a larger fence
# was accepted before: then FILE is left as it is and the exit code is 77.
#
#   dlock run report -- sh -c './build-report | fenced-write /srv/report.html'
#
# A holder paused past its lease (GC, swap, SIGSTOP) wakes with an older fence than the
# holder after it, and its late write is refused here, by the resource. The last accepted
# fence is kept in FILE.fence; flock(1) on FILE.lock makes the check and the write one
# step for every writer (on one machine, or a shared file system whose locks work).
set -eu
if [ $# -ne 1 ]; then
  echo "usage: fenced-write FILE (the new content on standard input, DLOCK_FENCE set)" >&2
  exit 64
fi
file=$1
fence=${DLOCK_FENCE-}
case $fence in
  '' | *[!0-9]*)
    echo "fenced-write: DLOCK_FENCE=\"$fence\" is not a fencing token: run me under dlock run" >&2
    exit 64 ;;
esac
# The new content is complete before the check, so the check and the switch are quick.
new=$(mktemp "$file.XXXXXX")
trap 'rm -f "$new"' EXIT
cat > "$new"
exec 9>>"$file.lock"
flock 9
last=$(cat "$file.fence" 2>/dev/null || echo 0)
if [ "$fence" -lt "$last" ]; then
  echo "fenced-write: refused: fence $fence is older than $last, the last accepted for $file (the lock moved on)" >&2
  exit 77
fi
# The fence first: a crash between the two leaves the old content under the new fence,
# which refuses a stale writer all the same.
echo "$fence" > "$file.fence.new" && mv "$file.fence.new" "$file.fence"
mv "$new" "$file"
trap - EXIT
