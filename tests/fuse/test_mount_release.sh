#!/usr/bin/env bash
# The mount lets go of versions (issue 33, item 8):
#  - 12 cycles of reshard / read through the mount / delete / gc: the
#    mount ends up holding no file of a deleted version (the space is free)
#    and its open files stay bounded;
#  - with `ulimit -n 64`, 30 versions of 4 pack files each all read through
#    one mount, each byte-equal to ptc export's (no EIO after ~25).
. "$(dirname "$0")/lib.sh"
s="$T/st"
"$PTC" synth --preset llama-tiny --seed 3 --layers 2 --out "$T/m.safetensors"
"$PTC" import --store "$s" --config tp=2 --rules llama "$T/m.safetensors" >/dev/null
held_deleted() { ls -l "/proc/$MOUNT_PID/fd" 2>/dev/null | grep -c '(deleted)' || true; }
nfds() { ls "/proc/$MOUNT_PID/fd" 2>/dev/null | wc -l; }
mount_store "$s"
most=0
for i in $(seq 1 12); do
    "$PTC" reshard --store "$s" --version 1 --to "tp=4,dp=$((i % 3 + 1))" >/dev/null
    v=$("$PTC" versions --store "$s" --json | python3 -c 'import json,sys; print(max(v["version"] for v in json.load(sys.stdin)["versions"]))')
    cat "$MNT/models/$v/model.safetensors" "$MNT/models/$v/dp1-tp4-pp1/rank-3.safetensors" >/dev/null
    "$PTC" versions delete --store "$s" "$v" >/dev/null
    "$PTC" gc --store "$s" >/dev/null
    n=$(nfds); [ "$n" -gt "$most" ] && most=$n
done
for _ in $(seq 1 50); do [ "$(held_deleted)" = 0 ] && break; sleep 0.1; done
if [ "$(held_deleted)" = 0 ]; then ok; else
    bad "the mount still holds $(held_deleted) deleted pack files after 12 cycles"; fi
if [ "$most" -lt 60 ]; then ok; else bad "the mount held up to $most files"; fi
unmount_store

# ---- many versions under a small open-file limit -----------------------------------------
for i in $(seq 2 30); do
    "$PTC" reshard --store "$s" --version 1 --to "tp=4,dp=$((i % 5 + 1))" >/dev/null
done
"$PTC" export --store "$s" --out "$T/whole.safetensors"
ulimit -n 64
mount_store "$s"
failed=0
for v in $("$PTC" versions --store "$s" --json | python3 -c 'import json,sys; print(" ".join(str(v["version"]) for v in json.load(sys.stdin)["versions"]))'); do
    cmp -s "$MNT/models/$v/model.safetensors" "$T/whole.safetensors" || failed=$((failed + 1))
    cat "$MNT/models/$v/dp1-tp4-pp1/rank-1.safetensors" >/dev/null || failed=$((failed + 1))
done
if [ $failed = 0 ]; then ok; else bad "$failed reads failed under ulimit -n 64"; fi
unmount_store
finish
