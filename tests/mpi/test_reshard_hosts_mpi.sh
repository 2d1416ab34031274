#!/usr/bin/env bash
# A store spread over hosts, read by ptc_reshard_hosts_load under mpirun
# (tests/mpi/ckpt_mpi.c --hosts): the processes of this machine are given
# host names of their own, each host's store a directory of its own
# (S/<host>; no process opens another's). 4 processes on hosts h0,h0,h1,h2
# save dp=2,tp=2,pp=2,zero=1 (2 ranks each) with one replica per host; then
# 1. 6 processes on h0,h0,h1,h1,h2,h2 load dp=1,tp=3,pp=2 byte-exact, the
#    bytes moved between hosts equal the plan's lower bound;
# 1b. the same load in rounds of 64 KiB of source bytes a process
#    (PTC_HOSTS_LOAD_BUDGET; head.weight's shards of 640 KB exceed it and
#    go alone): byte-exact, many rounds; the shards stored uncompressed
#    are sent from the pack files' mappings (no source bytes held); read
#    into buffers instead (the test build's PTC_FAULT_NO_MAP=1, as for
#    compressed shards), the source bytes each process held at once within
#    max(budget, the largest tensor, 1.28 MB) and below the one-round load's;
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

# 1b.
PTC_HOSTS_LOAD_BUDGET=64K run 6 load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 \
    --hosts h0,h0,h1,h1,h2,h2 >"$TMP/out" || fail "load across 3 hosts in rounds"
[ "$(grep -c '^loaded version 1: ' "$TMP/out")" = 6 ] || fail "load in rounds: $(cat "$TMP/out")"
moved_is_bound "$TMP/out"
[ "$(grep -cE '^rounds ([2-9][0-9]|[1-9][0-9][0-9]+) peak 0 allocations' "$TMP/out")" = 6 ] ||
    fail "mapped load in rounds: $(grep rounds "$TMP/out")"
export PTC_FAULT_NO_MAP=1
run 6 load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 \
    --hosts h0,h0,h1,h1,h2,h2 >"$TMP/one_round" || fail "load read into buffers"
PTC_HOSTS_LOAD_BUDGET=64K run 6 load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 \
    --hosts h0,h0,h1,h1,h2,h2 >"$TMP/out" || fail "load read into buffers in rounds"
[ "$(grep -c '^loaded version 1: ' "$TMP/out")" = 6 ] || fail "load in rounds: $(cat "$TMP/out")"
python3 - "$TMP/one_round" "$TMP/out" <<'PY' || fail "rounds: $(grep rounds "$TMP/out")"
import re, sys
def each(path):  # process -> (rounds, peak)
    return {int(p): (int(r), int(k)) for r, k, p in re.findall(
        r"^rounds (\d+) peak (\d+) allocations \d+ on process (\d+)$", open(path).read(), re.M)}
one, many = each(sys.argv[1]), each(sys.argv[2])
assert len(one) == len(many) == 6, (one, many)
largest = 500 * 640 * 4  # head.weight, the largest tensor: no process holds more of one
for p in range(6):
    assert one[p][0] == 1 and many[p][0] >= 20 and many[p][0] == many[0][0], (p, one, many)
    assert 0 < many[p][1] <= max(64 << 10, largest), (p, many[p])
    assert many[p][1] < one[p][1], (p, one[p], many[p])
print("ok: rounds %d, peak source bytes %s (one round: %s)" % (
    many[0][0], [many[p][1] for p in range(6)], [one[p][1] for p in range(6)]))
PY
unset PTC_FAULT_NO_MAP

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
# ... and inside a later round of a load in rounds (of process 1's N
# allocations in a whole load, the 60th and 90th per cent: past the first
# rounds' reads, on the main thread or the one reading ahead; of the
# shards read into buffers)
export PTC_FAULT_NO_MAP=1
PTC_HOSTS_LOAD_BUDGET=64K run 3 load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 \
    --hosts h0,h1,h1 >"$TMP/out" || fail "load in rounds from the survivors"
n=$(sed -n 's/^rounds \([0-9]*\) peak [0-9]* allocations \([0-9]*\) on process 1$/\1 \2/p' "$TMP/out")
set -- $n
[ "${1:-0}" -ge 20 ] && [ "${2:-0}" -gt 100 ] || fail "rounds and allocations: $(cat "$TMP/out")"
failed=0
for k in $(($2 * 6 / 10)) $(($2 * 7 / 10)) $(($2 * 9 / 10)); do
    if PTC_HOSTS_LOAD_BUDGET=64K CKPT_FAIL_PROCESS=1 CKPT_FAIL_AT=$k mpirun_each 3 timeout 300 \
        "$D" load --store "$S" --config dp=1,tp=3,pp=2 --seed 5 --step 10 --hosts h0,h1,h1 \
        >"$TMP/out" 2>"$TMP/err"; then # an allocation whose failure is borne (a pool's thread)
        [ "$(grep -c '^loaded version 1: ' "$TMP/out")" = 3 ] || fail "K=$k: $(cat "$TMP/out")"
    else
        [ "$(grep -c '^error: ' "$TMP/err")" = 3 ] ||
            { cat "$TMP/err" >&2; fail "K=$k of $2 in rounds: not one error line from each process"; }
        failed=$((failed + 1))
    fi
done
[ "$failed" -ge 1 ] || fail "no allocation inside a later round failed the load"
unset PTC_FAULT_NO_MAP
echo "ok: a failure inside a later round ($1 rounds, $failed of 3 points of $2 allocations failed the load): every process fails alike"

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
