#!/bin/sh
# The main job end to end on generated data in a temporary store:
# synthesize a model, import it under one configuration, export per-rank
# files for another, export the whole model and compare it byte for byte
# with the input, verify every checksum.
set -eu
PTC=${1:-build/ptc}
PTC=$(cd "$(dirname "$PTC")" && pwd)/$(basename "$PTC")
work=$(mktemp -d "${TMPDIR:-/tmp}/ptc-demo.XXXXXX")
mnt="$work/mnt"
trap 'fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
step() { printf '\n== %s\n' "$*"; }

step "synthesize a small Llama-style model (uneven dims)"
"$PTC" synth --preset llama-tiny --seed 7 --optim --out model.safetensors
ls -l model.safetensors

step "import it under dp=2,tp=2,pp=2 with zero=1 (optimizer state sharded over dp)"
"$PTC" import --store store --config dp=2,tp=2,pp=2,zero=1 --rules llama --compress zstd \
    --step 100 model.safetensors
"$PTC" versions --store store
"$PTC" info --store store | head -8

step "export every rank of another configuration: tp=3,pp=1 (never stored)"
"$PTC" export --store store --config tp=3,pp=1 --out-dir tp3
ls -l tp3

step "export the whole model and compare with the input"
"$PTC" export --store store --out whole.safetensors
cmp model.safetensors whole.safetensors && echo "whole export is byte-identical to the input"

step "plan resharding to dp=1,tp=4,pp=2 with 2 ranks per host (figures only)"
"$PTC" plan --store store --to dp=1,tp=4,pp=2 --hosts 2

step "reshard to dp=1,tp=4,pp=2 (a new version; unchanged shards referenced)"
"$PTC" reshard --store store --to dp=1,tp=4,pp=2
"$PTC" export --store store --out whole2.safetensors
cmp model.safetensors whole2.safetensors && echo "resharded version exports byte-identical to the input"

step "verify every block checksum"
"$PTC" verify --store store
step "ingest a text corpus as a dataset (1000 lines)"
seq 1 1000 | sed 's/^/sample /' >corpus.txt
"$PTC" dataset ingest --store store --name corpus --format lines corpus.txt
"$PTC" dataset ls --store store

if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null; then
    step "mount the store and read step files: dp=2 (batch 100) for 4 steps, then dp=3 (batch 120) from position 400"
    mkdir -p "$mnt"
    "$PTC" mount --store store "$mnt" -f &
    mount_pid=$!
    for _ in $(seq 100); do [ -e "$mnt/README.txt" ] && break; sleep 0.1; done
    ls "$mnt" "$mnt/models/1"
    e="$mnt/datasets/corpus/seed-7/epoch-0"
    for k in 0 1 2 3; do for r in 0 1; do cat "$e/batch-100/start-0/dp-2/rank-$r/step-$k" >/dev/null; done; done
    python3 - "$e/batch-100/start-0/dp-2/rank-0/step-0" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
idx = open(sys.argv[1] + ".idx", "rb").read()
off = struct.unpack("<%dQ" % (len(idx) // 8), idx)
recs = [data[off[i]:off[i + 1]].decode() for i in range(len(off) - 1)]
print("dp=2 rank 0 step 0: %d records (split by step-0.idx): %s, ..." % (len(recs), ", ".join(recs[:3])))
PY
    k=0
    while [ -e "$e/batch-120/start-400/dp-3/rank-0/step-$k" ]; do
        for r in 0 1 2; do cat "$e/batch-120/start-400/dp-3/rank-$r/step-$k" >/dev/null; done
        k=$((k + 1))
    done
    echo "dp=3: read $k steps; step-$k does not exist"
    cmp "$mnt/models/1/dp1-tp3-pp1/rank-2.safetensors" tp3/rank-2.safetensors &&
        echo "mounted models/1/dp1-tp3-pp1/rank-2.safetensors equals the exported file"
    fusermount3 -u "$mnt"
    wait "$mount_pid" # the served counts are durable once ptc mount has exited
    step "audit: every sample of epoch 0 served exactly once"
    "$PTC" dataset audit --store store --name corpus --seed 7 --epoch 0 --json
else
    step "skipping the mount part: /dev/fuse or fusermount3 is not available here"
fi
step "pipeline schedules for 4 stages and 8 micro-batches (F=1, B=2): simulated before they run"
for kind in gpipe 1f1b "interleaved --chunks 2" zb-h1; do
    "$PTC" schedule --kind $kind --stages 4 --microbatches 8 --cost-w 1 --json |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print("%-12s makespan %5.1f  bubble %.3f  peak activations %s" % (r["kind"], r["makespan"], r["bubble_fraction"], r["peak_activations"]))'
done

if command -v mpirun >/dev/null 2>&1; then
    step "train the demo model for 3 steps: 2 pipeline stages under mpirun (1F1B), then one process"
    root=""
    [ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
    args="--schedule 1f1b --microbatches 4 --steps 3 --model mlp:layers=4,hidden=32,vocab=64 --seed 1 --data synthetic"
    mpirun $root --oversubscribe -np 2 "$PTC" train --config dp=1,pp=2 $args
    "$PTC" train --config dp=1,pp=1 $args

    # the job that changes its parallelism while it trains: its state and its
    # data live in the store
    step "a training job in the store: 4 processes (tp=2, pp=2), resized online to dp=2,pp=2 at step 3, saved at step 6"
    python3 -c 'import random, struct; r = random.Random(5); n = 96 * 9
open("tokens.bin", "wb").write(struct.pack("<%dH" % n, *[r.randrange(64) for _ in range(n)]))'
    "$PTC" dataset ingest --store job --name toks --format tokens:u16:9 tokens.bin
    run="--schedule 1f1b --microbatches 4 --model mlp:layers=4,hidden=32,vocab=64,tokens=8 --seed 3 --data dataset:toks"
    job="$run --store job"
    mpirun $root --oversubscribe -np 4 "$PTC" train --config tp=2,pp=2 $job --steps 6 --save-every 0 \
        --resize 3:dp=2,pp=2
    step "resume it under another configuration (2 processes, dp=2): the next unseen sample, the same model"
    mpirun $root --oversubscribe -np 2 "$PTC" train --config dp=2 $job --steps 4 --save-every 0 --resume
    step "ptc elastic: the rest of the epoch (17 steps in all) on the slots of a file that grows from 2 to 4"
    echo 2 > slots
    "$PTC" elastic --store job --slots slots --pp 2 --watchdog 60 -- ptc train $run --steps 17 \
        --save-every 1 --jitter 40 > elastic.log 2>&1 &
    el=$!
    for _ in $(seq 300); do grep -q '^step 12 ' elastic.log && break; sleep 0.1; done
    echo 4 > slots
    wait $el || { cat elastic.log; exit 1; }
    grep '^elastic:' elastic.log
    step "audit: the epoch's 96 windows, each served exactly once across the configurations"
    "$PTC" dataset audit --store job --name toks --seed 3 --epoch 0 --json
fi
printf '\ndemo finished\n'
