#!/bin/bash
# Online resize of a running `ptc train` job (--resize, --control, SIGUSR1):
# 1. planned resizes dp2-tp2-pp2 -> dp1-tp3-pp2 -> dp2-tp1-pp4 -> dp2-tp2-pp2
#    reading a stored dataset give the same per-step losses, bit for bit, and
#    the same final parameters and AdamW moments as the restart path (save,
#    exit, --resume under the next configuration), every loss within 1e-5 of
#    a single process that never changed; the epoch's audit: every sample
#    once; the same with zero=1, gpipe and synthetic data;
# 2. scale-out from a control file: 4 of 8 processes train, `resize
#    dp=2,tp=2,pp=2` moves the job onto all 8, equal to the restart path;
# 3. `stop` in the control file and SIGUSR1 save and end the job; a resume
#    continues at the saved step;
# 4. bad input: a planned resize the processes cannot hold, or that the model
#    cannot take: one `ptc: error:` line per process before the first step,
#    exit 1, the store intact. (A control file's bad request is said and
#    ignored: tests/mpi/test_train_control.sh.)
# Schedules with several chunks per process (interleaved, zb-v, chimera)
# resize online too, equal to the restart path (section 1).
. "$(dirname "$0")/lib_mpi.sh"
here=$(dirname "$0")
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
losses() { awk '/^step /{print $2, $4}' "$@"; }
same_state() { # STORE_A VERSION_A STORE_B VERSION_B WHAT
    "$PTC" export --store "$1" --version "$2" --out "$TMP/sa.safetensors"
    "$PTC" export --store "$3" --version "$4" --out "$TMP/sb.safetensors"
    python3 "$here/compare_st.py" "$TMP/sa.safetensors" "$TMP/sb.safetensors" --rel 0 > /dev/null ||
        fail "$5: parameters or moments differ from the restart path"
}
python3 - "$TMP/tok.bin" <<'PY'
import random, struct, sys
r = random.Random(7)
n = 112 * 5
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[r.randrange(16) for _ in range(n)]))
PY
for st in on re ref; do
    "$PTC" dataset ingest --store "$TMP/$st" --name toks --format tokens:u16:5 "$TMP/tok.bin" > /dev/null
done

# ---- 1. planned resizes == the restart path ----------------------------------------------
# global batches 8, 4, 8, 8 over 4 steps each consume the 112 windows exactly
common=(--microbatches 4 --schedule 1f1b --model $M --seed 3 --data dataset:toks --timeout 60)
"${MPIRUN[@]}" -np 8 "$PTC" train --config dp=2,tp=2,pp=2 "${common[@]}" --store "$TMP/on" --steps 16 \
    --resize 4:dp=1,tp=3,pp=2,8:dp=2,tp=1,pp=4,12:dp=2,tp=2,pp=2 --save-every 0 \
    > "$TMP/on.out" 2> "$TMP/on.err" || { cat "$TMP/on.err"; fail "online resizes: exit non-zero"; }
[ "$(grep -c '^resize at step' "$TMP/on.out")" = 3 ] || { cat "$TMP/on.out"; fail "three resize lines expected"; }
grep -q '^resize at step 4 (planned): dp=2,tp=2,pp=2 -> dp=1,tp=3,pp=2' "$TMP/on.out" || fail "resize line"
r=(--store "$TMP/re" --save-every 0)
"${MPIRUN[@]}" -np 8 "$PTC" train --config dp=2,tp=2,pp=2 "${common[@]}" "${r[@]}" --steps 4 > "$TMP/re1"
"${MPIRUN[@]}" -np 6 "$PTC" train --config dp=1,tp=3,pp=2 "${common[@]}" "${r[@]}" --steps 4 --resume > "$TMP/re2"
"${MPIRUN[@]}" -np 8 "$PTC" train --config dp=2,tp=1,pp=4 "${common[@]}" "${r[@]}" --steps 4 --resume > "$TMP/re3"
"${MPIRUN[@]}" -np 8 "$PTC" train --config dp=2,tp=2,pp=2 "${common[@]}" "${r[@]}" --steps 4 --resume > "$TMP/re4"
[ "$(losses "$TMP/on.out")" = "$(losses "$TMP"/re[1234])" ] ||
    { paste <(losses "$TMP/on.out") <(losses "$TMP"/re[1234]); fail "online losses differ from the restart path"; }
[ "$(losses "$TMP/on.out" | wc -l)" = 16 ] || fail "16 steps expected"
same_state "$TMP/on" 1 "$TMP/re" 4 "dp2-tp2-pp2 -> dp1-tp3-pp2 -> dp2-tp1-pp4 -> dp2-tp2-pp2"
# the unchanged reference: one process, the same global batches (8, 4, 8, 8)
common=(--schedule 1f1b --model $M --seed 3 --data dataset:toks --timeout 60 --store "$TMP/ref" --save-every 0)
"$PTC" train --config pp=1 --microbatches 8 "${common[@]}" --steps 4 > "$TMP/u1"
"$PTC" train --config pp=1 --microbatches 4 "${common[@]}" --steps 4 --resume > "$TMP/u2"
"$PTC" train --config pp=1 --microbatches 8 "${common[@]}" --steps 8 --resume > "$TMP/u3"
paste <(losses "$TMP/on.out") <(losses "$TMP"/u[123]) |
    awk '{ if ($1 != $3) exit 2; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * $4) exit 1; n++ }
         END { if (n != 16) exit 3 }' || fail "online losses are not within 1e-5 of the unchanged run"
