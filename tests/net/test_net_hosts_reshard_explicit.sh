#!/bin/bash
# labels: slow
# ptc reshard --mpi --across-hosts from versions saved with an explicit
# layout (per-rank pieces, config "explicit:3", as DTensors saved without
# config= make) on 3 hosts that share no filesystem (tests/net/lib_net.sh,
# NET_PRIVATE). The driver tests/mpi/ckpt_mpi.c (--layout explicit) saves
# tp=3's shards of a model of known global data as an explicit layout
# across the hosts: version 1 with --replicas 1 (data seed 7), version 2
# without (seed 8); each host's part at the same path on its own disk.
# 1. every host present: the default version (2, which the pick opens to
#    count its lost ranks and hands to the load) resharded to pp=3 into one
#    store on host 0 (--out): source_version 2, the bytes between hosts
#    equal to the plan's lower bound, and every local tensor of the store
#    byte-exact against version 2's source tensors (ckpt_mpi load);
# 2. host 2's disk replaced by an empty one: version 2 lacks rank 2, version
#    1 holds it on host 0 (host 2's replica): the default is version 1, with
#    the warning naming both, byte-exact against seed 7's tensors, host 2
#    a fresh host receiving its share; --version 2 names the rank lost.
. "$(dirname "$0")/lib_net.sh"
: "${PTC_BUILD:?PTC_BUILD must name the build folder}"
D=$PTC_BUILD/ckpt_mpi
NET_PRIVATE=$T/private
net_setup 3
S=$T/private/store
reshard() { net_mpirun -np 3 "$PTC" reshard --mpi --across-hosts --store "$S" "$@"; }
# exact NAME SEED STEP: the store host 0 wrote at $T/private/NAME holds
# pp=3's local tensors of SEED's global data, byte for byte, and the record
# of the version resharded (step STEP, seed SEED)
exact() {
    timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$D" load \
        --store "$T/disks/h0/$1" --config pp=3 --seed "$2" --step "$3" >"$T/$1.out" 2>&1 &&
        [ "$(grep -c '^loaded version 1: ' "$T/$1.out")" = 3 ]
}

# the explicit versions: process p on host p saves its tp rank under the
# driver's host name h<p> into its disk's h<p>, renamed to the store's path
for seed in 7 8; do
    net_mpirun -np 3 "$D" save --store "$T/private" --config tp=3 --layout explicit \
        --hosts h0,h1,h2 --replicas $((seed == 7)) --seed $seed --step $((seed - 4)) \
        >"$T/save$seed.out" 2>&1 || { cat "$T/save$seed.out" >&2; bad "explicit save $seed"; finish; }
done
grep -q "saved version 2" "$T/save8.out" && ok || bad "no version 2: $(cat "$T/save8.out")"
for i in 0 1 2; do mv "$T/disks/h$i/h$i" "$T/disks/h$i/store"; done
"$PTC" versions --store "$T/disks/h0/store" --json >"$T/log.json"
grep -q '"explicit:3"' "$T/log.json" && ok || bad "the parts are not explicit: $(cat "$T/log.json")"

# 1. every host present
if reshard --to pp=3 --out "$T/private/a" --json >"$T/a.json" 2>"$T/a.err"; then ok
else cat "$T/a.err" >&2; bad "reshard of the explicit version into one store"; fi
cat "$T/a.json"
[ "$(json "$T/a.json" source_version)" = 2 ] && [ "$(json "$T/a.json" hosts)" = 3 ] &&
    [ "$(json "$T/a.json" bytes_network)" -gt 0 ] &&
    [ "$(json "$T/a.json" bytes_network)" = "$(json "$T/a.json" bytes_network_lower_bound)" ] &&
    ok || bad "every host: $(cat "$T/a.json")"
[ ! -s "$T/a.err" ] && ok || bad "a warning with every host present: $(cat "$T/a.err")"
exact a 8 4 && ok || bad "version 2 resharded differs: $(cat "$T/a.out")"

# 2. host 2 replaced: an empty disk
rm -rf "$T/disks/h2"/*
if reshard --to pp=3 --out "$T/private/b" --json >"$T/b.json" 2>"$T/b.err"; then ok
else cat "$T/b.err" >&2; bad "reshard after host 2 was lost"; fi
cat "$T/b.json"
[ "$(json "$T/b.json" source_version)" = 1 ] &&
    [ "$(json "$T/b.json" bytes_network)" = "$(json "$T/b.json" bytes_network_lower_bound)" ] &&
    ok || bad "host 2 lost: $(cat "$T/b.json")"
grep -q "version 2 has no copy of 1 saved rank on the hosts present; taking version 1, the newest one they hold whole" \
    "$T/b.err" && ok || bad "no warning naming versions 2 and 1: $(cat "$T/b.err")"
exact b 7 3 && ok || bad "version 1 resharded differs: $(cat "$T/b.out")"
set +e
reshard --version 2 --to pp=3 --out "$T/private/x" >"$T/x.out" 2>"$T/x.err"
rc=$?
set -e
[ $rc != 0 ] && [ "$(grep -c '^ptc: error:' "$T/x.err")" = 1 ] &&
    grep -q "^ptc: error: .*version 2: the shards of 1 saved rank (2) are on no host present: lost with every copy" \
        "$T/x.err" && ok || bad "--version 2: rc $rc, $(cat "$T/x.err")"
finish
