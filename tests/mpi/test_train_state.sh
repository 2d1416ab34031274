#!/bin/bash
# The training job's whole state in the store (ptc train --store):
# 1. exact continuation: 10 steps equal 5 steps, save, resume in the same
#    configuration, 5 steps -- per-step losses and the final parameters and
#    AdamW moments bit for bit -- over schedule kinds x zero 0, 1 x dp 1, 2 x
#    tp 1, 2 (pp 2): a pairwise subset (14 of 56; tests/pairwise.py), all
#    56 with PTC_TEST_FULL=1 (test_train_state_all.sh, label slow);
# 2. configuration changes: dp2-tp2-pp2 (8 processes) -> save -> resume
#    dp1-tp3-pp2 (6) -> save -> resume dp2-tp1-pp4 with another global batch,
#    reading a stored dataset: every step's loss within 1e-5 relative of a
#    single process that never changed (dp1-tp1-pp1, the same global
#    batches), the exported state within 1e-5 of its state, and the dataset
#    audit of the epoch: every sample served exactly once;
# 3. bad input: one `ptc: error:` line on every process, exit 1, the store
#    intact.
. "$(dirname "$0")/lib_mpi.sh"
here=$(dirname "$0")
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
losses() { awk '/^step /{print $2, $4}' "$1"; }

# ---- 1. exact continuation ----------------------------------------------------------
mapfile -t rows < <(python3 "$here/../pairwise.py" kind=1f1b,gpipe,interleaved,kfkb,zb-h1,zb-v,chimera \
                    zero=0,1 dp=1,2 tp=1,2)
n=0
for row in "${rows[@]}"; do
    read -r kind zero D T <<< "$row"
    np=$((2 * D * T))
    st="$TMP/c-$kind-$zero-$D-$T"
    common=(--config dp=$D,tp=$T,pp=2,zero=$zero --schedule $kind --chunks 2 --k 2
            --microbatches 4 --model $M --seed 5 --store "$st" --timeout 60)
    "${MPIRUN[@]}" -np $np "$PTC" train "${common[@]}" --steps 10 --save-every 5 \
        > "$st.a" 2> "$st.err" || { cat "$st.err"; fail "$kind zero=$zero dp$D tp$T: 10 steps"; }
    "${MPIRUN[@]}" -np $np "$PTC" train "${common[@]}" --steps 5 --resume --version 1 \
        --save-every 0 > "$st.b" 2> "$st.err" ||
        { cat "$st.err"; fail "$kind zero=$zero dp$D tp$T: resume"; }
    [ "$(losses "$st.a" | tail -n 5)" = "$(losses "$st.b")" ] ||
        { paste "$st.a" "$st.b"; fail "$kind zero=$zero dp$D tp$T: losses after the resume differ"; }
    [ "$(losses "$st.b" | head -n 1 | cut -d' ' -f1)" = 5 ] || fail "the resumed run did not start at step 5"
    # version 2: after 10 steps; version 3: after 5 + resume + 5
    "$PTC" export --store "$st" --version 2 --out "$st.v2.safetensors"
    "$PTC" export --store "$st" --version 3 --out "$st.v3.safetensors"
    python3 "$here/compare_st.py" "$st.v2.safetensors" "$st.v3.safetensors" > /dev/null ||
        fail "$kind zero=$zero dp$D tp$T: parameters or moments differ after the resume"
    n=$((n + 1))
done
least=14; [ "${PTC_TEST_EACH:-}" = 1 ] && least=7 # every kind once under the sanitizers
[ "$n" = "${#rows[@]}" ] && [ "$n" -ge $least ] || fail "only $n configurations ran"
# the exported state holds the moments, and they moved (every subset has 1f1b zero=1 dp2 tp2)
python3 - "$TMP/c-1f1b-1-2-2.v3.safetensors" <<'PY' || fail "moments missing or zero"
import json, struct, sys
d = open(sys.argv[1], "rb").read()
h = json.loads(d[8:8 + struct.unpack("<Q", d[:8])[0]])
names = [k for k in h if k != "__metadata__"]
assert sum(k.endswith(".exp_avg") for k in names) == 28, names
assert sum(k.endswith(".exp_avg_sq") for k in names) == 28, names
PY
echo "ok: exact continuation in $n configurations"

# ---- 2. configuration changes -------------------------------------------------------
# 112 windows: 4 steps of 8, 4 of 8, 4 of 12 consume the epoch exactly
python3 - "$TMP/tok.bin" <<'PY'
import random, struct, sys
r = random.Random(7)
n = 112 * 5
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[r.randrange(16) for _ in range(n)]))
PY
for st in "$TMP/chg" "$TMP/ref"; do
    "$PTC" dataset ingest --store "$st" --name toks --format tokens:u16:5 "$TMP/tok.bin" > /dev/null
