#!/bin/bash
# The resume options ptc elastic gives a job whose stores it cannot read
# (docs/elastic.md, "Stores on each host"), on one store and 2 processes:
# 1. --until-step 4 --resume --resume-any on an empty store: no version, the
#    job starts at step 0, runs steps 0..3 and saves at step 4;
# 2. the same with --until-step 6: resumed at step 4, steps 4 and 5 only;
#    with --until-step 6 again: nothing to run, exit 0, nothing printed;
# 3. --resume-from the first store into a second, new store, --until-step 8:
#    resumed at step 6 from the first, steps 6 and 7, saved into the second
#    (its newest version at step 8; the first untouched);
# every step's loss equal to one 8-step run's, bit for bit;
# 4. usage errors: --steps with --until-step, --resume-any without --resume
#    or with --version, --resume-from with --resume-any; --resume-from a store
#    without a version fails naming it.
. "$(dirname "$0")/lib_mpi.sh"
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
job=(--config dp=2 --microbatches 2 --schedule 1f1b --model $M --seed 4)
losses() { awk '/^step /{print $2, $4}' "$@"; }
run() { "${MPIRUN[@]}" -np 2 "$PTC" train "${job[@]}" "$@"; }

run --steps 8 > "$TMP/ref.out" || fail "the reference run"
run --store "$TMP/a" --save-every 2 --until-step 4 --resume --resume-any > "$TMP/1.out" ||
    fail "1: an empty store with --resume-any"
grep -q '^resumed' "$TMP/1.out" && fail "1: resumed from an empty store"
[ "$(awk '/^step /{print $2}' "$TMP/1.out" | tr '\n' ' ')" = "0 1 2 3 " ] || fail "1: steps $(cat "$TMP/1.out")"
grep -q '^saved version 2 (step 4)' "$TMP/1.out" || fail "1: $(cat "$TMP/1.out")"

run --store "$TMP/a" --save-every 2 --until-step 6 --resume --resume-any > "$TMP/2.out" || fail "2: resume"
grep -q '^resumed from version 2 at step 4,' "$TMP/2.out" || fail "2: $(cat "$TMP/2.out")"
[ "$(awk '/^step /{print $2}' "$TMP/2.out" | tr '\n' ' ')" = "4 5 " ] || fail "2: steps $(cat "$TMP/2.out")"
run --store "$TMP/a" --save-every 2 --until-step 6 --resume --resume-any > "$TMP/2b.out" ||
    fail "2: a job at its last step already"
[ ! -s "$TMP/2b.out" ] || fail "2: a job with nothing to run printed $(cat "$TMP/2b.out")"

run --store "$TMP/b" --save-every 2 --until-step 8 --resume-from "$TMP/a" > "$TMP/3.out" ||
    fail "3: --resume-from"
grep -q '^resumed from version 3 at step 6,' "$TMP/3.out" || fail "3: $(cat "$TMP/3.out")"
grep -q '^saved version 1 (step 8)' "$TMP/3.out" || fail "3: not saved into the new store: $(cat "$TMP/3.out")"
[ "$("$PTC" versions --store "$TMP/a" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))')" = 3 ] ||
    fail "3: the store resumed from was written"
[ "$(losses "$TMP/1.out" "$TMP/2.out" "$TMP/3.out")" = "$(losses "$TMP/ref.out")" ] ||
    fail "the losses differ from one 8-step run's"

# 4. usage errors (exit 2) and a store without a version
for bad in "--steps 2 --until-step 4" "--steps 2 --resume-any" \
    "--steps 2 --store $TMP/a --resume --resume-any --version 1" \
    "--steps 2 --store $TMP/a --resume --resume-any --resume-from $TMP/a"; do
    set +e
    # shellcheck disable=SC2086
    "$PTC" train "${job[@]}" $bad > /dev/null 2> "$TMP/err"
    rc=$?
    set -e
    [ $rc = 2 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q '^ptc: error: ' "$TMP/err" ||
        fail "usage error for '$bad': exit $rc, $(cat "$TMP/err")"
done
mkdir "$TMP/empty"
set +e
run --store "$TMP/c" --save-every 1 --steps 2 --resume-from "$TMP/empty" > /dev/null 2> "$TMP/err"
rc=$?
set -e
[ $rc != 0 ] && grep -q "ptc: error: .*$TMP/empty" "$TMP/err" || fail "--resume-from an empty store: exit $rc, $(cat "$TMP/err")"
echo "ok"