[ "$("$PTC" dataset audit --store "$TMP/on" --name toks --seed 3 --epoch 0 --json)" = \
  '{"samples":112,"once":112,"repeated":0,"missing":0}' ] || fail "audit of the resized job: not exactly once"
"$PTC" verify --store "$TMP/on" > /dev/null || fail "verify"
echo "ok: planned resizes (and back up) equal the restart path bit for bit, within 1e-5 of an unchanged run; audit exactly once"

common=(--microbatches 4 --schedule gpipe --model $M --seed 9 --timeout 60 --save-every 0)
"${MPIRUN[@]}" -np 4 "$PTC" train --config dp=2,pp=2,zero=1 "${common[@]}" --store "$TMP/z-on" --steps 6 \
    --resize 2:dp=4,zero=1,3:tp=2,pp=2,zero=1 > "$TMP/z-on.out" 2> "$TMP/z.err" ||
    { cat "$TMP/z.err"; fail "zero=1 online resizes"; }
"${MPIRUN[@]}" -np 4 "$PTC" train --config dp=2,pp=2,zero=1 "${common[@]}" --store "$TMP/z-re" --steps 2 > "$TMP/z1"
"${MPIRUN[@]}" -np 4 "$PTC" train --config dp=4,zero=1 "${common[@]}" --store "$TMP/z-re" --steps 1 --resume > "$TMP/z2"
"${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2,zero=1 "${common[@]}" --store "$TMP/z-re" --steps 3 --resume > "$TMP/z3"
[ "$(losses "$TMP/z-on.out")" = "$(losses "$TMP"/z[123])" ] ||
    { paste <(losses "$TMP/z-on.out") <(losses "$TMP"/z[123]); fail "zero=1: losses differ from the restart path"; }
same_state "$TMP/z-on" 1 "$TMP/z-re" 3 "zero=1 dp2-pp2 -> dp4 -> tp2-pp2"
echo "ok: zero=1 gpipe resizes equal the restart path"

# several chunks per process (each chunk a layout rank of its own, moved by
# ptc_exec_resize_owned): tp2-pp2 -> dp2-pp2 -> tp2-pp2, 4 processes
for sk in "interleaved --chunks 2" zb-v chimera; do
    k=${sk%% *}
    common=(--microbatches 4 --schedule $sk --model $M --seed 5 --timeout 60 --save-every 0)
    "${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2 "${common[@]}" --store "$TMP/$k-on" --steps 6 \
        --resize 2:dp=2,pp=2,4:tp=2,pp=2 > "$TMP/$k-on.out" 2> "$TMP/$k.err" ||
        { cat "$TMP/$k.err"; fail "$k: online resizes"; }
    [ "$(grep -c '^resize at step' "$TMP/$k-on.out")" = 2 ] || { cat "$TMP/$k-on.out"; fail "$k: two resizes expected"; }
    "${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2 "${common[@]}" --store "$TMP/$k-re" --steps 2 > "$TMP/${k}1"
    "${MPIRUN[@]}" -np 4 "$PTC" train --config dp=2,pp=2 "${common[@]}" --store "$TMP/$k-re" --steps 2 --resume > "$TMP/${k}2"
    "${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2 "${common[@]}" --store "$TMP/$k-re" --steps 2 --resume > "$TMP/${k}3"
    [ "$(losses "$TMP/$k-on.out" | wc -l)" = 6 ] || fail "$k: 6 steps expected"
    [ "$(losses "$TMP/$k-on.out")" = "$(losses "$TMP/${k}1" "$TMP/${k}2" "$TMP/${k}3")" ] ||
        { paste <(losses "$TMP/$k-on.out") <(losses "$TMP/${k}1" "$TMP/${k}2" "$TMP/${k}3"); fail "$k: losses differ from the restart path"; }
    same_state "$TMP/$k-on" 1 "$TMP/$k-re" 3 "$k tp2-pp2 -> dp2-pp2 -> tp2-pp2"
    echo "ok: $k (several chunks per process) resizes equal the restart path"
done

# ---- 2. scale-out from the control file ----------------------------------------------------
common=(--microbatches 2 --schedule 1f1b --model $M --seed 4 --timeout 60)
echo "resize dp=2,tp=2,pp=2" > "$TMP/ctl" # read after the first step
"${MPIRUN[@]}" -np 8 "$PTC" train --config tp=2,pp=2 "${common[@]}" --store "$TMP/s-on" --steps 5 \
    --control "$TMP/ctl" --save-every 0 > "$TMP/s-on.out" 2> "$TMP/s.err" || { cat "$TMP/s.err"; fail "scale-out"; }
