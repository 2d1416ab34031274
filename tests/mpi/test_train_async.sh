#!/bin/bash
# ptc train --save-every N --save-async: the saves before the last run in the
# background (ptc_ckpt_save_async, the collective steps on the job's thread),
# and the job's results do not change: the same losses as with synchronous
# saves, the same versions (one per --save-every and one after the last, in
# order) with byte-identical parameters and AdamW moments, a resume from a
# background-saved version continuing with the same losses; the store
# verifies. --save-async without --save-every is refused.
. "$(dirname "$0")/lib_mpi.sh"
here=$(dirname "$0")
M=mlp:layers=4,hidden=16,vocab=32,tokens=8
losses() { awk '/^step /{print $2, $4}' "$1"; }
steps() { "$PTC" versions --store "$1" --json | python3 -c '
import json, sys
print(" ".join(v["step"] for v in json.load(sys.stdin)["versions"]))'; }
common=(--config dp=2,pp=2,zero=1 --schedule 1f1b --microbatches 4 --model $M --seed 7
        --timeout 120)
timeout 300 "${MPIRUN[@]}" -np 4 "$PTC" train "${common[@]}" --steps 8 --store "$TMP/sync" \
    --save-every 2 > "$TMP/sync.out" 2> "$TMP/sync.err" || { cat "$TMP/sync.err"; fail "sync run"; }
timeout 300 "${MPIRUN[@]}" -np 4 "$PTC" train "${common[@]}" --steps 8 --store "$TMP/async" \
    --save-every 2 --save-async > "$TMP/async.out" 2> "$TMP/async.err" ||
    { cat "$TMP/async.err"; fail "async run"; }
[ "$(losses "$TMP/sync.out")" = "$(losses "$TMP/async.out")" ] ||
    { paste "$TMP/sync.out" "$TMP/async.out"; fail "losses differ with --save-async"; }
[ "$(steps "$TMP/sync")" = "2 4 6 8" ] || fail "sync versions: $(steps "$TMP/sync")"
[ "$(steps "$TMP/async")" = "2 4 6 8" ] || fail "async versions: $(steps "$TMP/async")"
grep -q '^saved version 4 (step 8)' "$TMP/async.out" || { cat "$TMP/async.out"; fail "no final save line"; }
for v in 1 2 3 4; do
    "$PTC" export --store "$TMP/sync" --version $v --out "$TMP/s$v.safetensors" > /dev/null
    "$PTC" export --store "$TMP/async" --version $v --out "$TMP/a$v.safetensors" > /dev/null
    cmp -s "$TMP/s$v.safetensors" "$TMP/a$v.safetensors" ||
        fail "version $v differs between the sync and the async run"
done
"$PTC" verify --store "$TMP/async" --all > /dev/null || fail "verify"
echo "ok: --save-async: the same losses and versions, byte for byte"

timeout 300 "${MPIRUN[@]}" -np 4 "$PTC" train "${common[@]}" --steps 4 --store "$TMP/async" \
    --resume --version 2 > "$TMP/resumed.out" 2> "$TMP/resumed.err" ||
    { cat "$TMP/resumed.err"; fail "resume"; }
[ "$(losses "$TMP/sync.out" | tail -n 4)" = "$(losses "$TMP/resumed.out")" ] ||
    { paste "$TMP/sync.out" "$TMP/resumed.out"; fail "losses after a resume from an async version"; }
echo "ok: a resume from a background-saved version continues with the same losses"

if "$PTC" train "${common[@]}" --steps 2 --save-async > "$TMP/bad.out" 2> "$TMP/bad.err"; then
    fail "--save-async without --save-every succeeded"
fi
grep -q 'save-async needs --save-every' "$TMP/bad.err" || { cat "$TMP/bad.err"; fail "bad input message"; }
echo "ok: --save-async without --save-every refused"
