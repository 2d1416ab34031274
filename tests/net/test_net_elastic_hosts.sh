#!/bin/bash
# ptc elastic over 3 hosts that share no filesystem (tests/net/lib_net.sh with
# NET_PRIVATE: each namespace host sees its own disk at the store's path and
# no other's), 2 slots each. The job (--tp 2, pp by the rule: dp=1,tp=2,pp=3,
# one pipeline stage per host) reads a dataset that every host's store holds
# and saves every step with --replicas 1 (host h's shards also on host h+1).
# kill -9 of host 2's processes and its disk replaced after step 4: the controller
# resumes on hosts 0 and 1 (dp=1,tp=2,pp=2) from the replicas (stage 2's
# shards from host 0's copy, over the network); at most one step lost (the
# save interval), every step's loss within 1e-5 of an uninterrupted run (in
# fact equal), the dataset audit exact: every record of the 8 steps once,
# the re-run step's records twice (tests/net/test_net_elastic_hosts_persist.sh:
# a fresh host joining, every copy lost and the persistent tier). First, a
# host whose store holds another dataset under the name is refused at the
# start, the error naming both; so is --replicas 3 (every copy on another of
# the 3 hosts is not possible), naming the hosts and K.
. "$(dirname "$0")/lib_elastic_hosts.sh"
printf '10.177.0.1 slots=2\n10.177.0.2 slots=2\n10.177.0.3 slots=2\n' >"$T/hosts"
reference 8 && ok || { cat "$T/ref.err" >&2; bad "the reference run failed"; finish; }

# a host whose store holds another dataset under the job's name: refused at
# the start, naming both (the epoch order would differ between the replicas)
head -c $((48 * 10)) "$T/tok.bin" >"$T/tok48.bin"
rm -rf "$T/disks/h2"/*
"$PTC" dataset ingest --store "$T/disks/h2" --name toks --format tokens:u16:5 "$T/tok48.bin" >/dev/null
if net_mpirun -np 3 "$PTC" train "${train[@]:2:12}" --config dp=1,tp=1,pp=3 --store "$T/store" \
    --replicas 1 --steps 1 >"$T/d.out" 2>"$T/d.err"; then bad "a job ran on different datasets"
else
    grep -q "ptc: error: .*dataset 'toks' differs between the hosts' stores: 64 records of 640 bytes on process 0's host, 48 of 480 on process 2's" "$T/d.err" &&
        ok || { cat "$T/d.err" >&2; bad "no error naming the datasets that differ"; }
fi
# --replicas K with the job's ranks on K hosts: refused at the start, naming
# the hosts and K (the same check refuses a relaunch after a loss)
k=("${train[@]}")
for i in "${!k[@]}"; do [ "${k[$i]}" = --replicas ] && k[$((i + 1))]=3; done
if "$PTC" elastic --store "$T/store" --hostfile "$T/hosts" --mpirun "$T/mpirun" --tp 2 \
    -- "${k[@]}" --steps 1 >"$T/k.out" 2>"$T/k.err"; then bad "a job with --replicas 3 ran on 3 hosts"
else
    grep -qxF "ptc: error: elastic: dp=1,tp=2,pp=3 runs on 3 hosts (10.177.0.1, 10.177.0.2, 10.177.0.3), and --replicas 3 needs 4 or more" "$T/k.err" && ok || { cat "$T/k.err" >&2; bad "no error naming the hosts and K"; }
fi
replace_disk 2
rm -rf "$T/disks"/h0/* "$T/disks"/h1/*
ingest "$T/disks/h0"
ingest "$T/disks/h1"

"$PTC" elastic --store "$T/store" --hostfile "$T/hosts" --mpirun "$T/mpirun" --tp 2 --watchdog 60 \
    -- "${train[@]}" --steps 8 >"$T/a.out" 2>"$T/a.err" &
epid=$!
K0=${KILL_AT:-4} # the step after which host 2 is lost (test_net_elastic_hosts_all.sh: others)
if wait_for "$T/a.out" "^step $K0 "; then ok; else cat "$T/a.out" "$T/a.err" >&2; bad "no step $K0"; fi
kill_host 2
replace_disk 2
if wait $epid; then ok; else cat "$T/a.out" "$T/a.err" >&2; bad "ptc elastic failed"; finish; fi
grep '^elastic: ' "$T/a.out"
grep -q '^elastic: start: dp=1,tp=2,pp=3 on 6 slots, from the newest version the hosts' "$T/a.out" &&
    ok || bad "start line"
line=$(grep '^elastic: failure at step ' "$T/a.out") || bad "no failure line"
# host 2 keeps 1 of its 2 slots (one process reported dead), too few for tp=2
echo "$line" | grep -q ': dp=1,tp=2,pp=3 -> dp=1,tp=2,pp=2 on 5 slots, resumed version ' &&
    ok || bad "$line"
read -r K S L <<<"$(echo "$line" | sed -E 's/^elastic: [a-z-]+ at step ([0-9]+):.*\(step ([0-9]+)\), ([0-9]+) steps lost.*/\1 \2 \3/')"
[ "$L" = $((K - S)) ] && [ "$L" -le 1 ] && ok || bad "$L steps lost (at step $K, resumed $S; save interval 1)"
grep -q '^resume moved [1-9][0-9]* bytes between hosts' "$T/a.out" && ok ||
    bad "the resume moved nothing between hosts"
grep -q '^elastic: done: step 8, ' "$T/a.out" && ok || bad "no done line"
close_to_ref "$T/a.out" && ok || bad "losses differ from the uninterrupted run's"
# the reader of the one replica is rank 0, on host 0: its store counts
# every record served, the re-run steps' 3 records twice
audit=$("$PTC" dataset audit --store "$T/disks/h0" --name toks --seed 3 --epoch 0 --json)
[ "$audit" = "{\"samples\":64,\"once\":$((24 - 3 * L)),\"repeated\":$((3 * L)),\"missing\":40}" ] &&
    ok || bad "audit $audit (want 24 records served, $((3 * L)) twice)"
finish
