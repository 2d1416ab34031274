#!/bin/bash
# labels: slow
# Kill -9 at random points of a cross-host commit (issue #30, test (c)), the
# full matrix: 20 trials, each killing one of three namespace hosts' process
# a random 0-40 ms after a random step (2-5) is printed — a step of this job
# takes ~30-40 ms here, most of it the save (it took 300-700 ms before the
# MPI waits stopped spinning: a 600 ms delay then outlived the whole job) —
# then the hook trials at
# the protocol steps the fast tier (test_net_hosts_kill.sh) leaves out.
# After every kill the checks of tests/net/lib_hosts_kill.sh: the hosts
# agree on the newest committed version, which fits the phase the victim
# was killed in, it loads with the uninterrupted run's loss, verify passes
# on every disk, the next save commits on every host. The phases hit are
# counted from the victim's trace (its last protocol step passed) and
# printed, with the share of the run the saves took. KILL_SEED=N repeats a
# sequence.
. "$(dirname "$0")/lib_net.sh"
. "$(dirname "$0")/lib_hosts_kill.sh"
seed=${KILL_SEED:-$$}
RANDOM=$seed
echo "seed $seed"
inside=0 saves_s=0 run_s=0
for i in $(seq 20); do
    kill_trial "random$i" $((i % 3)) "" $((2 + RANDOM % 4)) $((RANDOM % 40))
    case "$KILL_PHASE" in before-save | training-step) ;; *) inside=$((inside + 1)) ;; esac
    # the share of the victim's run inside saves (first resolved to each done)
    read -r a b < <(awk '$1 == "hosts.resolved" {s = $3} $1 == "hosts.done" && s {in_ += $3 - s; s = 0}
        NR == 1 {f = $3} {l = $3} END {printf "%.3f %.3f\n", in_, l - f}' "$T/trace/h$((i % 3))".*)
    saves_s=$(awk -v x="$saves_s" -v a="$a" 'BEGIN{print x + a}')
    run_s=$(awk -v x="$run_s" -v b="$b" 'BEGIN{print x + b}')
done
echo "random kills inside a save: $inside of 20; phases: $(kill_summary)"
echo "the victims spent $(awk -v a="$saves_s" -v b="$run_s" 'BEGIN{printf "%.0f", (b > 0 ? 100 * a / b : 0)}')% of their traced run in saves"
[ "$inside" -ge 10 ] && ok || bad "only $inside of 20 random kills landed inside a save"
: >"$T/phases"
kill_trial resolved 2 hosts.resolved:3
kill_trial exchanged 0 hosts.exchanged:4
kill_trial local 1 hosts.local:4
kill_trial voted 2 hosts.voted:2
kill_trial acked 0 hosts.acked:5
echo "hook trials: $(kill_summary)"
finish
