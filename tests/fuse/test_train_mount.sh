#!/bin/bash
# `ptc train --data mount:MNT/datasets/NAME` through a real mount: dp2-pp2
# reads 7 steps of 4 windows from the mount's step files and saves while the
# store is mounted; a resume under pp=2 with a global batch of 6 reads the
# rest of the epoch. The per-step losses equal, bit for bit, the same two runs
# reading the dataset through the view library (--data dataset:NAME) from a
# second store, and after the unmount the audit of the mounted store says
# every one of the 112 windows was served exactly once.
. "$(dirname "$0")/lib.sh"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export OPENBLAS_NUM_THREADS=1
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
losses() { awk '/^step /{print $2, $4}' "$@"; }
python3 - "$T/tok.bin" <<'PY'
import random, struct, sys
r = random.Random(7)
n = 112 * 5
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[r.randrange(16) for _ in range(n)]))
PY
for st in m v; do
    "$PTC" dataset ingest --store "$T/$st" --name toks --format tokens:u16:5 "$T/tok.bin" > /dev/null
done
mount_store "$T/m"
c=(--schedule 1f1b --model $M --seed 3 --timeout 60 --save-every 0)
train() { # OUT NP ARGS...
    local out=$1 np=$2; shift 2
    if "${MPIRUN[@]}" -np "$np" "$PTC" train "${c[@]}" "$@" > "$out" 2> "$out.err"; then ok; else
        bad "ptc train $*: $(cat "$out.err")"; fi
}
train "$T/m1" 4 --config dp=2,pp=2 --microbatches 2 --data "mount:$MNT/datasets/toks" --store "$T/m" --steps 7
train "$T/m2" 2 --config pp=2 --microbatches 6 --data "mount:$MNT/datasets/toks" --store "$T/m" --steps 14 --resume
train "$T/v1" 4 --config dp=2,pp=2 --microbatches 2 --data dataset:toks --store "$T/v" --steps 7
train "$T/v2" 2 --config pp=2 --microbatches 6 --data dataset:toks --store "$T/v" --steps 14 --resume
[ "$(losses "$T/m1" "$T/m2" | wc -l)" = 21 ] && ok || bad "21 steps expected: $(cat "$T/m1" "$T/m2")"
[ "$(losses "$T/m1" "$T/m2")" = "$(losses "$T/v1" "$T/v2")" ] && ok ||
    bad "losses through the mount differ from the view library's: $(paste <(losses "$T/m1" "$T/m2") <(losses "$T/v1" "$T/v2"))"
grep -q '^saved version 2 (step 21)' "$T/m2" && ok || bad "no version 2 saved while mounted: $(cat "$T/m2")"
unmount_store
a=$("$PTC" dataset audit --store "$T/m" --name toks --seed 3 --epoch 0 --json)
[ "$a" = '{"samples":112,"once":112,"repeated":0,"missing":0}' ] && ok || bad "audit of the mounted store: $a"
"$PTC" verify --store "$T/m" > /dev/null && ok || bad "verify"
finish
