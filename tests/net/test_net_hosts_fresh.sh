#!/bin/bash
# ptc reshard --mpi --across-hosts with a fresh host and with a lost newest
# version, on 3 hosts that share no filesystem (tests/net/lib_net.sh,
# NET_PRIVATE: each host sees only its own disk at $T/private). ptc train
# saves a tp=3 state with --replicas 1 (versions 1, 2); the reference is
# version 2 resharded to pp=3 into one store on host 0 with every host whole.
# 1. host 2's disk is replaced by an empty one (no store at all): the three
#    hosts reshard version 2 into one store on host 0 (--out) — host 2 takes
#    the layout from a host holding a part — byte-exact (the exported model
#    equals the reference), bytes between hosts = the plan's lower bound;
#    then as a new version V across hosts, host 2 writing its part.
# 2. a version W with no replicas is written from V; host 1's disk is lost:
#    W lacks rank 1, V is whole (its rank 1 has a copy in the part that host
#    2 wrote as a fresh host): the default version is V, with a warning
#    naming both, byte-exact again; --version W names the rank lost; host 2's
#    disk lost as well: no version is whole, one line names W's lost ranks.
. "$(dirname "$0")/lib_net.sh"
NET_PRIVATE=$T/private
net_setup 3
S=$T/private/store
reshard() { net_mpirun -np 3 "$PTC" reshard --mpi --across-hosts --store "$S" "$@"; }
# same NAME: the model of the store host 0 wrote at $T/private/NAME equals the reference
same() {
    "$PTC" export --store "$T/disks/h0/$1" --out "$T/$1.safetensors" >/dev/null &&
        cmp -s "$T/$1.safetensors" "$T/ref.safetensors"
}

net_mpirun -np 3 "$PTC" train --config tp=3 --schedule 1f1b --microbatches 2 \
    --model mlp:layers=6,hidden=24,vocab=32,tokens=4 --seed 5 --timeout 60 --steps 2 \
    --store "$S" --save-every 1 --replicas 1 >"$T/save.out" 2>"$T/save.err" ||
    { cat "$T/save.err" >&2; bad "the tp=3 save failed"; finish; }
reshard --version 2 --to pp=3 --out "$T/private/ref" >/dev/null 2>"$T/ref.err" ||
    { cat "$T/ref.err" >&2; bad "the reference reshard failed"; finish; }
"$PTC" export --store "$T/disks/h0/ref" --out "$T/ref.safetensors" >/dev/null

# 1. host 2 replaced: an empty disk
rm -rf "$T/disks/h2"/*
if reshard --version 2 --to pp=3 --out "$T/private/a" --json >"$T/a.json" 2>"$T/a.err"; then ok
else cat "$T/a.err" >&2; bad "reshard with a fresh host into one store"; fi
same a && ok || bad "the model resharded with a fresh host differs from the reference"
[ "$(json "$T/a.json" bytes_network)" -gt 0 ] &&
    [ "$(json "$T/a.json" bytes_network)" = "$(json "$T/a.json" bytes_network_lower_bound)" ] &&
    [ "$(json "$T/a.json" hosts)" = 3 ] && ok || bad "fresh host, --out: $(cat "$T/a.json")"
if reshard --version 2 --to pp=3 --json >"$T/v.json" 2>"$T/v.err"; then ok
else cat "$T/v.err" >&2; bad "reshard with a fresh host as a version across hosts"; fi
V=$(json "$T/v.json" version)
[ "$V" = 3 ] && [ "$(json "$T/v.json" bytes_network)" = "$(json "$T/v.json" bytes_network_lower_bound)" ] &&
    ok || bad "fresh host, across hosts: $(cat "$T/v.json")"
"$PTC" verify --store "$T/disks/h2/store" >/dev/null && ok || bad "ptc verify of the fresh host's part"

# 2. W (tp=3, no replicas) from V; host 1's disk lost
reshard --version "$V" --to tp=3 --replicas 0 --json >"$T/w.json" 2>"$T/w.err" ||
    { cat "$T/w.err" >&2; bad "the reshard without replicas failed"; }
W=$(json "$T/w.json" version)
rm -rf "$T/disks/h1"/*
if reshard --to pp=3 --out "$T/private/b" --json >"$T/b.json" 2>"$T/b.err"; then ok
else cat "$T/b.err" >&2; bad "the default version after host 1 was lost"; fi
[ "$(json "$T/b.json" source_version)" = "$V" ] && same b && ok ||
    bad "the default version is not V=$V byte-exact: $(cat "$T/b.json")"
grep -q "version $W has no copy of 1 saved rank on the hosts present; taking version $V" "$T/b.err" &&
    ok || bad "no warning naming versions $W and $V: $(cat "$T/b.err")"
set +e
reshard --version "$W" --to pp=3 --out "$T/private/x" >"$T/x.out" 2>"$T/x.err"
rc=$?
set -e
[ $rc != 0 ] && [ "$(grep -c '^ptc: error:' "$T/x.err")" = 1 ] &&
    grep -q "^ptc: error: .*the shards of 1 saved rank (1) are on no host present: lost with every copy" \
        "$T/x.err" && ok || bad "--version W: rc $rc, $(cat "$T/x.err")"
rm -rf "$T/disks/h2"/*
set +e
reshard --to pp=3 --out "$T/private/y" >"$T/y.out" 2>"$T/y.err"
rc=$?
set -e
[ $rc != 0 ] && [ "$(grep -c '^ptc: error:' "$T/y.err")" = 1 ] &&
    grep -q "^ptc: error: .*the shards of 2 saved ranks (1, 2) are on no host present: lost with every copy" \
        "$T/y.err" && ok || bad "no version whole: rc $rc, $(cat "$T/y.err")"
finish
