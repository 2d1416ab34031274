#!/bin/bash
# The memory tier with replicas in peer memory (issue #30): three namespace
# hosts, each with its own RAM disk at the store's path — a tmpfs under
# /dev/shm/NAME, the same name on every host, which no other host sees —
# and ptc train --store /dev/shm/NAME --replicas 1 saving every step, with
# the persistent tier copied in the background (--persist, every 4th
# version) and --keep-local 2. Host 2's process is killed (kill -9) while
# the job runs and its memory is lost with it; the job resumes on hosts 0
# and 1 from what the survivors hold in memory (rank 2's shards from host
# 0's copy): at most one step lost, the resumed losses equal the
# uninterrupted run's bit for bit, each survivor's RAM disk keeps at most
# its two newest versions (three while one is in doubt), and the persistent
# copy, made while the job trained, verifies and resumes on a single host.
. "$(dirname "$0")/lib_net.sh"
shm=/dev/shm/ptc-net-$$
mkdir -p "$T/disks" "$shm"
mount -t tmpfs -o size=256m ptc-mem "$T/disks"
cleanup_mem() { umount -l "$T/disks" 2>/dev/null || true; rmdir "$shm" 2>/dev/null || true; net_cleanup; }
trap cleanup_mem EXIT
NET_PRIVATE=$shm
net_setup 3
common=(--config dp=3,zero=1 --schedule 1f1b --microbatches 2 --model mlp:layers=4,hidden=8,vocab=16,tokens=4
    --seed 5 --timeout 60)
losses() { awk '/^step /{print $2, $4}' "$1"; }

# each host's store path is RAM of its own
[ "$("$T/agent" 10.177.0.2 "stat -f -c %T $shm")" = tmpfs ] && ok || bad "host 1's store is not on a tmpfs"
net_check_private "$shm"

net_mpirun -np 3 "$PTC" train "${common[@]}" --steps 40 >"$T/ref.out" 2>"$T/ref.err" ||
    { cat "$T/ref.err" >&2; bad "the reference run failed"; finish; }

net_mpirun -np 3 "$PTC" train "${common[@]}" --steps 40 --store "$shm" --save-every 1 \
    --replicas 1 --keep-local 2 --persist "$T/persist" --persist-every 4 --jitter 30 \
    >"$T/a.out" 2>"$T/a.err" &
mpid=$!
for _ in $(seq 600); do grep -q "^step 10 " "$T/a.out" 2>/dev/null && break; sleep 0.1; done
grep -q "^step 10 " "$T/a.out" && ok || { cat "$T/a.out" "$T/a.err" >&2; bad "no step 10"; }
for pid in $(ip netns pids "$NET-h2"); do
    case "$(cat /proc/$pid/comm 2>/dev/null)" in ptc*) kill -9 "$pid" ;; esac
done
wait $mpid && bad "the job went on without host 2" || ok
for _ in $(seq 150); do
    left=0
    for h in 0 1 2; do
        for pid in $(ip netns pids "$NET-h$h"); do
            case "$(cat /proc/$pid/comm 2>/dev/null)" in ptc* | orted) left=1 ;; esac
        done
    done
    [ $left = 0 ] && break
    sleep 0.1
done
[ $left = 0 ] && ok || bad "the hosts' processes outlived mpirun by 15 s"
last=$(awk '/^step /{s=$2} END{print s}' "$T/a.out")
rm -rf "$T/disks/h2"/* # host 2's memory is gone with it
for h in 0 1; do
    n=$("$PTC" versions --store "$T/disks/h$h" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))')
    [ "$n" -le 3 ] && [ "$n" -ge 1 ] && ok || bad "host $h's RAM disk keeps $n versions (--keep-local 2)"
done

printf '10.177.0.1 slots=2\n10.177.0.2 slots=1\n' >"$T/hosts2"
if ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$T/hosts2" --map-by slot \
    --bind-to none "${NET_MPI_OPTS[@]}" -np 3 "$PTC" train "${common[@]}" --steps 4 \
    --store "$shm" --save-every 1 --replicas 1 --resume >"$T/b.out" 2>"$T/b.err"; then ok
else cat "$T/b.out" "$T/b.err" >&2; bad "the resume on 2 hosts failed"; finish; fi
S=$(sed -nE 's/^resumed from version ([0-9]+) at step ([0-9]+).*/\2/p' "$T/b.out")
echo "killed after step $last; resumed from memory at step $S: $(grep -E '^resume' "$T/b.out" | tr '\n' ' ')"
[ -n "$S" ] && [ "$S" -ge "$last" ] && ok || bad "resumed at step $S, the job had printed step $last (more than one step lost)"
if [ "$(losses "$T/b.out")" = "$(losses "$T/ref.out" | awk -v s="$S" '$1 >= s && $1 < s + 4')" ]; then ok
else bad "resumed losses differ from the uninterrupted run's"; fi

# the persistent tier, copied in the background: whole, every 4th step
"$PTC" verify --store "$T/persist" >/dev/null && ok || bad "ptc verify of the persistent tier"
if mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$PTC" train "${common[@]}" \
    --steps 2 --store "$T/persist" --resume >"$T/c.out" 2>"$T/c.err"; then ok
else cat "$T/c.err" >&2; bad "resume from the persistent tier failed"; fi
P=$(sed -nE 's/^resumed from version [0-9]+ at step ([0-9]+).*/\1/p' "$T/c.out")
[ -n "$P" ] && [ $((P % 4)) = 0 ] && [ "$P" -le "$last" ] && [ "$P" -ge 4 ] && ok ||
    bad "the persistent tier resumed at step $P (every 4th, at most $last)"
if [ "$(losses "$T/c.out")" = "$(losses "$T/ref.out" | awk -v s="$P" '$1 >= s && $1 < s + 2')" ]; then ok
else bad "losses after the persistent tier's version differ from the uninterrupted run's"; fi
finish
