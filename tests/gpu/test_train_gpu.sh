#!/bin/bash
# ptc train --device cuda against --device cpu on the same model, data and
# schedule: losses and saved parameters agree within 1e-4 (relative; each
# parameter relative to its tensor's largest magnitude, as compare_st.py).
#
# Why 1e-4: FP32 rounding is 6e-8; cuBLAS, the warp/block reductions of
# LayerNorm and cross-entropy and the column sums of the bias and embedding
# gradients add in another order than OpenBLAS and the CPU loops, which
# moves each result by a few ulps times sqrt(terms) (terms <= 4H = 64 here).
# Reordering the same sums on the CPU (dp=2) moved parameters by 3.9e-7
# after 3 steps (docs/runtime.md). AdamW then largely normalises gradient
# errors away (its first step is lr * g/|g|). 1e-4 leaves a margin of more
# than 100 over those effects and is still 10x below what one step changes
# (lr 1e-3 on tensors of magnitude <= 1): the script checks that the
# parameters after 1 and after 4 steps differ beyond it, so a GPU run that
# trained wrongly cannot pass.
#
# Without a GPU (or a CUDA+NCCL build) it checks that --device cuda fails
# with exit 1 and one `ptc: error:` line, prints 'skipped: ...' and exits 77
# (ctest: skipped).
# The two-process runs need two GPUs (NCCL refuses two ranks of one
# communicator on one device); with one GPU they are skipped, said so.
#
# The training state on the GPU (through the CUDA model's host mirror):
# save at step 2 and resume for 4 more on the device: losses and final
# parameters within 1e-4 of the unchanged device run and of the CPU's run;
# with two GPUs also the online resize dp=2 -> pp=2 -> one process -> dp=2
# (losses and final parameters) against the CPU's.
set -eu
: "${PTC:?PTC must name the ptc binary}"
here=$(cd "$(dirname "$0")" && pwd)
cmp_st="$here/../mpi/compare_st.py"
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# The final parameters of a run that saved to store $1 (--save-every 0), as one file $2.
export_params() { "$PTC" export --store "$1" --out "$2" --params-only > /dev/null || fail "export of $1"; }
TOL=1e-4
MODEL=mlp:layers=4,hidden=16,vocab=32,tokens=8
STEPS=4
common=(--model $MODEL --seed 5 --timeout 120)

# --- is there a GPU this build can use? A one-step probe decides. ---------------
set +e
"$PTC" train --config pp=1 --schedule 1f1b --microbatches 1 --steps 1 --device cuda \
    "${common[@]}" > "$TMP/probe.out" 2> "$TMP/probe.err"
rc=$?
set -e
if [ $rc != 0 ]; then
    [ $rc = 1 ] || { cat "$TMP/probe.err"; fail "--device cuda exited $rc, expected 0 or 1"; }
    [ "$(wc -l < "$TMP/probe.err")" = 1 ] || { cat "$TMP/probe.err"; fail "expected one line"; }
    grep -q '^ptc: error: --device cuda: ' "$TMP/probe.err" ||
        { cat "$TMP/probe.err"; fail "expected 'ptc: error: --device cuda: ...'"; }
    [ ! -s "$TMP/probe.out" ] || fail "a failed --device cuda printed on stdout"
    if grep -q 'this build has no' "$TMP/probe.err"; then
        echo "skipped: built without CUDA+NCCL ($(cat "$TMP/probe.err"))"
        exit 77
    fi
    if grep -q 'no cuda device' "$TMP/probe.err"; then
        echo "skipped: no GPU ($(cat "$TMP/probe.err"))"
        exit 77
    fi
    # A GPU that fails otherwise is a failure of this test.
    cat "$TMP/probe.err"
    fail "--device cuda failed on a machine with a GPU"
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L | head -4 || true

