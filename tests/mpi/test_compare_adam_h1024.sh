# labels: slow
# The case of the H100 report (issue 33: after 3 steps of
# mlp:layers=4,hidden=1024,vocab=8192,tokens=256 with 8 micro-batches,
# --device cuda and --device cpu differed by 3.0e-3 of lm_head.weight's
# largest magnitude) on the CPU alone, in two summation orders of the same
# job: dp=1, and dp=1,tp=2 (the inner sums of the row-parallel matmuls and
# of the vocabulary split in two halves, as a GPU's kernels reorder inner
# sums):
# 1. the criterion tests/gpu/test_train_gpu.sh used before (each element
#    within 1e-4 of its tensor's largest magnitude, argued at hidden=16)
#    fails on these two runs, which differ by rounding only;
# 2. tests/gpu/compare_adam.py passes them: each update AdamW's, the
#    gradients within the rounding bound, every element within 2 sum K_t lr;
# 3. the element that moved most had a first non-zero gradient below eps
#    (AdamW's proportional regime: docs/runtime.md, "Why --device cuda and
#    cpu differ").
# About 4.5 minutes on 2 cores; 3.6 GB under $TMPDIR, 1.2 GB of memory.
# Skipped (77) without numpy, and in a sanitizer build.
. "$(dirname "$0")/lib_mpi.sh" || exit 1
here=$(cd "$(dirname "$0")/../gpu" && pwd)
PTC_SRC=${PTC_SRC:-$(cd "$here/../.." && pwd)}
. "$here/lib_gpu.sh" || exit 1
py=$(numpy_python)
[ -n "$py" ] || skip "no Python with numpy (scripts/deps.sh makes one)"
# under ASan (make test-asan) the 1.2 GB job takes several times the memory and
# time; tests/mpi/test_compare_adam.sh runs the same code there
! grep -qa __asan_init "$PTC" || skip "a sanitizer build (test_compare_adam.sh covers the code)"
M=mlp:layers=4,hidden=1024,vocab=8192,tokens=256
R=$(grad_rel 4 1024 8192 256 8)
adam_job a 1 dp=1 8 $M --timeout 1200
adam_job b 2 dp=1,tp=2 8 $M --timeout 1200
adam_cmp 1e-3 $R a b > "$TMP/ab.txt" || { cat "$TMP/ab.txt"; fail "two summation orders of one job do not pass"; }
grep -q '^ok: 0 check(s) failed' "$TMP/ab.txt" || { cat "$TMP/ab.txt"; fail "no verdict"; }
read -r dlr rel first <<< "$(sed -n 's/^summary: max|dp|\/lr \(.*\) max rel \(.*\) worst element.s first |g|\/eps \(.*\)$/\1 \2 \3/p' "$TMP/ab.txt")"
[ -n "$first" ] || { cat "$TMP/ab.txt"; fail "no summary line"; }
awk -v r="$rel" 'BEGIN { exit !(r > 1e-4) }' ||
    { cat "$TMP/ab.txt"; fail "the old criterion (1e-4 of a tensor's largest magnitude) holds here: rel $rel"; }
awk -v g="$first" 'BEGIN { exit !(g < 1) }' ||
    { cat "$TMP/ab.txt"; fail "the element that moved most had a first gradient of $first eps, not below eps"; }
grep -E '^(K_t|  \[|largest|  step)' "$TMP/ab.txt"
echo "ok: two summation orders at hidden=1024: $dlr lr apart at most ($rel of a tensor's largest magnitude, over the old 1e-4), within 2 sum K_t lr; the element that moved most had a first gradient of $first eps"
