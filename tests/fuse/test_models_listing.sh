#!/usr/bin/env bash
# models/ and datasets/ of a live mount list what the store holds now: a
# version committed (ptc reshard) or deleted, and a dataset ingested, after
# the first listing show up in the next one, and the new version's files
# read the same bytes as ptc export. The other directories are fixed and
# keep the kernel's cached listing.
. "$(dirname "$0")/lib.sh"

"$PTC" synth --preset llama-tiny --seed 4 --out "$T/m.safetensors"
s="$T/store"
"$PTC" import --store "$s" --config tp=2 --rules llama "$T/m.safetensors" >/dev/null
seq 1 10 >"$T/lines.txt"
"$PTC" dataset ingest --store "$s" --name a --format lines "$T/lines.txt" >/dev/null
mount_store "$s"

lists() { # lists DIR WANT: the listing of DIR (one line, sorted) is WANT
    local got
    got=$(ls "$MNT/$1" | sort | tr '\n' ' ' | sed 's/ $//')
    if [ "$got" = "$2" ]; then ok; else bad "$1 lists '$got', want '$2'"; fi
}
lists models "1"
lists datasets "a"
ls "$MNT/models/1" >/dev/null

"$PTC" reshard --store "$s" --to tp=1 >/dev/null
lists models "1 2"
"$PTC" reshard --store "$s" --to dp=2,tp=2 >/dev/null
lists models "1 2 3"
"$PTC" export --store "$s" --version 3 --rank 1 --out "$T/v3r1.safetensors"
if cmp -s "$T/v3r1.safetensors" "$MNT/models/3/dp2-tp2-pp1/rank-1.safetensors"; then ok; else
    bad "models/3/dp2-tp2-pp1/rank-1.safetensors differs from ptc export --rank 1"; fi
"$PTC" versions --store "$s" delete 2 >/dev/null
lists models "1 3"
"$PTC" dataset ingest --store "$s" --name b --format lines "$T/lines.txt" >/dev/null
lists datasets "a b"
lists models/1 "info.json model.safetensors"

unmount_store
finish