losses() { awk '/^step /{print $4}' "$1"; }
# run NAME NP ARGS...: the cpu and the cuda run of one setting, compared.
ran=0
run() {
    local name=$1 np=$2
    shift 2
    local dev
    for dev in cpu cuda; do
        local pre=()
        [ "$np" = 1 ] || pre=("${MPIRUN[@]}" -np "$np")
        "${pre[@]}" "$PTC" train "$@" --steps $STEPS "${common[@]}" --device $dev \
            --store "$TMP/$name-$dev.store" --save-every 0 > "$TMP/$name-$dev.txt" \
            2> "$TMP/$name-$dev.err" || { cat "$TMP/$name-$dev.err"; fail "$name --device $dev exited non-zero"; }
        export_params "$TMP/$name-$dev.store" "$TMP/$name-$dev.safetensors"
        [ "$(losses "$TMP/$name-$dev.txt" | wc -l)" = $STEPS ] ||
            fail "$name --device $dev printed no losses"
    done
    paste <(losses "$TMP/$name-cuda.txt") <(losses "$TMP/$name-cpu.txt") |
        awk -v t=$TOL '{d = $1 - $2; if (d < 0) d = -d;
                        if (d > t * $2) { print "step " NR-1 ": cuda " $1 " cpu " $2; bad = 1 } }
                       END { exit bad }' || fail "$name: losses differ beyond $TOL"
    echo "$name: losses cuda $(losses "$TMP/$name-cuda.txt" | tr '\n' ' ')"
    echo "$name: losses cpu  $(losses "$TMP/$name-cpu.txt" | tr '\n' ' ')"
    python3 "$cmp_st" "$TMP/$name-cuda.safetensors" "$TMP/$name-cpu.safetensors" --rel $TOL ||
        fail "$name: parameters differ beyond $TOL"
    ran=$((ran + 1))
}

# The tolerance must be able to fail: training moves parameters beyond it.
"$PTC" train --config pp=1 --schedule 1f1b --microbatches 4 --steps 1 "${common[@]}" \
    --store "$TMP/one-step.store" --save-every 0 > /dev/null
export_params "$TMP/one-step.store" "$TMP/one-step.safetensors"
run single 1 --config pp=1 --schedule 1f1b --microbatches 4
if python3 "$cmp_st" "$TMP/one-step.safetensors" "$TMP/single-cpu.safetensors" --rel $TOL \
    > /dev/null; then
    fail "parameters after 1 and $STEPS steps agree within $TOL: the test could not fail"
fi
l0=$(losses "$TMP/single-cpu.txt" | head -1); l3=$(losses "$TMP/single-cpu.txt" | tail -1)
[ "$l0" != "$l3" ] || fail "loss did not change over the steps"

# Two chunks on one device (local hand-over of device buffers).
run single-interleaved 1 --config pp=1 --schedule interleaved --chunks 2 --microbatches 4

# Two processes: NCCL send/recv between stages, and the gradient all-reduce.
set +e
"${MPIRUN[@]}" -np 2 "$PTC" train --config pp=2 --schedule 1f1b --microbatches 1 --steps 1 \
    --device cuda "${common[@]}" > "$TMP/probe2.out" 2> "$TMP/probe2.err"
rc=$?
set -e
if [ $rc != 0 ] && grep -q 'processes on this node but 1 cuda device' "$TMP/probe2.err"; then
    echo "two-process runs skipped: one GPU ($(grep -m1 'ptc: error' "$TMP/probe2.err"))"
else
    [ $rc = 0 ] || { cat "$TMP/probe2.err"; fail "pp=2 --device cuda exited $rc"; }
    run pp2-1f1b 2 --config pp=2 --schedule 1f1b --microbatches 4
    run pp2-zbh1 2 --config pp=2 --schedule zb-h1 --microbatches 4
    run dp2 2 --config dp=2,pp=1 --schedule 1f1b --microbatches 2
    two=1
fi

# close A B: every line's loss of A within TOL of B's (same step numbers)
close() {
    paste <(awk '/^step /{print $2, $4}' "$1") <(awk '/^step /{print $2, $4}' "$2") |
        awk -v t=$TOL '{ if ($1 != $3) { print "step " $1 " against step " $3; bad = 1 }
                         d = $2 - $4; if (d < 0) d = -d;
                         if (d > t * $4) { print "step " $1 ": " $2 " against " $4; bad = 1 } }
                       END { exit bad }'
}
# Save and resume on the device: 2 steps, save, resume 4 more, against 6 straight. Four
# steps after the resume, so that the AdamW moments the resume pushed back shape the result:
# the final parameters are compared too, not only the losses.
st=(--config pp=1 --schedule 1f1b --microbatches 4 "${common[@]}")
"$PTC" train "${st[@]}" --steps 6 --device cuda --store "$TMP/st-straight.store" --save-every 0 \
    > "$TMP/st-straight.txt" || fail "the unchanged cuda run failed"
