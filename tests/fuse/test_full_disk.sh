#!/usr/bin/env bash
# Read-only operations on a full disk (issue 33, item 7), on a store that
# never held a dataset: a detached ptc mount serves (exit 0 once it does),
# ptc gc with nothing to do, ptc dataset ls and ptc versions/info/verify
# succeed — none of them writes the database. Then, on the same full disk,
# a writer fails cleanly and the store is intact. The disk is a small tmpfs
# filled to the last byte (skipped where tmpfs cannot be mounted: not root).
. "$(dirname "$0")/lib.sh"
if [ ! -r /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "skipped: no usable /dev/fuse or fusermount3 here"; exit 77
fi
mkdir "$T/fs"
if ! mount -t tmpfs -o size=6m tmpfs "$T/fs" 2>/dev/null; then
    echo "skipped: cannot mount a tmpfs here (not root)"; exit 77
fi
# the detached mount's process may still hold the store's files for a moment after
# fusermount3 -u returns (EBUSY): wait up to 10 s for it to let go of the tmpfs
trap 'for _ in $(seq 100); do umount "$T/fs" 2>/dev/null && break; sleep 0.1; done; fuse_cleanup' EXIT
s="$T/fs/st"
"$PTC" synth --preset llama-tiny --seed 2 --layers 1 --out "$T/m.safetensors"
"$PTC" import --store "$s" --config tp=2 --rules llama "$T/m.safetensors" >/dev/null
"$PTC" versions --store "$s" >/dev/null   # LMDB's reader table exists
# fill the disk to the last byte
dd if=/dev/zero of="$T/fs/fill" bs=64k 2>/dev/null || true
dd if=/dev/zero of="$T/fs/fill2" bs=1 2>/dev/null || true
if [ "$(df --output=avail "$T/fs" | tail -1 | tr -d " ")" = 0 ]; then ok; else bad "the disk is not full"; fi
cp "$s/meta/data.mdb" "$T/data.before"

mkdir -p "$MNT"
if "$PTC" mount --store "$s" "$MNT" 2>"$T/mount.err"; then ok; else
    bad "detached mount on a full disk failed: $(cat "$T/mount.err")"; fi
if is_mounted && "$PTC" export --store "$s" --out "$T/e.safetensors" &&
    cmp -s "$MNT/models/1/model.safetensors" "$T/e.safetensors"; then ok; else
    bad "the mount does not serve version 1"; fi
fusermount3 -u "$MNT" || bad "unmount"
if "$PTC" gc --store "$s" >"$T/gc.out" && grep -q "removed 0 files" "$T/gc.out"; then ok; else
    bad "gc of nothing on a full disk: $(cat "$T/gc.out")"; fi
if out=$("$PTC" dataset ls --store "$s" --json) && [ "$out" = '{"datasets":[]}' ]; then ok; else
    bad "dataset ls on a full disk: $out"; fi
for c in "versions" "info" "verify --all"; do
    # shellcheck disable=SC2086
    if "$PTC" $c --store "$s" >/dev/null; then ok; else bad "ptc $c on a full disk"; fi
done
if cmp -s "$s/meta/data.mdb" "$T/data.before"; then ok; else bad "a reader changed data.mdb"; fi
# a writer fails cleanly, nothing changes
printf 'a\nb\n' >"$T/l.txt"
set +e
"$PTC" dataset ingest --store "$s" --name d --format lines "$T/l.txt" >/dev/null 2>"$T/e"
rc=$?
set -e
if [ $rc = 1 ] && grep -q "^ptc: error: " "$T/e"; then ok; else bad "ingest on a full disk: exit $rc"; fi
rm -f "$T/fs/fill" "$T/fs/fill2"
if "$PTC" verify --store "$s" --all >/dev/null && [ "$("$PTC" dataset ls --store "$s")" = "" ]; then
    ok; else bad "the store after a full disk"; fi
finish
