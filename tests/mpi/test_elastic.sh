#!/bin/bash
# ptc elastic, with real mpirun and real processes (no mocks):
# 1. kill -9 of one rank at a random step (seed 1; seeds 1-3 with
#    PTC_TEST_FULL=1, test_elastic_all.sh, label slow): the job completes on
#    fewer slots under another configuration (--pp 2, tp by the rule: 4 slots
#    dp1-tp2-pp2, then 3 slots dp1-tp1-pp2: the global batch stays 4), the steps after the last
#    version run again, the audit's `repeated` is exactly the records of those
#    steps and nothing is missing; ptc verify passes;
# 2. scale-out from 4 to 8 slots by editing the slots file (--json log): the
#    job stops at a step boundary, saves, and resumes as dp2-tp2-pp2 with no
#    step lost; the newest version says so; every record served once;
# 3. bad input: one `ptc: error:` line, exit 2 (usage) or 1 (a job that cannot
#    run; a job that hangs is stopped by the watchdog).
. "$(dirname "$0")/lib_mpi.sh"
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
mktokens() { # FILE WINDOWS SEED
    python3 - "$1" "$2" "$3" <<'PY'
import random, struct, sys
r = random.Random(int(sys.argv[3]))
n = int(sys.argv[2]) * 5
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[r.randrange(16) for _ in range(n)]))
PY
}
wait_for() { # FILE REGEX: up to 30 s
    for _ in $(seq 1500); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.02; done
    return 1
}
# The checks below act when the job reports a step, and must act before it
# ends: --jitter (a random sleep of up to that many ms before each compute
# action) keeps each step long enough (about 0.2 s) for a loaded machine.

