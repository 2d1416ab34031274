#!/bin/bash
# Schedule kinds x P in {2,4} x dp in {1,2}: losses and final parameters
# equal a single-process run of the same model on the same data. Bit-identical
# where each stage's gradient sums its micro-batches in the same order as the
# reference (dp=1, every kind but chimera); within 1e-6 (relative to each
# tensor's largest element; losses relative) otherwise. A pairwise subset
# (14 of 28; tests/pairwise.py); all 28 with PTC_TEST_FULL=1
# (test_train_equal_all.sh, label slow).
. "$(dirname "$0")/lib_mpi.sh"
here=$(dirname "$0")
MODEL=mlp:layers=4,hidden=8,vocab=16,tokens=4
STEPS=3
M=4
common=(--model $MODEL --seed 7 --steps $STEPS --timeout 60)

for ref_m in 4 8; do
    "$PTC" train --config pp=1 --schedule 1f1b --microbatches $ref_m "${common[@]}" \
        --store "$TMP/ref$ref_m.store" --save-every 0 > "$TMP/ref$ref_m.txt"
    export_params "$TMP/ref$ref_m.store" "$TMP/ref$ref_m.safetensors"
    [ "$(grep -c '^step ' "$TMP/ref$ref_m.txt")" = $STEPS ] || fail "reference printed no losses"
done
# The loss must move: the test would be empty if training did nothing.
l0=$(awk 'NR==1{print $4}' "$TMP/ref4.txt"); l2=$(awk 'NR==3{print $4}' "$TMP/ref4.txt")
[ "$l0" != "$l2" ] || fail "loss did not change over the steps"

losses() { awk '/^step /{print $4}' "$1"; }
mapfile -t rows < <(python3 "$here/../pairwise.py" kind=1f1b,gpipe,interleaved,kfkb,zb-h1,zb-v,chimera \
                    P=2,4 D=1,2)
n_exact=0 n_close=0
for row in "${rows[@]}"; do
    read -r kind P D <<< "$row"
    out="$TMP/$kind-p$P-d$D"
    np=$((P * D))
    "${MPIRUN[@]}" -np $np "$PTC" train --config pp=$P,dp=$D --schedule $kind \
        --chunks 2 --k 2 --microbatches $M "${common[@]}" \
        --store "$out.store" --save-every 0 > "$out.txt" 2> "$out.err" ||
        { cat "$out.err"; fail "$kind P=$P dp=$D exited non-zero"; }
    export_params "$out.store" "$out.safetensors"
    ref="$TMP/ref$((M * D))"
    if [ $D = 1 ] && [ $kind != chimera ]; then
        python3 "$here/compare_st.py" "$out.safetensors" "$ref.safetensors" > /dev/null ||
            fail "$kind P=$P dp=$D: parameters not bit-identical"
        [ "$(losses "$out.txt")" = "$(losses "$ref.txt")" ] ||
            fail "$kind P=$P dp=$D: losses differ"
        n_exact=$((n_exact + 1))
    else
        python3 "$here/compare_st.py" "$out.safetensors" "$ref.safetensors" --rel 1e-6 ||
            fail "$kind P=$P dp=$D: parameters differ beyond 1e-6"
        paste <(losses "$out.txt") <(losses "$ref.txt") |
            awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-6*$2) exit 1}' ||
            fail "$kind P=$P dp=$D: losses differ beyond 1e-6"
        n_close=$((n_close + 1))
    fi
done
least=14; [ "${PTC_TEST_EACH:-}" = 1 ] && least=7 # every kind once under the sanitizers
[ $((n_exact + n_close)) = "${#rows[@]}" ] && [ "${#rows[@]}" -ge $least ] || fail "not every configuration ran"
echo "ok: $n_exact runs bit-identical, $n_close within 1e-6"
