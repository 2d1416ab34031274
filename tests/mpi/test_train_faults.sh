#!/bin/bash
# Hangs are diagnosed, broken schedules refused, jitter changes nothing.
. "$(dirname "$0")/lib_mpi.sh"

# 1. Fake compute with random jitter, seeds x schedules x receives posted
#    ahead: never a hang (the watchdog would fail the run), never a message
#    in the wrong place (the fake callbacks check every input's stamp). A
#    pairwise subset (16 of 45; tests/pairwise.py); all 45 with
#    PTC_TEST_FULL=1 (test_train_faults_all.sh, label slow).
here=$(dirname "$0")
mapfile -t rows < <(python3 "$here/../pairwise.py" kind=1f1b,interleaved,zb-v,chimera,kfkb \
                    prepost=0,1,2 seed=1,2,3)
least=15; [ "${PTC_TEST_EACH:-}" = 1 ] && least=5 # every kind once under the sanitizers
[ "${#rows[@]}" -ge $least ] || fail "no configurations"
for row in "${rows[@]}"; do
    read -r kind prepost seed <<< "$row"
    out=$("${MPIRUN[@]}" -np 4 "$PTC" train --config pp=4 --schedule $kind --chunks 2 \
        --k 3 --microbatches 8 --steps 2 --fake-compute --unit-ms 0.2 --jitter 0.5 \
        --seed $seed --timeout 20 --prepost $prepost) ||
        fail "jitter seed $seed $kind prepost $prepost failed"
    echo "$out" | grep -q "inputs checked" || fail "no fake-compute summary"
    checked=$(echo "$out" | awk '/inputs checked/{print $3}')
    [ "$checked" -gt 0 ] || fail "fake compute checked nothing"
done
echo "ok: jitter runs (${#rows[@]})"

# 2. Jitter on the real model: the result stays bit-identical.
M=mlp:layers=3,hidden=8,vocab=16,tokens=4
"$PTC" train --config pp=1 --schedule 1f1b --microbatches 4 --steps 2 --model $M --seed 3 \
    --store "$TMP/ref.store" --save-every 0 > "$TMP/ref.txt"
export_params "$TMP/ref.store" "$TMP/ref.safetensors"
for seed in 11 12 13; do
    "${MPIRUN[@]}" -np 2 "$PTC" train --config pp=2 --schedule zb-h1 --microbatches 4 \
        --steps 2 --model $M --seed 3 --jitter 2 --prepost 1 --timeout 20 \
        --store "$TMP/j$seed.store" --save-every 0 > "$TMP/j$seed.txt" || fail "jitter model run"
    export_params "$TMP/j$seed.store" "$TMP/j$seed.safetensors"
    python3 "$(dirname "$0")/compare_st.py" "$TMP/ref.safetensors" "$TMP/j$seed.safetensors" \
        > /dev/null || fail "jitter changed the result"
done
echo "ok: jitter on the model is bit-identical"

# 3. A broken schedule file is refused by the validator on every rank before
#    any process communicates (no step runs, exit 1 everywhere).
cat > "$TMP/deadlock.txt" <<'S'
ranks 2
stages 2
microbatches 2
rank 0: F0 B0 F1 B1
rank 1: F1 B1 F0 B0
S
set +e
mpirun_each 2 "$PTC" train --config pp=2 --schedule "$TMP/deadlock.txt" \
    --microbatches 2 --steps 1 > "$TMP/bad.out" 2> "$TMP/bad.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "broken schedule accepted"
[ "$(grep -c 'schedule rejected: deadlock' "$TMP/bad.err")" = 2 ] ||
    { cat "$TMP/bad.err"; fail "not every rank refused the schedule"; }
! grep -q '^step' "$TMP/bad.out" || fail "a step ran with a broken schedule"
"$PTC" train --config pp=2 --schedule "$TMP/deadlock.txt" --microbatches 2 --steps 1 \
    2> "$TMP/bad1.err" && fail "single process accepted the broken schedule"
echo "ok: broken schedule refused"

# 4. Watchdog: rank 0 drops its first send (PTC_FAULT_SEND, the test build's
#    fault injection); every rank reports where it is and what is pending,
#    and the job exits non-zero instead of hanging.
cat > "$TMP/drop0.sh" <<'EOF'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export PTC_FAULT_SEND=1
exec "$@"
EOF
set +e
start=$(date +%s)
mpirun_each 2 timeout 60 sh "$TMP/drop0.sh" "$PTC" train --config pp=2 --schedule 1f1b \
    --microbatches 4 --steps 2 --fake-compute --timeout 2 > "$TMP/hang.out" 2> "$TMP/hang.err"
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "hang not diagnosed (rc $rc)"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "watchdog too slow"
grep -q 'watchdog: rank 1 (pp 1 dp 0 tp 0): no progress .* at action 2 of 16 (F0)' "$TMP/hang.err" ||
    { cat "$TMP/hang.err"; fail "rank 1 did not report its position"; }
grep -q 'watchdog: rank 1: pending RA0<0' "$TMP/hang.err" || fail "pending receive not listed"
grep -q 'watchdog: rank 0 (pp 0' "$TMP/hang.err" || fail "rank 0 did not report"
echo "ok: watchdog"
