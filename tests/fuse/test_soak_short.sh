#!/usr/bin/env bash
# labels: slow
# bench/soak_mount.sh for 20 s: 16 readers of step files, samples, model
# rank files of four configurations and bad paths, no error; the daemon's
# RSS and fd curve printed; kill -9 with readers active, a new mount serves
# and the audit agrees with what was served before the kill.
set -eu
: "${PTC:?PTC must name the ptc binary}"
: "${PTC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
if [ ! -r /dev/fuse ] || [ ! -w /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    [ "${CI:-}" = true ] && { echo "FAIL: no usable /dev/fuse or fusermount3 on a CI machine" >&2; exit 1; }
    echo "skipped: no usable /dev/fuse or fusermount3 here"; exit 77
fi
exec bash "$PTC_SRC/bench/soak_mount.sh" 20
