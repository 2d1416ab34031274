#!/usr/bin/env bash
# Collective checkpoints under mpirun (tests/mpi/ckpt_mpi.c): a save from 8
# processes (dp2-tp2-pp2 zero=1) loads byte-exact into 6 (dp1-tp3-pp2), 4
# (dp2-tp1-pp2 with another layers=) and 3 processes (several ranks each);
# a failure injected on one process (save or load), a store locked by another writer and a
# missing version each end every process with one "error:" line naming the
# cause, no hang, no new version, the store verified; saves in the background
# (ptc_ckpt_save_async, both ways) hold the bytes of the call.
. "$(dirname "$0")/lib_mpi.sh"
. "$(dirname "$0")/lib_ckpt_mpi.sh"
nversions() { "$PTC" versions --store "$S" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))'; }

# 1. save from 8 processes, one rank each
run 8 save --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 5 --step 10 >"$TMP/out" ||
    fail "save from 8 processes"
grep -q "saved version 1" "$TMP/out" || fail "no version 1"
"$PTC" verify --store "$S" >/dev/null || fail "verify after the save"
"$PTC" info --store "$S" --json | python3 -c '
import json, sys
v = json.load(sys.stdin)["versions"][0]
assert v["config"] == "dp=2,tp=2,pp=2,zero=1", v["config"]
rec = json.loads(v["metadata"]["ptc.train"])
assert rec["step"] == 10 and rec["seed"] == "5" and rec["format"] == 1, rec
' || fail "the record in ptc info --json"
echo "ok: save from 8 processes"

# 2. loads under other configurations and process counts
for np_cfg in "6 dp=1,tp=3,pp=2" "4 dp=2,tp=1,pp=2,layers=1:3" "3 dp=2,tp=2,pp=2,zero=1" \
              "2 dp=1,tp=2,pp=1,zero=1"; do
    set -- $np_cfg
    run "$1" load --store "$S" --config "$2" --seed 5 --step 10 >"$TMP/out" ||
        fail "load into $2 with $1 processes"
    [ "$(grep -c '^loaded version 1: ' "$TMP/out")" = "$1" ] || fail "load into $2: $(cat "$TMP/out")"
done
echo "ok: loads into dp1-tp3-pp2 (6), dp2-tp1-pp2 layers=1:3 (4), 3 and 2 processes"

# 3. a second save, two ranks per process, then a load of it
run 4 save --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 6 --step 20 --threads 2 \
    >"$TMP/out" || fail "save from 4 processes"
grep -q "saved version 2" "$TMP/out" || fail "no version 2"
run 8 load --store "$S" --config dp=4,tp=2,pp=1 --seed 6 --step 20 >/dev/null ||
    fail "load of version 2 into dp4-tp2"
run 2 load --store "$S" --config dp=2,tp=1,pp=1 --seed 5 --step 10 --version 1 >/dev/null ||
    fail "load of version 1 after version 2"
echo "ok: save from 4 processes, loads of both versions"

# 4. process 2's first write fails: every process reports it, nothing visible
before=$(nversions)
CKPT_FAIL_PROCESS=2 expect_all_fail 8 "process 2|no space left" -- \
    save --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 7 --step 30
[ "$(nversions)" = "$before" ] || fail "a failed save left a version"
[ ! -e "$S/packs/v3" ] || fail "a failed save left its pack files: $(ls "$S/packs/v3")"
"$PTC" verify --store "$S" --all >/dev/null || fail "verify after the failed save"
CKPT_FAIL_PROCESS=0 expect_all_fail 4 "process 0|no space left" -- \
    save --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 7 --step 30
[ "$(nversions)" = "$before" ] && [ ! -e "$S/packs/v3" ] || fail "failed save on process 0"
CKPT_FAIL_PROCESS=1 expect_all_fail 6 "process 1|out of memory" -- \
    load --store "$S" --config dp=1,tp=3,pp=2 --seed 6 --step 20
echo "ok: a failure on one process fails every process, nothing visible"

# 5. a store locked by another writer
rm -f "$S/ready" "$S/release"
"$D" hold --store "$S" --config dp=2,tp=2,pp=2,zero=1 &
holder=$!
for _ in $(seq 1 600); do [ -e "$S/ready" ] && break; sleep 0.1; done
[ -e "$S/ready" ] || fail "the lock holder did not start"
PTC_LOCK_TIMEOUT=0 expect_all_fail 4 "locked|pid $holder|process 0" -- \
    save --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 7 --step 30
touch "$S/release"
wait "$holder" || fail "the lock holder failed"
rm -f "$S/ready" "$S/release"
[ "$(nversions)" = "$before" ] || fail "a locked save left a version"

# 6. a version that does not exist, a tensor of another shape (the layout
#    of another model is what a wrong --config gives the driver)
expect_all_fail 3 "version 9 not found" -- \
    load --store "$S" --config dp=2,tp=2,pp=2 --version 9
expect_all_fail 2 "layers" -- load --store "$S" --config pp=2,layers=1:2
"$PTC" verify --store "$S" --all >/dev/null || fail "verify at the end"
run 8 load --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 6 --step 20 >/dev/null ||
    fail "the newest version after the failures"
echo "ok: locked store, missing version, a configuration the model cannot take"

# 7. saves in the background (ptc_ckpt_save_async): the collective steps on
#    the library's thread over a duplicate communicator while the processes
#    run collectives of their own, or on the caller's thread; the buffers are
#    overwritten as soon as the call returns: the versions hold the snapshot
run 4 async --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 11 --step 40 >"$TMP/out" ||
    fail "async save from 4 processes"
v=$(sed -n 's/^saved version //p' "$TMP/out")
run 3 async-caller --store "$S" --config dp=1,tp=3,pp=2 --seed 12 --step 41 >"$TMP/out" ||
    fail "async save with the collectives on the caller's thread"
w=$(sed -n 's/^saved version //p' "$TMP/out")
[ "$w" = $((v + 1)) ] || fail "async versions $v, $w"
[ "$(run 6 load --store "$S" --config dp=1,tp=3,pp=2 --seed 11 --step 40 --version "$v" |
     grep -c 'ranks equal')" = 6 ] || fail "the background save's version differs"
[ "$(run 2 load --store "$S" --config dp=2,tp=1,pp=1 --seed 12 --step 41 --version "$w" |
     grep -c 'ranks equal')" = 2 ] || fail "the caller-thread save's version differs"
"$PTC" verify --store "$S" --all >/dev/null || fail "verify after the async saves"
echo "ok: async saves in the background and on the caller's thread hold their snapshot"
