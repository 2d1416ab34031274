#!/bin/bash
# ptc reshard --mpi across 2 and 4 hosts made of network namespaces on this
# machine (tests/net/lib_net.sh), one process per host, over TCP: the bytes
# that cross each host's link equal the plan's per-host NETWORK figures
# (ptc plan --hosts W/N: the MPI executor's process p holds ranks
# floor(r*N/W) = p, the same packing) within protocol overhead; the result is
# byte-identical to the threaded executor. Then a host's link cut mid-reshard
# ends the job (non-zero) within the watchdog and leaves the store as it was.
. "$(dirname "$0")/lib_net.sh"
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d[int(k)] if isinstance(d,list) else d[k]
print(d)' "$@"; }
net_setup 4

# Rank i runs on host i (the hostfile's order, one slot each).
for np in 2 4; do
    net_mpirun -np $np sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname -I)"' >"$T/map.out" 2>"$T/map.err" ||
        { cat "$T/map.err" >&2; bad "mpirun -np $np across the namespaces failed"; continue; }
    sort "$T/map.out" >"$T/map.txt"
    want=$(for i in $(seq 0 $((np - 1))); do echo "$i 10.177.0.$((i + 1)) "; done)
    if [ "$(cat "$T/map.txt")" = "$want" ]; then ok; else bad "-np $np: rank to host map $(cat "$T/map.txt")"; fi
done

# A 61 MiB model: protocol overhead (headers, acks, MPI wire-up, the gathered
# descriptors) is small next to its network bytes.
"$PTC" synth --preset llama-tiny --seed 3 --hidden 512 --layers 4 --vocab 4000 --out "$T/m.safetensors"
s="$T/s"
"$PTC" import --store "$s" --config tp=2,pp=2 --rules llama "$T/m.safetensors" >/dev/null
rm -f "$T/m.safetensors"

