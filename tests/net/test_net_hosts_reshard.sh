#!/bin/bash
# ptc reshard --mpi --across-hosts on a store spread over 3 hosts that share
# no filesystem (tests/net/lib_net.sh, NET_PRIVATE: each host sees only its
# own disk at $T/private). ptc train saves a tp=3 state with --replicas 1;
# then
# 1. the store is resharded to pp=3 as a new version across hosts: the bytes
#    moved between hosts equal the plan's lower bound (--json), and a
#    resume under pp=3 from it moves nothing and trains exactly as a resume
#    under pp=3 from the tp=3 version (losses bit for bit);
# 2. host 2's disk is lost; the tp=3 version is resharded from the
#    survivors' parts and replicas into one ordinary store on host 0
#    (--out): it verifies, a single-host resume from it gives the same
#    losses again, and a mount of it serves the model that the same reshard
#    with every host present wrote (what users mount: a host's part of a
#    store spread over hosts is not a whole state);
# 3. bad command lines and a version no host holds fail with one line.
. "$(dirname "$0")/lib_net.sh"
NET_PRIVATE=$T/private
net_setup 3
common=(--schedule 1f1b --microbatches 2 --model mlp:layers=6,hidden=24,vocab=32,tokens=4
    --seed 5 --timeout 60)
S=$T/private/store
losses() { awk '/^step /{print $2, $4}' "$1"; }

net_mpirun -np 3 "$PTC" train --config tp=3 "${common[@]}" --steps 2 --store "$S" \
    --save-every 1 --replicas 1 >"$T/save.out" 2>"$T/save.err" ||
    { cat "$T/save.err" >&2; bad "the tp=3 save failed"; finish; }
# the reference: resume under pp=3 straight from the tp=3 version (2)
net_mpirun -np 3 "$PTC" train --config pp=3 "${common[@]}" --steps 2 --store "$S" \
    --replicas 1 --resume --version 2 >"$T/ref.out" 2>"$T/ref.err" ||
    { cat "$T/ref.err" >&2; bad "the reference resume failed"; finish; }

# 1. a new version across hosts under pp=3
if net_mpirun -np 3 "$PTC" reshard --mpi --across-hosts --store "$S" --version 2 --to pp=3 \
    --json >"$T/r1.json" 2>"$T/r1.err"; then ok; else cat "$T/r1.err" >&2; bad "reshard across hosts"; fi
cat "$T/r1.json"
V=$(json "$T/r1.json" version)
[ "$(json "$T/r1.json" source_version)" = 2 ] && [ "$V" -gt 2 ] && ok || bad "versions: $(cat "$T/r1.json")"
[ "$(json "$T/r1.json" bytes_network)" -gt 0 ] &&
    [ "$(json "$T/r1.json" bytes_network)" = "$(json "$T/r1.json" bytes_network_lower_bound)" ] &&
    ok || bad "moved bytes are not the plan's lower bound: $(cat "$T/r1.json")"
net_mpirun -np 3 "$PTC" train --config pp=3 "${common[@]}" --steps 2 --store "$S" \
    --replicas 1 --resume --version "$V" >"$T/r1.out" 2>"$T/r1t.err" ||
    { cat "$T/r1t.err" >&2; bad "the resume from the resharded version failed"; }
grep -q '^resume moved 0 bytes between hosts' "$T/r1.out" && ok || bad "$(grep '^resume' "$T/r1.out")"
[ -n "$(losses "$T/ref.out")" ] && [ "$(losses "$T/r1.out")" = "$(losses "$T/ref.out")" ] && ok ||
    bad "losses after the resharded version differ: $(losses "$T/r1.out" | tr '\n' ' ')"

# 2. version 2 into one store on host 0 while every host is present (the
# reference), then host 2 lost: version 2 from the survivors
net_mpirun -np 3 "$PTC" reshard --mpi --across-hosts --store "$S" --version 2 --to pp=3 \
    --out "$T/private/full" >/dev/null 2>"$T/full.err" || { cat "$T/full.err" >&2; bad "--out, 3 hosts"; }
rm -rf "$T/disks/h2"/*
printf '10.177.0.1 slots=1\n10.177.0.2 slots=1\n' >"$T/hosts2"
mpirun2=(ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$T/hosts2" --map-by slot
    --bind-to none "${NET_MPI_OPTS[@]}")
if "${mpirun2[@]}" -np 2 "$PTC" reshard --mpi --across-hosts --store "$S" --version 2 --to pp=3 \
    --out "$T/private/one" --json >"$T/r2.json" 2>"$T/r2.err"; then ok
else cat "$T/r2.err" >&2; bad "reshard across hosts into one store"; fi
cat "$T/r2.json"
[ "$(json "$T/r2.json" bytes_network)" = "$(json "$T/r2.json" bytes_network_lower_bound)" ] &&
    [ "$(json "$T/r2.json" bytes_network)" -gt 0 ] && ok || bad "into one store: $(cat "$T/r2.json")"
[ -d "$T/disks/h0/one" ] && [ ! -e "$T/disks/h1/one" ] && ok || bad "the store is not on host 0 alone"
"$PTC" verify --store "$T/disks/h0/one" >/dev/null && ok || bad "ptc verify of the store on host 0"
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$PTC" train --config pp=3 \
    "${common[@]}" --steps 2 --store "$T/disks/h0/one" --resume >"$T/r2.out" 2>"$T/r2t.err" ||
    { cat "$T/r2t.err" >&2; bad "the resume from the single store failed"; }
[ "$(losses "$T/r2.out")" = "$(losses "$T/ref.out")" ] && ok ||
    bad "losses after the single store differ: $(losses "$T/r2.out" | tr '\n' ' ')"

# the mount on host 0 serves it: the model equals the one from every host
if command -v fusermount3 >/dev/null && [ -e /dev/fuse ]; then
    mkdir -p "$T/mnt"
    "$PTC" export --store "$T/disks/h0/full" --out "$T/full.safetensors" >/dev/null
    if "$PTC" mount --store "$T/disks/h0/one" "$T/mnt" 2>"$T/mount.err" &&
        cmp -s "$T/mnt/models/1/model.safetensors" "$T/full.safetensors"; then ok
    else bad "the mount of the store on host 0 does not serve the state: $(cat "$T/mount.err")"; fi
    fusermount3 -u "$T/mnt" 2>/dev/null || true
fi

# 3. one-line errors
expect_fail 2 across-hosts mpi -- "$PTC" reshard --across-hosts --store "$S" --to pp=3
expect_fail 2 out across-hosts -- "$PTC" reshard --store "$S" --to pp=3 --out "$T/x"
expect_fail 2 dtype across-hosts -- "$PTC" reshard --mpi --across-hosts --store "$S" --to pp=3 --dtype BF16
expect_fail 2 replicas out -- "$PTC" reshard --mpi --across-hosts --store "$S" --to pp=3 --out "$T/x" --replicas 1
set +e
"${mpirun2[@]}" -np 2 "$PTC" reshard --mpi --across-hosts --store "$S" --version 99 --to pp=3 \
    >"$T/r3.out" 2>"$T/r3.err"
rc=$?
set -e
[ $rc != 0 ] && grep -q "^ptc: error: .*no committed version 99 across hosts (newest: $V)" "$T/r3.err" && ok ||
    bad "a version no host holds: rc $rc, $(cat "$T/r3.err")"
finish
