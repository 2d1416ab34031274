#!/bin/bash
# ptc mount --across-hosts: host 0's part of a store spread over 3 hosts that
# share no filesystem (tests/net/lib_net.sh, NET_PRIVATE) served whole.
# ptc train saves a tp=3 state with --replicas 1; host 2's disk is then lost.
# The mount (on host 0's disk) gathers a version at its first opening by the
# MPI job it is given (`ptc reshard --mpi --across-hosts --out`, over hosts 0
# and 1: host 2's ranks from their replicas) and serves:
# 1. models/<V>/model.safetensors byte for byte the model exported from the
#    same version gathered while every host was present, and a rank file
#    under another configuration equal to the same file of a mount of that
#    whole store; one gather per version (the gathered store holds one
#    version after reading both); an ordinary version is not gathered;
# 2. a launcher that fails: the read fails (EIO), the error is in DIR2.log;
# 3. the default gathered store (in $TMPDIR) is gone after the unmount.
. "$(dirname "$0")/lib_net.sh"
command -v fusermount3 >/dev/null && [ -e /dev/fuse ] || { echo "SKIP: no FUSE"; exit 77; }
NET_PRIVATE=$T/private
net_setup 3
mnts=()
unmount_all() { local m; for m in "${mnts[@]}"; do fusermount3 -u "$m" 2>/dev/null || true; done; }
trap 'unmount_all; net_cleanup' EXIT
common=(--schedule 1f1b --microbatches 2 --model mlp:layers=6,hidden=24,vocab=32,tokens=4
    --seed 5 --timeout 60)
S=$T/private/store H0=$T/disks/h0

net_mpirun -np 3 "$PTC" train --config tp=3 "${common[@]}" --steps 2 --store "$S" \
    --save-every 1 --replicas 1 >"$T/save.out" 2>"$T/save.err" ||
    { cat "$T/save.err" >&2; bad "the tp=3 save failed"; finish; }
# the reference: version 2 gathered while every host is present
net_mpirun -np 3 "$PTC" reshard --mpi --across-hosts --store "$S" --version 2 --to tp=3 \
    --out "$T/private/ref" >/dev/null 2>"$T/ref.err" || { cat "$T/ref.err" >&2; bad "reference"; }
"$PTC" export --store "$H0/ref" --out "$T/ref.safetensors" >/dev/null
newest() { "$PTC" versions --store "$1" --json | python3 -c '
import json, sys
vs = json.load(sys.stdin)["versions"]
print(max([v["version"] for v in vs] or [0]), len(vs))'; }
read -r V _ <<<"$(newest "$H0/store")" # host 0's part of version 2 across hosts
# an ordinary version in host 0's store besides the parts
"$PTC" import --store "$H0/store" --config tp=1 --rules none "$T/ref.safetensors" >/dev/null \
    2>"$T/imp.err" || bad "import into host 0's store: $(cat "$T/imp.err")"
read -r I _ <<<"$(newest "$H0/store")"
echo "part of version 2: local version $V; the import: $I"
rm -rf "$T/disks/h2"/*

# the launcher: mpirun over hosts 0 and 1 (process 0 on host 0), the paths of
# host 0's disk as the hosts see it ($T/private), after 108 KB of chatter on
# its standard output
printf '10.177.0.1 slots=1\n10.177.0.2 slots=1\n' >"$T/hosts2"
{
    echo '#!/bin/bash'
    printf 'from=%q to=%q args=()\n' "$H0/" "$T/private/"
    echo 'for a in "$@"; do args+=("${a//"$from"/"$to"}"); done'
    echo 'seq 1 20000 # a chatty launcher: 108 KB before the report, which the mount must find'
    printf 'exec ip netns exec %q mpirun --allow-run-as-root --hostfile %q --map-by slot --bind-to none' \
        "$NET-l" "$T/hosts2"
    printf ' %q' "${NET_MPI_OPTS[@]}"
    echo ' -np 2 "${args[@]}"'
} >"$T/gather"
chmod +x "$T/gather"

# 1. the mount of host 0's part
mkdir -p "$T/mnt" "$T/mref" "$T/tmp"
mnts=("$T/mnt" "$T/mref")
"$PTC" mount --store "$H0/ref" "$T/mref" 2>"$T/mref.err" || bad "mount of the reference: $(cat "$T/mref.err")"
if TMPDIR=$T/tmp "$PTC" mount --store "$H0/store" --across-hosts "$T/gather" "$T/mnt" \
    2>"$T/mount.err"; then ok; else bad "mount --across-hosts: $(cat "$T/mount.err")"; fi
cmp -s "$T/mnt/models/$V/model.safetensors" "$T/ref.safetensors" && ok ||
    bad "the gathered model differs from the reference: $(cat "$T/tmp"/ptc-gathered.*.log 2>/dev/null | tail -5)"
cmp -s "$T/mnt/models/$V/dp1-tp1-pp3/rank-1.safetensors" "$T/mref/models/1/dp1-tp1-pp3/rank-1.safetensors" &&
    ok || bad "a pp=3 rank file differs from the whole store's"
# its info.json: the part's record (number), the tensors of the copy
python3 -c '
import json, sys
i = json.load(open(sys.argv[1]))
assert i["version"] == int(sys.argv[2]) and i["config"].startswith("dp=1,tp=3") and i["tensor_count"] > 0, i
' "$T/mnt/models/$V/info.json" "$V" && ok || bad "info.json: $(cat "$T/mnt/models/$V/info.json")"
read -r _ n <<<"$(newest "$(echo "$T/tmp"/ptc-gathered.??????)")"
[ "$n" = 1 ] && ok || bad "the gathered store holds $n versions, not 1"
cmp -s "$T/mnt/models/$I/model.safetensors" "$T/ref.safetensors" && ok || bad "the ordinary version"
read -r _ n <<<"$(newest "$(echo "$T/tmp"/ptc-gathered.??????)")"
[ "$n" = 1 ] && ok || bad "the ordinary version was gathered ($n versions)"
fusermount3 -u "$T/mnt"
sleep 0.5
# 3. its gathered store is removed with the mount
[ -z "$(ls "$T/tmp")" ] && ok || bad "left in \$TMPDIR after the unmount: $(ls "$T/tmp")"

# 2. a launcher that fails
printf '#!/bin/sh\necho "no MPI here" >&2\nexit 3\n' >"$T/nompi"
chmod +x "$T/nompi"
"$PTC" mount --store "$H0/store" --across-hosts "$T/nompi" --gather-dir "$T/g2" "$T/mnt" \
    2>"$T/mount2.err" || bad "mount with a failing launcher: $(cat "$T/mount2.err")"
if cat "$T/mnt/models/$V/model.safetensors" >/dev/null 2>"$T/cat.err"; then
    bad "a read through a failing gather succeeded"
else
    grep -q "Input/output error" "$T/cat.err" && ok || bad "the read failed with: $(cat "$T/cat.err")"
fi
grep -q "no MPI here" "$T/g2.log" && ok || bad "the gather's error is not in its log"
fusermount3 -u "$T/mnt"
expect_fail 2 gather-dir across-hosts -- "$PTC" mount --store "$H0/store" --gather-dir "$T/g3" "$T/mnt"
finish
