#!/usr/bin/env bash
# labels: jobs
# Maintenance beside training (issue 33, item 3): writers queue for the
# store's writer lock instead of failing.
#  - a gc loop beside a stream of saves (reshards, dataset ingests, version
#    deletions): every command succeeds, gc removes what nothing references;
#  - ptc train --save-every 1 beside a gc loop and an import loop: every
#    step's save waits its turn, the job and every import succeed;
#  - --lock-timeout / PTC_LOCK_TIMEOUT bound the wait: 0 fails at once,
#    S fails after S seconds naming the holder and the wait, a holder that
#    lets go within S is waited for; bad values are usage errors.
. "$(dirname "$0")/lib.sh"
mkdir "$T/w" && cd "$T/w"
"$PTC" synth --preset llama-tiny --seed 5 --out m.safetensors
"$PTC" import --store st --config tp=2 --rules llama m.safetensors >/dev/null
seq 1 100 >l.txt

# ---- a gc loop beside writers -------------------------------------------------------------
( while [ ! -e stop ]; do "$PTC" gc --store st >/dev/null 2>>gc.err || echo fail >>gc.err; done ) &
loop=$!
failed=0 prev=
for i in 1 2 3 4 5 6; do
    if [ $((i % 2)) = 1 ]; then
        "$PTC" reshard --store st --version 1 --to "tp=1,pp=2" >/dev/null 2>>w.err || failed=$((failed + 1))
        # keep version 1 and the newest reshard
        v=$("$PTC" versions --store st --json | python3 -c 'import json,sys; print(max(v["version"] for v in json.load(sys.stdin)["versions"]))')
        [ -n "$prev" ] && { "$PTC" versions delete --store st "$prev" >/dev/null 2>>w.err ||
            failed=$((failed + 1)); }
        prev=$v
    else
        "$PTC" dataset ingest --store st --name "d$i" --format lines l.txt >/dev/null 2>>w.err ||
            failed=$((failed + 1))
    fi
done
touch stop
wait $loop
if [ $failed = 0 ] && ! [ -s w.err ]; then ok; else bad "$failed writers failed beside gc: $(cat w.err)"; fi
if ! [ -s gc.err ]; then ok; else bad "gc failed beside writers: $(cat gc.err)"; fi
"$PTC" gc --store st >/dev/null
left=$(ls st/packs | grep -c '^v' || true)
if [ "$left" = 2 ] && "$PTC" verify --store st --all >/dev/null; then ok; else
    bad "after the loop: $left pack directories (want 2), or verify failed"; fi

# ---- a training job saving every step beside gc and imports ---------------------------------
M=mlp:layers=2,hidden=8,vocab=16,tokens=4
tr=(--schedule 1f1b --model $M --seed 3 --timeout 120 --config dp=1 --microbatches 2 --store tr)
"$PTC" import --store tr --config tp=2 --rules llama m.safetensors >/dev/null
rm -f stop
( while [ ! -e stop ]; do "$PTC" gc --store tr >/dev/null 2>>gc2.err || echo fail >>gc2.err; done ) &
gcl=$!
( while [ ! -e stop ]; do "$PTC" import --store tr --config tp=2 --rules llama m.safetensors \
    >/dev/null 2>>imp.err || echo fail >>imp.err; done ) &
impl=$!
if "$PTC" train "${tr[@]}" --steps 30 --save-every 1 >train.out 2>train.err &&
    grep -q "^saved version .* (step 30)" train.out; then ok; else
    bad "ptc train beside gc and imports: $(cat train.err)"; fi
touch stop
wait $gcl $impl
if ! [ -s gc2.err ] && ! [ -s imp.err ]; then ok; else
    bad "gc or import failed beside training: $(cat gc2.err imp.err)"; fi
n=$("$PTC" versions --store tr --json | python3 -c 'import json,sys; print(sum(v["config"] == "dp=1,tp=1,pp=1" for v in json.load(sys.stdin)["versions"]))')
if [ "$n" = 30 ]; then ok; else bad "$n training versions saved (want 30)"; fi

# ---- bounded waits ------------------------------------------------------------------------
# hold STORE/lock for $2 seconds from another process
hold() {
    python3 - "$1" "$2" <<'PY' &
import fcntl, os, sys, time
f = open(sys.argv[1] + "/lock", "r+")
fcntl.flock(f, fcntl.LOCK_EX)
open(sys.argv[1] + ".held", "w").close()
time.sleep(float(sys.argv[2]))
PY
    holder=$!
    for _ in $(seq 1 500); do [ -e "$1.held" ] && break; sleep 0.01; done
    rm -f "$1.held"
}
hold st 3
t0=$(date +%s%N)
expect_fail 1 locked "pid $holder" -- "$PTC" gc --store st --lock-timeout 0
t1=$(date +%s%N)
expect_fail 1 locked "pid $holder" "waited 0.4 s" -- "$PTC" gc --store st --lock-timeout 0.4
t2=$(date +%s%N)
expect_fail 1 locked "waited 0.3 s" -- env PTC_LOCK_TIMEOUT=0.3 "$PTC" dataset ingest --store st \
    --name x --format lines l.txt
ms0=$(((t1 - t0) / 1000000)) ms1=$(((t2 - t1) / 1000000))
if [ $ms0 -lt 1500 ] && [ $ms1 -ge 400 ] && [ $ms1 -lt 2500 ]; then ok; else
    bad "waits of ${ms0} ms (--lock-timeout 0) and ${ms1} ms (0.4)"; fi
wait $holder
hold st 0.6
if "$PTC" dataset ingest --store st --name waited --format lines --lock-timeout 30 l.txt >/dev/null; then
    ok; else bad "a writer did not wait for a holder that let go"; fi
wait $holder
hold st 0.6
if "$PTC" reshard --store st --version 1 --to tp=4 >/dev/null; then ok; else
    bad "reshard did not wait (default timeout)"; fi
wait $holder

expect_fail 2 lock-timeout -- "$PTC" gc --store st --lock-timeout -1
expect_fail 2 lock-timeout -- "$PTC" gc --store st --lock-timeout 1s
expect_fail 2 ingest -- "$PTC" dataset ls --store st --lock-timeout 1
if PTC_LOCK_TIMEOUT=soon "$PTC" gc --store st >/dev/null 2>e && grep -q "PTC_LOCK_TIMEOUT" e; then
    ok; else bad "a bad PTC_LOCK_TIMEOUT is not warned about"; fi
finish
