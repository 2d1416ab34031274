#!/bin/bash
# Training overhead of the dataset path: the mean step time of `ptc train`
# reading its batches through a ptc mount (--data mount:MNT/datasets/NAME)
# and through the view library (--data dataset:NAME) divided by the step time
# with the same token windows held in memory (--data tokens:FILE: the file is
# read once at start). The model is sized so that a step takes >= 20 ms.
# Rounds are interleaved; medians over rounds are printed with the ratios.
#
# usage: bench/bench_train_data.sh [PTC] [ROUNDS]   (default build/ptc, 5)
set -eu
PTC=${1:-build/ptc}
ROUNDS=${2:-5}
PTC=$(cd "$(dirname "$PTC")" && pwd)/$(basename "$PTC")
T=$(mktemp -d)
MNT="$T/mnt"
MOUNT_PID=""
cleanup() {
    [ -n "$MOUNT_PID" ] && { fusermount3 -u "$MNT" 2> /dev/null || true; wait "$MOUNT_PID" || true; }
    rm -rf "$T"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
TOK=128
M=mlp:layers=4,hidden=128,vocab=256,tokens=$TOK
STEPS=20
# 4000 windows of TOK+1 tokens
python3 - "$T/tok.bin" $TOK <<'PY'
import random, struct, sys
r = random.Random(1)
n = 4000 * (int(sys.argv[2]) + 1)
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[r.randrange(256) for _ in range(n)]))
PY
"$PTC" dataset ingest --store "$T/s" --name toks --format tokens:u16:$((TOK + 1)) "$T/tok.bin" > /dev/null
mkdir -p "$MNT"
"$PTC" mount --store "$T/s" "$MNT" -f 2> "$T/mount.err" &
MOUNT_PID=$!
for _ in $(seq 100); do [ -e "$MNT/README.txt" ] && break; sleep 0.1; done
[ -e "$MNT/README.txt" ] || { echo "the mount did not appear: $(cat "$T/mount.err")" >&2; exit 1; }

step_ms() { # DATA -> mean step_ms after the first 3 steps
    "${MPIRUN[@]}" -np 2 "$PTC" train --config dp=2 --schedule 1f1b --microbatches 4 --model $M \
        --seed 1 --steps $STEPS --data "$1" --store "$T/s" --json 2> /dev/null |
        python3 -c 'import json,sys; s=json.load(sys.stdin)["steps"][3:]; print("%.3f" % (sum(x["step_ms"] for x in s)/len(s)))'
}
declare -A all
for r in $(seq "$ROUNDS"); do
    for d in "tokens:$T/tok.bin" "dataset:toks" "mount:$MNT/datasets/toks"; do
        v=$(step_ms "$d")
        all[$d]="${all[$d]:-} $v"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mem=$(echo "${all[tokens:$T/tok.bin]}" | median)
lib=$(echo "${all[dataset:toks]}" | median)
mnt=$(echo "${all[mount:$MNT/datasets/toks]}" | median)
echo "model $M, dp=2, 4 micro-batches per replica, $STEPS steps, $ROUNDS interleaved rounds (median of per-run mean step times)"
printf '%-34s %10s ms   runs:%s\n' "in memory (tokens:FILE)" "$mem" "${all[tokens:$T/tok.bin]}"
printf '%-34s %10s ms   runs:%s\n' "view library (dataset:NAME)" "$lib" "${all[dataset:toks]}"
printf '%-34s %10s ms   runs:%s\n' "mount (mount:MNT/datasets/NAME)" "$mnt" "${all[mount:$MNT/datasets/toks]}"
awk -v a="$lib" -v b="$mnt" -v m="$mem" 'BEGIN {
    printf "ratio view library / in memory  %.3f\nratio mount / in memory         %.3f   (goal <= 1.05)\n", a / m, b / m }'