export_params "$TMP/st-straight.store" "$TMP/st-straight.safetensors"
"$PTC" train "${st[@]}" --steps 2 --device cuda --store "$TMP/st" --save-every 2 \
    > "$TMP/st-a.txt" 2> "$TMP/st-a.err" || { cat "$TMP/st-a.err"; fail "cuda --save-every failed"; }
"$PTC" train "${st[@]}" --steps 4 --device cuda --store "$TMP/st" --resume --save-every 0 \
    > "$TMP/st-b.txt" 2> "$TMP/st-b.err" || { cat "$TMP/st-b.err"; fail "cuda --resume failed"; }
export_params "$TMP/st" "$TMP/st-ab.safetensors"
[ "$(awk '/^step /{print $2; exit}' "$TMP/st-b.txt")" = 2 ] || fail "the resumed run did not start at step 2"
cat "$TMP/st-a.txt" "$TMP/st-b.txt" > "$TMP/st-ab.txt"
[ "$(grep -c '^step ' "$TMP/st-ab.txt")" = 6 ] || fail "save+resume did not run 6 steps"
close "$TMP/st-ab.txt" "$TMP/st-straight.txt" || fail "cuda save+resume differs from the unchanged run"
python3 "$cmp_st" "$TMP/st-ab.safetensors" "$TMP/st-straight.safetensors" --rel $TOL ||
    fail "cuda save+resume: parameters differ from the unchanged run"
"$PTC" train "${st[@]}" --steps 6 --device cpu --store "$TMP/st-cpu.store" --save-every 0 \
    > "$TMP/st-cpu.txt" || fail "the cpu run failed"
export_params "$TMP/st-cpu.store" "$TMP/st-cpu.safetensors"
close "$TMP/st-ab.txt" "$TMP/st-cpu.txt" || fail "cuda save+resume differs from --device cpu"
python3 "$cmp_st" "$TMP/st-ab.safetensors" "$TMP/st-cpu.safetensors" --rel $TOL ||
    fail "cuda save+resume: parameters differ from --device cpu"
"$PTC" verify --store "$TMP/st" --all > /dev/null || fail "the store written from the GPU does not verify"
echo "save/resume on the device: losses $(awk '/^step /{printf "%s ", $4}' "$TMP/st-ab.txt")"
ran=$((ran + 1))

# Online resize on the devices (two GPUs): dp=2 -> pp=2 at step 2 -> one process (the other
# idle, its device model freed) at step 4 -> dp=2 at step 6 (the idle process builds a model
# again and gets its state pushed).
if [ "${two:-0}" = 1 ]; then
    rs=(--config dp=2,pp=1 --schedule 1f1b --microbatches 2 --steps 8
        --resize 2:pp=2,4:pp=1,6:dp=2 "${common[@]}")
    for dev in cpu cuda; do
        "${MPIRUN[@]}" -np 2 "$PTC" train "${rs[@]}" --device $dev --store "$TMP/rs-$dev.store" \
            --save-every 0 > "$TMP/rs-$dev.txt" 2> "$TMP/rs-$dev.err" ||
            { cat "$TMP/rs-$dev.err"; fail "online resize --device $dev failed"; }
        export_params "$TMP/rs-$dev.store" "$TMP/rs-$dev.safetensors"
    done
    [ "$(grep -c '^resize at step' "$TMP/rs-cuda.txt")" = 3 ] || fail "the cuda job did not resize three times"
    close "$TMP/rs-cuda.txt" "$TMP/rs-cpu.txt" || fail "online resize on the devices differs from the cpu's"
    python3 "$cmp_st" "$TMP/rs-cuda.safetensors" "$TMP/rs-cpu.safetensors" --rel $TOL ||
        fail "online resize on the devices: parameters differ from the cpu's"
    grep '^resize at step' "$TMP/rs-cuda.txt"
    ran=$((ran + 1))
else
    echo "online resize on the devices skipped: one GPU"
fi
echo "ok: $ran settings, --device cuda equals --device cpu within $TOL"