# measure NP TO: reshard version 1 to TO with NP hosts; compare every host's
# sent / received link bytes with the plan's bytes_out / bytes_in. Every
# configuration here has 4 ranks, so NP processes hold 4/NP ranks each.
measure() {
    local np=$1 to=$2 i tx rx out in
    "$PTC" plan --store "$s" --version 1 --to "$to" --hosts $((4 / np)) --json >"$T/plan.json"
    for i in $(seq 0 $((np - 1))); do
        eval "tx0_$i=$(net_bytes $i tx) rx0_$i=$(net_bytes $i rx)"
    done
    net_mpirun -np "$np" "$PTC" reshard --mpi --store "$s" --version 1 --to "$to" --json \
        >"$T/mpi.json" 2>"$T/mpi.err" || { cat "$T/mpi.err" >&2; bad "reshard --mpi $np hosts $to"; return 0; }
    for i in $(seq 0 $((np - 1))); do
        tx=$(($(net_bytes $i tx) - $(eval echo "\$tx0_$i")))
        rx=$(($(net_bytes $i rx) - $(eval echo "\$rx0_$i")))
        out=$(jget "$T/plan.json" per_host $i bytes_out)
        in=$(jget "$T/plan.json" per_host $i bytes_in)
        echo "hosts=$np $to host $i: sent $tx for planned $out ($(python3 -c "print(round($tx/max($out,1),4))")), received $rx for planned $in ($(python3 -c "print(round($rx/max($in,1),4))"))"
        # At least the plan's bytes; at most 8 % + 1 MiB more: Ethernet, IP
        # and TCP headers are 66 bytes per segment of at most 1448 bytes
        # (4.6 %) where the kernel does not batch them, plus the acks of the
        # other direction, the launch, MPI's wire-up and the descriptors.
        for pair in "$tx $out sent" "$rx $in received"; do
            set -- $pair
            if [ "$1" -ge "$2" ] && [ "$1" -le $(($2 + $2 * 8 / 100 + 1048576)) ]; then ok
            else bad "hosts=$np $to host $i: $3 $1 link bytes for $2 planned"; fi
        done
    done
    # Byte-identical to the threaded executor.
    b=$("$PTC" reshard --store "$s" --version 1 --to "$to" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
    "$PTC" export --store "$s" --version "$(jget "$T/mpi.json" version)" --out "$T/a.st"
    "$PTC" export --store "$s" --version "$b" --out "$T/b.st"
    if cmp -s "$T/a.st" "$T/b.st"; then ok; else bad "hosts=$np $to: differs from the threaded executor"; fi
    rm -f "$T/a.st" "$T/b.st"
}
measure 2 dp=2,tp=2
measure 4 tp=4
measure 4 dp=2,tp=1,pp=2
if "$PTC" verify --store "$s" --all >/dev/null; then ok; else bad "verify --all"; fi

# A link cut mid-reshard: host 1's cable (the bridge's end of its veth) goes
# down once host 1 has received a quarter of its planned bytes. Both links
# are throttled to 100 Mbit/s (tbf) so the exchange lasts seconds. With
# the keepalives of lib_net.sh mpirun declares host 1's daemon lost within
# seconds and ends the job with that error; the watchdog (timeout) must not be
# what ends it. Nothing may be left running in any namespace (host 1's daemon
# kills its own processes), and the store keeps exactly its versions.
"$PTC" versions --store "$s" --json >"$T/versions.before"
"$PTC" plan --store "$s" --version 1 --to dp=2,tp=2 --hosts 2 --json >"$T/plan.json"
quarter=$(($(jget "$T/plan.json" per_host 1 bytes_in) / 4))
for i in 0 1; do
    tc -n "$NET-h$i" qdisc add dev eth0 root tbf rate 100mbit burst 64kb latency 100ms &&
        tc -n "$NET-l" qdisc add dev "h$i" root tbf rate 100mbit burst 64kb latency 100ms ||
        bad "tc tbf on host $i's link (the kernel's sch_tbf) failed"
done
WATCHDOG=30
rx0=$(net_bytes 1 rx)
t0=$(date +%s)
timeout -k 5 $WATCHDOG "${NET_MPIRUN[@]}" -np 2 "$PTC" reshard --mpi --mpi-budget 4194304 \
    --store "$s" --version 1 --to dp=2,tp=2 >"$T/cut.out" 2>"$T/cut.err" &
job=$!
for _ in $(seq 2000); do
    [ $(($(net_bytes 1 rx) - rx0)) -ge "$quarter" ] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.01
done
if kill -0 $job 2>/dev/null; then ok; else bad "the reshard ended before the link cut"; fi
ip -n "$NET-l" link set h1 down
echo "link of host 1 cut after $(($(date +%s) - t0)) s, $(($(net_bytes 1 rx) - rx0)) of $((quarter * 4)) planned bytes received"
rc=0
wait $job || rc=$?
took=$(($(date +%s) - t0))
echo "the job ended with status $rc after $took s: $(grep -m1 'lost communication' "$T/cut.err" || head -1 "$T/cut.err")"
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ]; then ok
else bad "link cut: status $rc (0: completed; 124/137: hung until the $WATCHDOG s watchdog)"; fi
if grep -q 'ORTE has lost communication with a remote daemon' "$T/cut.err" &&
    grep -q 'Remote daemon: .* on node 10.177.0.2$' "$T/cut.err"; then ok
else bad "link cut: no lost-host error naming 10.177.0.2: $(cat "$T/cut.err")"; fi
left=""
for _ in $(seq 50); do
    left=$(for ns in "$NET-l" "$NET-h0" "$NET-h1"; do ip netns pids "$ns"; done)
    [ -z "$left" ] && break
    sleep 0.1
done
if [ -z "$left" ]; then ok; else bad "processes left after the job: $(ps -o pid,args -p "$(echo $left | tr ' ' ,)")"; fi
"$PTC" versions --store "$s" --json >"$T/versions.after"
if cmp -s "$T/versions.before" "$T/versions.after"; then ok; else bad "link cut: the versions changed"; fi
if "$PTC" verify --store "$s" --all >/dev/null; then ok; else bad "verify --all after the link cut"; fi
"$PTC" gc --store "$s" >/dev/null
# The link back up (unthrottled): the same reshard across the hosts succeeds.
ip -n "$NET-l" link set h1 up
for i in 0 1; do tc -n "$NET-h$i" qdisc del dev eth0 root; tc -n "$NET-l" qdisc del dev "h$i" root; done
for _ in $(seq 50); do ip -n "$NET-h1" link show eth0 | grep -q 'state UP' && break; sleep 0.1; done
if net_mpirun -np 2 "$PTC" reshard --mpi --store "$s" --version 1 --to dp=2,tp=2 >/dev/null 2>"$T/again.err"; then ok
else bad "reshard after the link came back: $(cat "$T/again.err")"; fi
if "$PTC" verify --store "$s" --all >/dev/null; then ok; else bad "verify --all after gc and a new reshard"; fi
finish