# ---- 1. kill -9 of one rank at a random step ------------------------------------------------
# 10 steps of a global batch of 4 (dp=1, 4 micro-batches) read 40 windows: the whole epoch
mktokens "$TMP/tok40.bin" 40 7
seeds=1
[ "${PTC_TEST_FULL:-0}" = 1 ] && seeds="1 2 3"
for seed in $seeds; do
    st="$TMP/k$seed"
    "$PTC" dataset ingest --store "$st" --name toks --format tokens:u16:5 "$TMP/tok40.bin" > /dev/null
    echo 4 > "$TMP/slots$seed"
    RANDOM=$seed
    # kill once step $at is reported: a step that is not followed by a save (saves after
    # steps 2, 5, 8), so that at least one step is lost, and early enough that
    # the job is still running (5 steps, about a second, left)
    steps=(3 4)
    at=${steps[$((RANDOM % 2))]}
    "$PTC" elastic --store "$st" --slots "$TMP/slots$seed" --pp 2 --watchdog 30 -- ptc train --schedule 1f1b \
        --microbatches 4 --model $M --seed 3 --data dataset:toks --steps 10 --save-every 3 --jitter 60 \
        > "$TMP/k$seed.out" 2> "$TMP/k$seed.err" &
    epid=$!
    wait_for "$TMP/k$seed.out" "^step $at " || { cat "$TMP/k$seed.out" "$TMP/k$seed.err"; fail "seed $seed: no step $at"; }
    mpid=$(pgrep -P $epid mpirun) || fail "seed $seed: no mpirun under ptc elastic"
    ranks=($(pgrep -P "$mpid"))
    [ ${#ranks[@]} = 4 ] || fail "seed $seed: ${#ranks[@]} rank processes, expected 4"
    victim=${ranks[$((RANDOM % 4))]}
    kill -9 "$victim"
    wait $epid || { cat "$TMP/k$seed.out" "$TMP/k$seed.err"; fail "seed $seed: ptc elastic exit non-zero"; }
    out="$TMP/k$seed.out"
    line=$(grep '^elastic: failure at step ' "$out") || { cat "$out"; fail "seed $seed: no failure line"; }
    [ "$(echo "$line" | wc -l)" = 1 ] || fail "seed $seed: more than one failure"
    echo "$line" | grep -q ': dp=1,tp=2,pp=2 -> dp=1,tp=1,pp=2 on 3 slots, resumed version ' ||
        fail "seed $seed: unexpected reconfiguration: $line"
    read -r K S L <<< "$(echo "$line" | sed -E 's/^elastic: failure at step ([0-9]+):.*\(step ([0-9]+)\), ([0-9]+) steps lost.*/\1 \2 \3/')"
    [ "$L" = $((K - S)) ] && [ "$K" -gt "$at" ] || fail "seed $seed: steps lost $L, at step $K, resumed $S"
    # the steps after the version were run again: step S..K-1 appear twice, then on to 9
    for s in $(seq 0 9); do
        n=$(grep -c "^step $s " "$out")
        want=1
        [ "$s" -ge "$S" ] && [ "$s" -lt "$K" ] && want=2
        [ "$n" = $want ] || { cat "$out"; fail "seed $seed: step $s reported $n times, expected $want"; }
    done
    grep -q "^resumed from version [0-9]* at step $S, " "$out" || { cat "$out"; fail "seed $seed: no resume at step $S"; }
    grep -q '^elastic: done: step 10, version [0-9]*, dp=1,tp=1,pp=2, 1 reconfigurations (1 failures)' "$out" ||
        { cat "$out"; fail "seed $seed: no done line"; }
    audit=$("$PTC" dataset audit --store "$st" --name toks --seed 3 --epoch 0 --json)
    [ "$audit" = "{\"samples\":40,\"once\":$((40 - 4 * L)),\"repeated\":$((4 * L)),\"missing\":0}" ] ||
        fail "seed $seed: audit $audit, expected $((4 * L)) repeated ($L steps lost of 4 records) and none missing"
    "$PTC" verify --store "$st" > /dev/null || fail "seed $seed: verify"
    "$PTC" versions --store "$st" --json | python3 -c '
import json, sys
v = json.load(sys.stdin)["versions"][-1]
assert v["step"] == "10" and v["config"] == "dp=1,tp=1,pp=2", v' || fail "seed $seed: newest version"
    echo "ok: seed $seed: killed rank pid $victim after step $at; $L steps lost and re-run; audit $audit"
done

# ---- 2. scale-out 4 -> 8 slots from the slots file -------------------------------------------
mktokens "$TMP/tok100.bin" 100 8
st="$TMP/so"
"$PTC" dataset ingest --store "$st" --name toks --format tokens:u16:5 "$TMP/tok100.bin" > /dev/null
echo 4 > "$TMP/slots"
"$PTC" elastic --store "$st" --slots "$TMP/slots" --tp 2 --pp 2 --json --watchdog 30 -- ptc train \
    --schedule 1f1b --microbatches 2 --model $M --seed 5 --data dataset:toks --steps 10 --save-every 5 \
    --jitter 60 > "$TMP/so.out" 2> "$TMP/so.err" &
epid=$!
wait_for "$TMP/so.err" '^step 2 ' || { cat "$TMP/so.out" "$TMP/so.err"; fail "scale-out: no step 2"; }
echo 8 > "$TMP/slots"
wait $epid || { cat "$TMP/so.out" "$TMP/so.err"; fail "scale-out: exit non-zero"; }
python3 - "$TMP/so.out" <<'PY' > "$TMP/so.k" || { cat "$TMP/so.out"; fail "scale-out: log"; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]          # every line one JSON object
assert [e["event"] for e in ev] == ["start", "reconfigure", "done"], ev
s, r, d = ev
assert s["config"] == "dp=1,tp=2,pp=2" and s["slots"] == 4, s
assert r["reason"] == "scale-out" and r["from"] == "dp=1,tp=2,pp=2" and r["to"] == "dp=2,tp=2,pp=2", r
assert r["slots"] == 8 and r["steps_lost"] == 0 and r["resumed_step"] == r["step"] >= 3, r
parts = ["detect_s", "save_s", "plan_s", "load_s", "restart_s"]
assert all(r[p] >= 0 for p in parts) and abs(sum(r[p] for p in parts) - r["downtime_s"]) < 1e-3, r
assert r["save_s"] > 0 and r["restart_s"] > 0, r
assert d["step"] == 10 and d["config"] == "dp=2,tp=2,pp=2" and d["failures"] == 0, d
print(r["step"], r["version"])
PY
read -r K V < "$TMP/so.k"
"$PTC" versions --store "$st" --json | python3 -c '
import json, sys
v = json.load(sys.stdin)["versions"][-1]
assert v["step"] == "10" and v["config"] == "dp=2,tp=2,pp=2", v' || fail "scale-out: newest version"
# the stop saved the version the relaunch resumed (version 2 when the stop came after the save at step 5)
grep -q "^stopped at step $K (dp=1,tp=2,pp=2), saved version $V\$" "$TMP/so.err" || fail "scale-out: no stop at step $K saving version $V"
# global batch 2 before the resize, 4 after: every record served once
n=$((2 * K + 4 * (10 - K)))
[ "$("$PTC" dataset audit --store "$st" --name toks --seed 5 --epoch 0 --json)" = \
  "{\"samples\":100,\"once\":$n,\"repeated\":0,\"missing\":$((100 - n))}" ] || fail "scale-out: audit"
"$PTC" verify --store "$st" > /dev/null || fail "scale-out: verify"
echo "ok: scale-out 4 -> 8 slots at step $K, dp=1 -> dp=2, nothing lost, every record once"

# ---- 3. bad input ------------------------------------------------------------------------------
# (the store holds step 10: the jobs below ask for 20 steps, so that there is work to do)
expect() { # RC WORDS -- ELASTIC ARGS...
    local want=$1 words=$2; shift 3
    set +e
    timeout 60 "$PTC" elastic "$@" > "$TMP/bad.out" 2> "$TMP/bad.err"
    local rc=$?
    set -e
    [ $rc = "$want" ] || { cat "$TMP/bad.err"; fail "exit $rc (want $want): $words"; }
    tail -n 1 "$TMP/bad.err" | grep -q "^ptc: error: .*$words" || { cat "$TMP/bad.err"; fail "no error line saying '$words'"; }
    [ "$(grep -c '^ptc: error: ' "$TMP/bad.err")" -ge 1 ] || fail "no error line: $words"
}
T=(-- ptc train --schedule 1f1b --microbatches 2 --model $M --seed 5 --data dataset:toks --steps 3 --save-every 1)
expect 2 "no slots" -- --store "$st" "${T[@]}"
expect 2 "0 slots available" -- --store "$st" --slots 0 "${T[@]}"
expect 2 "min-slots is 4" -- --store "$st" --slots 2 --min-slots 4 "${T[@]}"
expect 2 "no configuration fits" -- --store "$st" --slots 3 --tp 4 "${T[@]}"
expect 2 "no configuration fits" -- --store "$st" --slots 4 --pp 8 "${T[@]}"
expect 2 "no such store" -- --store "$TMP/nope" --slots 4 "${T[@]}"
expect 2 "expected -- ptc train" -- --store "$st" --slots 4
expect 2 "must be .ptc train" -- --store "$st" --slots 4 -- ptc verify
expect 2 "must not give --config" -- --store "$st" --slots 4 "${T[@]}" --config dp=4
expect 2 "--tp 2: the cuda model" -- --store "$st" --slots 4 --tp 2 "${T[@]}" --device cuda
expect 2 "--zero: the cuda model" -- --store "$st" --slots 4 --zero "${T[@]}" --device=cuda
expect 2 "needs --steps" -- --store "$st" --slots 4 -- ptc train --schedule 1f1b --microbatches 2 --save-every 1
expect 2 "needs --save-every" -- --store "$st" --slots 4 -- ptc train --schedule 1f1b --microbatches 2 --steps 3
expect 2 "slots file" -- --store "$st" --slots "$TMP/slots-none" "${T[@]}"
before=$("$PTC" versions --store "$st" --json)
expect 1 "failed before its first step" -- --store "$st" --slots 2 -- ptc train --schedule nonsense \
    --microbatches 2 --model $M --steps 20 --save-every 1
# a cuda job on 4 slots gets tp=1 from the rule (a cpu job of this model gets tp=4: the "tp=4"
# check below); with no GPU here (or a build without CUDA) it then fails before its first step
expect 1 "failed before its first step" -- --store "$st" --slots 4 --max-restarts 0 -- ptc train \
    --schedule 1f1b --microbatches 2 --model $M --seed 5 --data dataset:toks --steps 20 \
    --save-every 1 --device cuda
grep -q "^elastic: start: dp=2,tp=1,pp=2 on 4 slots" "$TMP/bad.out" || { cat "$TMP/bad.out"; fail "cuda: tp=1"; }
expect 1 "failed before its first step" -- --store "$st" --slots 4 --max-restarts 0 -- ptc train \
    --schedule nonsense --microbatches 2 --model $M --seed 5 --data dataset:toks --steps 20 \
    --save-every 1
grep -q "^elastic: start: dp=1,tp=4,pp=1 on 4 slots" "$TMP/bad.out" || { cat "$TMP/bad.out"; fail "cpu: tp=4"; }
# a job that hangs (each compute action sleeps up to 100 s): the watchdog stops it
SECONDS=0
expect 1 "" -- --store "$st" --slots 2 --watchdog 3 --max-restarts 0 -- ptc train --schedule 1f1b \
    --microbatches 2 --model $M --seed 5 --data dataset:toks --steps 20 --save-every 1 --jitter 100000
[ $SECONDS -lt 30 ] || fail "the watchdog took $SECONDS s"
[ "$before" = "$("$PTC" versions --store "$st" --json)" ] || fail "a failed job changed the store"
ls -d "$st".elastic.* 2> /dev/null && fail "the controller's directory was left behind"
echo "ok: bad input"

# ---- 4. --choose search: the cost model's choice (data parallelism for this tiny model) -------
"$PTC" dataset ingest --store "$TMP/cs" --name toks --format tokens:u16:5 "$TMP/tok100.bin" > /dev/null
"$PTC" elastic --store "$TMP/cs" --slots 4 --choose search --watchdog 30 -- ptc train --schedule 1f1b \
    --microbatches 2 --model $M --seed 5 --data dataset:toks --steps 3 --save-every 1 \
    > "$TMP/cs.out" 2>&1 || { cat "$TMP/cs.out"; fail "--choose search: exit non-zero"; }
grep -q '^elastic: start: dp=4,tp=1,pp=1 on 4 slots' "$TMP/cs.out" || { cat "$TMP/cs.out"; fail "--choose search: not dp=4"; }
"$PTC" elastic --store "$TMP/cs" --slots 4 --choose rule --watchdog 30 -- ptc train --schedule 1f1b \
    --microbatches 2 --model $M --seed 5 --data dataset:toks --steps 5 --save-every 1 \
    > "$TMP/cr.out" 2>&1 || { cat "$TMP/cr.out"; fail "--choose rule: exit non-zero"; }
grep -q '^elastic: start: dp=1,tp=4,pp=1 on 4 slots, from version 3 (step 3)' "$TMP/cr.out" ||
    { cat "$TMP/cr.out"; fail "--choose rule: not the rule's dp=1,tp=4"; }
expect 2 "--choose: expected rule or search" -- --store "$TMP/cs" --slots 4 --choose magic "${T[@]}"
expect 2 "--tflops: expected a positive number" -- --store "$TMP/cs" --slots 4 --choose search --tflops 0 "${T[@]}"
echo "ok: --choose search (dp=4 for the tiny model) and rule (dp=1,tp=4), resuming each other"

# ---- 5. --online: scale-in 4 -> 2 slots and back out to 4, in memory ---------------------------
# The processes exist (the job was launched on 4): both changes are resizes of the running
# job (`resize CFG` on its control file), nothing saved or reloaded, no step lost; the losses
# are bit-identical to a job resized at the same steps by --resize; every record once.
st="$TMP/on"
"$PTC" dataset ingest --store "$st" --name toks --format tokens:u16:5 "$TMP/tok100.bin" > /dev/null
echo 4 > "$TMP/slots-on"
TA=(--schedule 1f1b --microbatches 4 --model $M --seed 3 --data dataset:toks --steps 14 --jitter 30)
"$PTC" elastic --store "$st" --slots "$TMP/slots-on" --pp 2 --online --watchdog 30 -- ptc train \
    "${TA[@]}" --save-every 5 > "$TMP/on.out" 2> "$TMP/on.err" &
epid=$!
wait_for "$TMP/on.out" '^step 3 ' || { cat "$TMP/on.out" "$TMP/on.err"; fail "online: no step 3"; }
echo 2 > "$TMP/slots-on"
wait_for "$TMP/on.out" '^elastic: scale-in at step ' || { cat "$TMP/on.out" "$TMP/on.err"; fail "online: no scale-in"; }
k1=$(sed -nE 's/^elastic: scale-in at step ([0-9]+): .*/\1/p' "$TMP/on.out")
wait_for "$TMP/on.out" "^step $((k1 + 2)) " || { cat "$TMP/on.out" "$TMP/on.err"; fail "online: no step $((k1 + 2))"; }
echo 4 > "$TMP/slots-on"
wait $epid || { cat "$TMP/on.out" "$TMP/on.err"; fail "online: exit non-zero"; }
grep -q "^elastic: scale-in at step $k1: dp=1,tp=2,pp=2 -> dp=1,tp=1,pp=2 on 2 slots, online (in memory), 0 steps lost, downtime " "$TMP/on.out" ||
    { cat "$TMP/on.out"; fail "online: scale-in line"; }
k2=$(sed -nE 's/^elastic: scale-out at step ([0-9]+): dp=1,tp=1,pp=2 -> dp=1,tp=2,pp=2 on 4 slots, online \(in memory\), 0 steps lost, .*/\1/p' "$TMP/on.out")
[ -n "$k2" ] || { cat "$TMP/on.out"; fail "online: scale-out line"; }
grep -q '^elastic: done: step 14, version [0-9]*, dp=1,tp=2,pp=2, 2 reconfigurations (0 failures)' "$TMP/on.out" ||
    { cat "$TMP/on.out"; fail "online: done line"; }
for s in $(seq 0 13); do
    [ "$(grep -c "^step $s " "$TMP/on.out")" = 1 ] || fail "online: step $s not reported once"
done
[ "$("$PTC" dataset audit --store "$st" --name toks --seed 3 --epoch 0 --json)" = \
  '{"samples":100,"once":56,"repeated":0,"missing":44}' ] || fail "online: audit"
"$PTC" versions --store "$st" --json | python3 -c '
import json, sys
v = json.load(sys.stdin)["versions"]
assert [x["step"] for x in v] == ["5", "10", "14"], v' || fail "online: versions (only the --save-every ones)"
"$PTC" dataset ingest --store "$TMP/on2" --name toks --format tokens:u16:5 "$TMP/tok100.bin" > /dev/null
timeout 300 "${MPIRUN[@]}" -np 4 "$PTC" train --config dp=1,tp=2,pp=2 --store "$TMP/on2" \
    --resize "$k1:dp=1,tp=1,pp=2,$k2:dp=1,tp=2,pp=2" "${TA[@]}" > "$TMP/on2.out" 2> "$TMP/on2.err" ||
    { cat "$TMP/on2.err"; fail "online: the planned run"; }
[ "$(awk '/^step /{print $2, $4}' "$TMP/on.out")" = "$(awk '/^step /{print $2, $4}' "$TMP/on2.out")" ] ||
    { paste <(awk '/^step /{print $2, $4}' "$TMP/on.out") <(awk '/^step /{print $2, $4}' "$TMP/on2.out"); fail "online: losses differ from --resize at the same steps"; }
echo "ok: --online: scale-in at step $k1 and scale-out at step $k2 in memory, losses as --resize, every record once"
