#!/bin/bash
# The comparison tests/gpu/test_train_gpu.sh makes of --device cuda against
# --device cpu (tests/gpu/compare_adam.py, docs/runtime.md "Why --device
# cuda and cpu differ"), checked where no GPU is: the same job in two
# summation orders (dp=1 with 8 micro-batches, dp=2 with 4: the same global
# batch) passes — each run's update is AdamW's, the gradients agree within
# the rounding bound, every parameter within 2 sum K_t lr — while a run with
# another learning rate fails the optimizer check and one with another
# global batch fails the gradient check. Skipped (77) without numpy.
. "$(dirname "$0")/lib_mpi.sh" || exit 1
here=$(cd "$(dirname "$0")/../gpu" && pwd)
PTC_SRC=${PTC_SRC:-$(cd "$here/../.." && pwd)}
. "$here/lib_gpu.sh" || exit 1
py=$(numpy_python)
[ -n "$py" ] || skip "no Python with numpy (scripts/deps.sh makes one)"
M=mlp:layers=2,hidden=64,vocab=256,tokens=16
R=$(grad_rel 2 64 256 16 8)
job() { adam_job "$1" "$2" "$3" "$4" $M "${@:5}"; }
cmp() { adam_cmp "$1" $R "$2" "$3"; }
job a 1 dp=1 8
job b 2 dp=2 4
cmp 1e-3 a b > "$TMP/ab.txt" || { cat "$TMP/ab.txt"; fail "two summation orders of one job do not pass"; }
grep -q '^ok: 0 check(s) failed' "$TMP/ab.txt" || fail "no verdict"
job lr 1 dp=1 8 --lr 2e-3
if cmp 1e-3 a lr > "$TMP/lr.txt"; then cat "$TMP/lr.txt"; fail "a run with lr 2e-3 passed as lr 1e-3"; fi
grep -q "update is not AdamW's (lr 0.001" "$TMP/lr.txt" || { cat "$TMP/lr.txt"; fail "lr: not the optimizer check"; }
job batch 1 dp=1 4
if cmp 1e-3 a batch > "$TMP/batch.txt"; then cat "$TMP/batch.txt"; fail "another global batch passed"; fi
grep -q "gradients differ by .* more than the rounding bound" "$TMP/batch.txt" ||
    { cat "$TMP/batch.txt"; fail "batch: not the gradient check"; }
echo "ok: two summation orders pass ($(grep -m1 -o 'K_t = [0-9., ]*' "$TMP/ab.txt"); gradient bound $R), another lr and another batch fail"
