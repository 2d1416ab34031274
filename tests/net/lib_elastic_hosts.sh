# Shared part of the ptc elastic tests over hosts that share no filesystem
# (sourced by tests/net/test_net_elastic_hosts*.sh): 3 namespace hosts with
# private disks (NET_PRIVATE), the launcher script, a dataset of 64 windows
# ingested into every host's store and into $T/ref, and the train command.
. "$(dirname "${BASH_SOURCE[0]}")/lib_net.sh"
NET_PRIVATE=$T/store
net_setup 3
net_mpirun_script "$T/mpirun"
M=mlp:layers=6,hidden=8,vocab=16,tokens=4
python3 - "$T/tok.bin" <<'PY'
import random, struct, sys
r = random.Random(1)
n = 64 * 5
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[r.randrange(16) for _ in range(n)]))
PY
ingest() { "$PTC" dataset ingest --store "$1" --name toks --format tokens:u16:5 "$T/tok.bin" >/dev/null; }
for h in 0 1 2; do ingest "$T/disks/h$h"; done
ingest "$T/ref"
hostfile() { # FILE SLOTS...: host i gets the i-th count (0: left out)
    local f=$1 i=0 s
    shift
    : >"$f.tmp"
    for s in "$@"; do
        [ "$s" = 0 ] || echo "10.177.0.$((i + 1)) slots=$s" >>"$f.tmp"
        i=$((i + 1))
    done
    mv "$f.tmp" "$f"
}
# the job: pp by the rule (6 slots: dp=1,tp=2,pp=3, a stage per host; 4:
# dp=1,tp=2,pp=2); global batch 3 either way
train=(ptc train --schedule 1f1b --microbatches 3 --model $M --seed 3 --data dataset:toks
    --save-every 1 --replicas 1 --jitter 10)
wait_for() { # FILE REGEX: up to 60 s
    for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
kill_host() { # I: kill -9 every ptc process of host I
    local pid
    for pid in $(ip netns pids "$NET-h$1"); do
        case "$(cat /proc/$pid/comm 2>/dev/null)" in ptc*) kill -9 "$pid" ;; esac
    done
}
# replace_disk I: host I's disk by a new one holding only the dataset. By
# rename: processes of the host still running (until mpirun ends them) go
# on writing into the old one, which no later launch mounts.
replace_disk() {
    rm -rf "$T/disks/new"
    mkdir "$T/disks/new"
    ingest "$T/disks/new"
    mv "$T/disks/h$1" "$T/disks/gone$1.$RANDOM"
    mv "$T/disks/new" "$T/disks/h$1"
}
# reference STEPS: the job uninterrupted on one store (dp=1,tp=2,pp=3)
reference() {
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 6 "$PTC" train \
        "${train[@]:2:10}" --config dp=1,tp=2,pp=3 --store "$T/ref" --steps "$1" \
        >"$T/ref.out" 2>"$T/ref.err"
}
# the losses of FILE within 1e-5 of the reference's, every line (a re-run
# step too); prints the worst difference
close_to_ref() {
    python3 - "$1" "$T/ref.out" <<'PY'
import re, sys
ref = {int(s): float(l) for s, l in re.findall(r"^step (\d+) loss (\S+)", open(sys.argv[2]).read(), re.M)}
got = re.findall(r"^step (\d+) loss (\S+)", open(sys.argv[1]).read(), re.M)
worst = max(abs(float(l) - ref[int(s)]) for s, l in got) if got else 1
print("%d steps, worst difference from the uninterrupted run %.3g" % (len(got), worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
}