grep -q '^resize at step 1 (control): dp=1,tp=2,pp=2 -> dp=2,tp=2,pp=2' "$TMP/s-on.out" ||
    { cat "$TMP/s-on.out"; fail "no control resize at step 1"; }
[ ! -e "$TMP/ctl" ] || fail "the control file was not removed once read"
"${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2 "${common[@]}" --store "$TMP/s-re" --steps 1 --save-every 0 > "$TMP/s1"
"${MPIRUN[@]}" -np 8 "$PTC" train --config dp=2,tp=2,pp=2 "${common[@]}" --store "$TMP/s-re" --steps 4 --resume \
    --save-every 0 > "$TMP/s2"
[ "$(losses "$TMP/s-on.out")" = "$(losses "$TMP"/s[12])" ] || fail "scale-out: losses differ from the restart path"
same_state "$TMP/s-on" 1 "$TMP/s-re" 2 "scale-out 4 -> 8"
echo "ok: scale-out 4 -> 8 processes from the control file"

# ---- 3. stop and SIGUSR1 -------------------------------------------------------------------
echo stop > "$TMP/ctl"
"${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2 "${common[@]}" --store "$TMP/st" --steps 100 \
    --control "$TMP/ctl" > "$TMP/st.out" 2>&1 || { cat "$TMP/st.out"; fail "stop"; }
grep -q '^stopped at step 1 (dp=1,tp=2,pp=2), saved version 1' "$TMP/st.out" || { cat "$TMP/st.out"; fail "stop line"; }
[ "$(losses "$TMP/st.out" | wc -l)" = 1 ] || fail "the stopped job ran on"
# SIGUSR1 to mpirun once steps are running (a 50 ms step)
"${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2 "${common[@]}" --store "$TMP/st" --steps 100000 --resume \
    --jitter 50 > "$TMP/sig.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q '^step 3 ' "$TMP/sig.out" 2> /dev/null && break; sleep 0.1; done
kill -USR1 $pid
wait $pid || { cat "$TMP/sig.out"; fail "SIGUSR1: exit non-zero"; }
line=$(grep '^stopped at step' "$TMP/sig.out") || { cat "$TMP/sig.out"; fail "SIGUSR1 did not stop the job"; }
at=$(echo "$line" | awk '{print $4}')
[ "$(losses "$TMP/sig.out" | tail -n 1 | cut -d' ' -f1)" = $((at - 1)) ] || fail "stopped at $at, not after the last step"
"${MPIRUN[@]}" -np 2 "$PTC" train --config pp=2 "${common[@]}" --store "$TMP/st" --steps 1 --resume --save-every 0 \
    > "$TMP/st2.out"
[ "$(losses "$TMP/st2.out" | cut -d' ' -f1)" = "$at" ] || fail "the resume does not continue at step $at"
echo "ok: stop and SIGUSR1 save at a step boundary; a resume continues there"

# ---- 4. bad input --------------------------------------------------------------------------
expect_all_fail() { # NP WORDS -- ARGS...
    local np=$1 words=$2; shift 3
    local before after
    before=$("$PTC" versions --store "$TMP/on" --json)
    set +e
    mpirun_each "$np" "$PTC" train "$@" > "$TMP/bad.out" 2> "$TMP/bad.err"
    local rc=$?
    set -e
    [ $rc = 1 ] || { cat "$TMP/bad.err"; fail "exit $rc (want 1): $words"; }
    [ "$(grep -c '^ptc: error: ' "$TMP/bad.err")" = "$np" ] ||
        { cat "$TMP/bad.err"; fail "not one error line per process: $words"; }
    grep '^ptc: error: ' "$TMP/bad.err" | grep -qi "$words" || { cat "$TMP/bad.err"; fail "error does not say '$words'"; }
    after=$("$PTC" versions --store "$TMP/on" --json)
    [ "$before" = "$after" ] || fail "the store changed: $words"
}
bad=(--schedule 1f1b --model $M --seed 3 --store "$TMP/on" --microbatches 2 --steps 3 --save-every 0)
expect_all_fail 4 "needs 8 processes" -- --config tp=2,pp=2 --resize 1:dp=2,tp=2,pp=2 "${bad[@]}"
expect_all_fail 4 "resize at step 2: resize to dp=1,tp=2,pp=2,layers=3:3" -- --config tp=2,pp=2 \
    --resize 2:tp=2,pp=2,layers=3:3 "${bad[@]}"
# refused before MPI starts (every process alike; one process here, as mpirun
# may end the others before they print)
expect_all_fail 1 "need a model (not --fake-compute)" -- --config tp=2,pp=2 --resize 1:dp=4 \
    --fake-compute --schedule 1f1b --model $M --seed 3 --microbatches 2 --steps 3
# the cuda model runs tp=1, zero=0: a resize to more is refused up front (with
# or without a GPU: before any device is touched)
expect_all_fail 1 "cuda model runs tp=1 and zero=0" -- --config pp=1 --resize 1:tp=2 \
    --device cuda --schedule 1f1b --model $M --seed 3 --microbatches 2 --steps 3
echo "ok: bad input"