done
common=(--schedule 1f1b --model $M --seed 3 --data dataset:toks --save-every 0 --steps 4 --timeout 60)
run() { # NP CONFIG MICROBATCHES STORE OUT [--resume]
    local np=$1 cfg=$2 mb=$3 st=$4 out=$5; shift 5
    "${MPIRUN[@]}" -np "$np" "$PTC" train --config "$cfg" --microbatches "$mb" --store "$st" \
        "${common[@]}" "$@" > "$out" 2> "$out.err" || { cat "$out.err"; fail "$cfg: exited non-zero"; }
}
run 8 dp=2,tp=2,pp=2 4 "$TMP/chg" "$TMP/c1"
run 6 dp=1,tp=3,pp=2 8 "$TMP/chg" "$TMP/c2" --resume
run 8 dp=2,tp=1,pp=4 6 "$TMP/chg" "$TMP/c3" --resume
# the reference never changes its parallelism: one process, the same global batches
run 1 pp=1 8 "$TMP/ref" "$TMP/r1"
run 1 pp=1 8 "$TMP/ref" "$TMP/r2" --resume
run 1 pp=1 12 "$TMP/ref" "$TMP/r3" --resume
paste <(cat "$TMP"/c[123] | awk '/^step /{print $2, $4}') <(cat "$TMP"/r[123] | awk '/^step /{print $2, $4}') |
    awk '{ if ($1 != $3) exit 2; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * $4) exit 1; n++ }
         END { if (n != 12) exit 3 }' || fail "losses of the changing run are not within 1e-5 of the reference"
[ "$("$PTC" dataset audit --store "$TMP/chg" --name toks --seed 3 --epoch 0 --json)" = \
  '{"samples":112,"once":112,"repeated":0,"missing":0}' ] || fail "audit: not every sample exactly once"
"$PTC" export --store "$TMP/chg" --out "$TMP/chg.safetensors"
"$PTC" export --store "$TMP/ref" --out "$TMP/ref.safetensors"
python3 "$here/compare_st.py" "$TMP/chg.safetensors" "$TMP/ref.safetensors" --rel 1e-5 ||
    fail "the changed job's exported state is not within 1e-5 of the reference's"
"$PTC" verify --store "$TMP/chg" > /dev/null || fail "verify"
echo "ok: dp2-tp2-pp2 -> dp1-tp3-pp2 -> dp2-tp1-pp4 (batch 8 -> 8 -> 12) within 1e-5; audit exactly once"

# ---- 3. bad input -----------------------------------------------------------------------
# one `ptc: error:` line on every process naming the problem, exit 1, store unchanged
expect_all_fail() { # NP WORDS -- ARGS...
    local np=$1 words=$2; shift 3
    local before after
    before=$("$PTC" versions --store "$TMP/chg" --json)
    set +e
    mpirun_each "$np" "$PTC" train "$@" > "$TMP/bad.out" 2> "$TMP/bad.err"
    local rc=$?
    set -e
    [ $rc = 1 ] || { cat "$TMP/bad.err"; fail "exit $rc (want 1): $words"; }
    [ "$(grep -c '^ptc: error: ' "$TMP/bad.err")" = "$np" ] ||
        { cat "$TMP/bad.err"; fail "not one error line per process: $words"; }
    grep '^ptc: error: ' "$TMP/bad.err" | grep -qi "$words" || { cat "$TMP/bad.err"; fail "error does not say '$words'"; }
    after=$("$PTC" versions --store "$TMP/chg" --json)
    [ "$before" = "$after" ] || fail "the store changed: $words"
    "$PTC" verify --store "$TMP/chg" > /dev/null || fail "verify after: $words"
}
bad=(--schedule 1f1b --seed 3 --store "$TMP/chg" --steps 2 --save-every 0)
expect_all_fail 2 "holds the model" -- --config pp=2 --microbatches 4 --model mlp:layers=4,hidden=16,vocab=16,tokens=4 \
    --resume "${bad[@]}"
expect_all_fail 2 "layers" -- --config pp=2,layers=1:1 --microbatches 4 --model $M --resume "${bad[@]}"
expect_all_fail 2 "no dataset" -- --config pp=2 --microbatches 4 --model $M --data dataset:nope "${bad[@]}"
expect_all_fail 2 "version 99" -- --config pp=2 --microbatches 4 --model $M --resume --version 99 "${bad[@]}"
echo "ok: bad input"
