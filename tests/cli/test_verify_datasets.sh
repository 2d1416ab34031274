#!/usr/bin/env bash
# Datasets are verified (issue 33, item 6): ptc verify --all checks every
# dataset's records and index and works on a store that holds only
# datasets; a flipped bit in a dataset pack (raw or zstd, in the records or
# in the index) is found and named; --dataset NAME checks one.
. "$(dirname "$0")/lib.sh"
cd "$T"
seq 1 50000 >l.txt
"$PTC" dataset ingest --store st --name raw --format lines l.txt >/dev/null
"$PTC" dataset ingest --store st --name zst --format lines --compress zstd l.txt >/dev/null
if "$PTC" verify --store st --all >out && grep -q "verified" out; then ok; else
    bad "verify --all on a store of datasets only: $(cat out)"; fi
if [ "$("$PTC" verify --store st --all --json)" = '{"ok":true,"versions":[],"datasets":["raw","zst"]}' ]; then
    ok; else bad "verify --all --json: $("$PTC" verify --store st --all --json)"; fi
expect_fail 1 "holds no version" -- "$PTC" verify --store st
expect_fail 2 "exclude" -- "$PTC" verify --store st --all --dataset raw
expect_fail 1 "no dataset 'nope'" -- "$PTC" verify --store st --dataset nope

# flip one bit at OFFSET of the pack of dataset NAME (in a copy of the store)
flip() {
    rm -rf c && cp -r st c
    python3 - "c/packs/datasets/$1" "$2" <<'PY'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off); b = f.read(1)[0]; f.seek(off); f.write(bytes([b ^ 0x20]))
PY
}
id() { "$PTC" dataset info --store st --name "$1" --json | python3 -c 'import json,sys; print("d%d.pack" % json.load(sys.stdin)["id"])'; }
raw=$(id raw) zst=$(id zst)
size() { stat -c %s "st/packs/datasets/$1"; }
for target in "$raw 100" "$raw $(($(size "$raw") - 5))" "$zst 200" "$zst $(($(size "$zst") - 5))"; do
    set -- $target
    flip "$1" "$2"
    expect_fail 1 "dataset '" "$1" -- "$PTC" verify --store c --all
done
flip "$raw" 100
expect_fail 1 "dataset 'raw'" -- "$PTC" verify --store c --dataset raw
if "$PTC" verify --store c --dataset zst >/dev/null; then ok; else bad "the other dataset fails"; fi
finish
