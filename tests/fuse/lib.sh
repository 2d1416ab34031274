# Shared helpers of the FUSE test scripts (sourced): the CLI helpers, plus
# mounting a store for real in a temp dir with a bounded wait and an
# unmount in the EXIT trap, whatever happens.
. "$(dirname "$0")/../cli/lib.sh"
MNT="$T/mnt"
MOUNT_PID=""

fuse_cleanup() {
    if [ -n "$MOUNT_PID" ]; then
        fusermount3 -u "$MNT" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$MOUNT_PID" 2>/dev/null || break; sleep 0.1; done
        kill "$MOUNT_PID" 2>/dev/null || true
    fi
    fusermount3 -u "$MNT" 2>/dev/null || true
    rm -rf "$T"
}
trap fuse_cleanup EXIT

is_mounted() { [ "$(stat -c %d "$MNT" 2>/dev/null)" != "$(stat -c %d "$MNT/.." 2>/dev/null)" ]; }

# mount_store STORE [OPTION...]: ptc mount -f in the background (with the
# given options); waits (at most 10 s)
# for the tree to appear. Exits 77 (skipped) only where this machine has no
# usable /dev/fuse or no fusermount3, and never under CI (CI=true), whose
# machines have both; a mount that fails otherwise fails the test.
mount_store() {
    if [ ! -r /dev/fuse ] || [ ! -w /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
        if [ "${CI:-}" = true ]; then
            echo "FAIL: no usable /dev/fuse or fusermount3 on a CI machine" >&2; exit 1
        fi
        echo "skipped: no usable /dev/fuse or fusermount3 here"; exit 77
    fi
    mkdir -p "$MNT"
    "$PTC" mount --store "$1" "$MNT" -f "${@:2}" 2>"$T/mount.err" &
    MOUNT_PID=$!
    for _ in $(seq 100); do
        is_mounted && [ -e "$MNT/README.txt" ] && return 0
        if ! kill -0 "$MOUNT_PID" 2>/dev/null; then
            MOUNT_PID=""
            echo "FAIL: ptc mount ended: $(cat "$T/mount.err")" >&2; exit 1
        fi
        sleep 0.1
    done
    echo "FAIL: the mount did not appear within 10 s" >&2; exit 1
}

# unmount_store: fusermount3 -u and wait (at most 10 s) for ptc mount to end
# with status 0 (its served counts are durable then).
unmount_store() {
    fusermount3 -u "$MNT"
    local st=0
    wait "$MOUNT_PID" || st=$?
    MOUNT_PID=""
    if [ "$st" = 0 ]; then ok; else bad "ptc mount exited $st: $(cat "$T/mount.err")"; fi
}
