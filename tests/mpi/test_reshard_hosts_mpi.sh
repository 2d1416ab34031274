#!/usr/bin/env bash
# A store spread over hosts, read by ptc_reshard_hosts_load under mpirun
# (tests/mpi/ckpt_mpi.c --hosts): the processes of this machine are given
# host names of their own, each host's store a directory of its own
# (S/<host>; no process opens another's). 4 processes on hosts h0,h0,h1,h2
# save dp=2,tp=2,pp=2,zero=1 (2 ranks each) with one replica per host; then
# 1. 6 processes on h0,h0,h1,h1,h2,h2 load dp=1,tp=3,pp=2 byte-exact, the
#    bytes moved between hosts equal the plan's lower bound;
# 2. h2's store deleted: 3 processes on h0,h1,h1 load it again byte-exact
#    from the survivors and h2's replica on h0; then h2 back with an empty
#    store (a fresh host) loads dp=1,tp=3,pp=1 with h0 and h1;
# 3. an allocation failing on one process (the first, then later ones up
#    to the exchange) fails every process with one error line, no hang;
# 4. h1's store deleted too: h1's ranks had their only copy on h2: every
#    process fails naming the ranks ("lost with every copy");
# 5. the version the hosts hold whole (ptc_reshard_hosts_whole): tp=2 saved
#    on h0,h1 with one replica (v1), then without (v2); h1's store replaced
#    by an empty one: v2 lacks rank 1, v1 is whole on h0 (the replica), and
#    v1 loads byte-exact into h0 and the fresh h1, asked for or by default
#    (version 0: ptc_reshard_hosts_pick); v2 asked for names rank 1.
. "$(dirname "$0")/lib_mpi.sh"
. "$(dirname "$0")/lib_ckpt_mpi.sh"
moved_is_bound() { # the figures process 0 printed: moved = lower bound > 0
    python3 - "$1" <<'PY' || fail "moved bytes are not the lower bound: $(grep across "$1")"
import re, sys
m = re.search(r"moved (\d+) bytes \(lower bound (\d+)\)", open(sys.argv[1]).read())
assert m and int(m.group(1)) == int(m.group(2)) > 0, m and m.groups()
PY
}

run 4 save --store "$S" --config dp=2,tp=2,pp=2,zero=1 --seed 5 --step 10 \
    --hosts h0,h0,h1,h2 --replicas 1 >"$TMP/out" || fail "save across hosts"
grep -q "saved version 1" "$TMP/out" || fail "no version 1: $(cat "$TMP/out")"
for h in h0 h1 h2; do
    "$PTC" verify --store "$S/$h" >/dev/null || fail "verify of $h's part"
done
echo "ok: a version across 3 hosts"

# 1.
run 6 load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 \
    --hosts h0,h0,h1,h1,h2,h2 >"$TMP/out" || fail "load across 3 hosts"
[ "$(grep -c '^loaded version 1: ' "$TMP/out")" = 6 ] || fail "load: $(cat "$TMP/out")"
moved_is_bound "$TMP/out"
echo "ok: $(grep across "$TMP/out")"

# 2.
rm -rf "${S:?}/h2"
run 3 load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 \
    --hosts h0,h1,h1 >"$TMP/out" || fail "load from the survivors"
[ "$(grep -c '^loaded version 1: ' "$TMP/out")" = 3 ] || fail "load: $(cat "$TMP/out")"
moved_is_bound "$TMP/out"
echo "ok: h2 lost, $(grep across "$TMP/out")"

# 2b. h2 back with an empty store (a fresh host): it holds no part, takes
# the version's layout from process 0 and receives every byte it runs
mkdir -p "$S/h2"
run 3 load --store "$S" --config dp=1,tp=3,pp=1 --seed 5 --step 10 \
    --hosts h0,h1,h2 >"$TMP/out" || fail "load with a fresh host"
[ "$(grep -c '^loaded version 1: ' "$TMP/out")" = 3 ] || fail "load: $(cat "$TMP/out")"
grep -q '^loaded version 1: .* on process 2 (a host with no part)$' "$TMP/out" ||
    fail "process 2 is not the fresh host: $(cat "$TMP/out")"
moved_is_bound "$TMP/out"
rm -rf "${S:?}/h2"
echo "ok: a fresh host joins, $(grep across "$TMP/out")"

# 3.
CKPT_FAIL_PROCESS=1 expect_all_fail 3 "process 1|out of memory" -- \
    load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 --hosts h0,h1,h1
echo "ok: a failure on one process fails every process"
# ... at later steps too (process 1's K-th allocation: the inventory, the
# reads, the plan, the exchange; about 2500 in all today): every process
# fails with one error line, or every process loads (K past the last)
for k in 500 1500 2000 2400; do
    if CKPT_FAIL_PROCESS=1 CKPT_FAIL_AT=$k mpirun_each 3 timeout 300 "$D" load --store "$S" \
        --config dp=1,tp=3,pp=2 --seed 5 --step 10 --hosts h0,h1,h1 >"$TMP/out" 2>"$TMP/err"; then
        [ "$(grep -c '^loaded version 1: ' "$TMP/out")" = 3 ] || fail "K=$k: $(cat "$TMP/out")"
    else
        [ "$(grep -c '^error: ' "$TMP/err")" = 3 ] ||
            { cat "$TMP/err" >&2; fail "K=$k: not one error line from each process"; }
    fi
done
echo "ok: a failure at any step of the load on one process: the same outcome everywhere"

# 4.
rm -rf "${S:?}/h1"
expect_all_fail 2 "lost with every copy" -- \
    load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 --hosts h0,h0
echo "ok: every copy lost is an error naming the ranks"

# 5.
S2="$TMP/s2"
run 2 save --store "$S2" --config tp=2 --seed 5 --step 10 --hosts h0,h1 --replicas 1 \
    >/dev/null || fail "save v1 with a replica"
run 2 save --store "$S2" --config tp=2 --seed 5 --step 11 --hosts h0,h1 --replicas 0 \
    >/dev/null || fail "save v2 without"
run 2 whole --store "$S2" --config tp=2 --hosts h0,h1 >"$TMP/out" || fail "whole"
grep -qx 'whole: newest 2, version 2, missing 0' "$TMP/out" || fail "both hosts: $(cat "$TMP/out")"
rm -rf "${S2:?}/h1"
run 2 whole --store "$S2" --config tp=2 --hosts h0,h1 >"$TMP/out" || fail "whole without h1"
grep -qx 'whole: newest 2, version 1, missing 1' "$TMP/out" || fail "h1 fresh: $(cat "$TMP/out")"
run 2 load --store "$S2" --config tp=2 --seed 5 --step 10 --version 1 --hosts h0,h1 \
    >"$TMP/out" || fail "load of the version held whole"
grep -q '^loaded version 1: .* on process 1 (a host with no part)$' "$TMP/out" ||
    fail "load of v1: $(cat "$TMP/out")"
run 2 load --store "$S2" --config tp=2 --seed 5 --step 10 --hosts h0,h1 >"$TMP/out" ||
    fail "load of the default version (ptc_reshard_hosts_pick)"
grep -q '^loaded version 1: .* on process 1 (a host with no part)$' "$TMP/out" ||
    fail "the default version is not v1, the one held whole: $(cat "$TMP/out")"
expect_all_fail 2 "saved rank (1)|lost with every copy" -- \
    load --store "$S2" --config tp=2 --seed 5 --step 11 --version 2 --hosts h0,h1
echo "ok: v2 lacks rank 1 on h0 and a fresh h1; v1, held whole, loads (also by default)"
