# Kill -9 inside a cross-host commit, and what must hold afterwards (sourced
# by test_net_hosts_kill*.sh, after lib_net.sh). Three namespace hosts with
# private disks (NET_PRIVATE), ptc train --replicas 1 saving every step; one
# trial:
#   1. a fresh job on fresh disks; one host's process is killed (kill -9):
#      by the test build's hook at a named step of the protocol
#      (PTC_FAULT_KILL=POINT:N, the N-th time it passes it), or by this
#      script at a random moment after a random step. Every process traces
#      the steps it passes (PTC_FAULT_TRACE): the victim's last line is the
#      phase the kill hit. mpirun then ends the other hosts' processes,
#      wherever they are.
#   2. the journals as the kill left them: the newest committed version D
#      is the highest any journal records committed (docs/format.md §10),
#      and it must fit the victim's phase at version G: killed before its
#      prepare record, D = G - 1; after its commit record, D = G.
#   3. the job resumes on the 3 hosts for one step: every host recovers to
#      D, the version loads (resumed from D, at a step no earlier than the
#      last printed), the resumed step's loss equals the uninterrupted
#      run's bit for bit, the next save commits D + 1 on every host (the
#      same attempt id in every journal), and ptc verify passes on every
#      host's disk.
# Sets KILL_PHASE to the phase hit; counts in $T/phases.
NET_PRIVATE=$T/store
net_setup 3
KILL_COMMON=(--config dp=3,zero=1 --schedule 1f1b --microbatches 2
    --model mlp:layers=4,hidden=8,vocab=16,tokens=4 --seed 5 --timeout 60)
mkdir -p "$T/trace"
: >"$T/phases"
kill_losses() { awk '/^step /{print $2, $4}' "$1"; }

# the reference: the same job without interruption (no store)
net_mpirun -np 3 "$PTC" train "${KILL_COMMON[@]}" --steps 24 >"$T/ref.out" 2>"$T/ref.err" ||
    { cat "$T/ref.err" >&2; bad "the reference run failed"; finish; exit 1; }

# The launch wrapper: every process traces its steps; the victim's
# environment gets $KILL_ENV.
cat >"$T/wrap" <<'WRAP'
#!/bin/sh
export PTC_FAULT_TRACE="$KILL_T/trace/h$OMPI_COMM_WORLD_RANK"
[ "$OMPI_COMM_WORLD_RANK" = "$KILL_VICTIM" ] && [ -n "$KILL_ENV" ] && export "$KILL_ENV"
exec "$@"
WRAP
chmod +x "$T/wrap"

# a journal field of host H's record FILE: the version (offset 24) or the
# attempt id (offset 40); docs/format.md §10.1
kill_rec() {
    [ -f "$T/disks/h$1/hosts/$2" ] || { echo 0; return; }
    python3 -c '
import struct, sys
print(struct.unpack_from("<Q", open(sys.argv[1], "rb").read(), int(sys.argv[2]))[0])' \
        "$T/disks/h$1/hosts/$2" "$3"
}

# the hosts' processes (ptc, orted) gone, up to 15 s
kill_wait_quiet() {
    local h pid left
    for _ in $(seq 150); do
        left=0
        for h in 0 1 2; do
            for pid in $(ip netns pids "$NET-h$h"); do
                case "$(cat /proc/$pid/comm 2>/dev/null)" in ptc* | orted) left=1 ;; esac
            done
        done
        [ $left = 0 ] && return 0
        sleep 0.1
    done
    return 1
}

# kill_trial NAME VICTIM HOOK [STEP DELAY_MS]: HOOK "POINT:N" (the test
# build kills the victim there) or "" (this script kills it DELAY_MS after
# it printed step STEP). KILL_EXTRA: more options of the killed job.
kill_trial() {
    local name=$1 victim=$2 hook=$3 step=${4:-} delay=${5:-0} h pid
    rm -rf "$T/trace"/* "$T/disks"/h*/* "$T/persist"
    export KILL_T=$T KILL_VICTIM=$victim KILL_ENV=${hook:+PTC_FAULT_KILL=$hook}
    net_mpirun -np 3 -x KILL_T -x KILL_VICTIM -x KILL_ENV "$T/wrap" "$PTC" train \
        "${KILL_COMMON[@]}" --steps 20 --store "$T/store" --save-every 1 --replicas 1 \
        --keep-local 2 ${KILL_EXTRA:-} >"$T/a.out" 2>"$T/a.err" &
    local mpid=$!
    if [ -z "$hook" ]; then
        for _ in $(seq 3000); do grep -q "^step $step " "$T/a.out" 2>/dev/null && break; sleep 0.01; done
        sleep "$(awk -v d="$delay" 'BEGIN{printf "%.3f", d / 1000}')"
        for pid in $(ip netns pids "$NET-h$victim"); do
            case "$(cat /proc/$pid/comm 2>/dev/null)" in ptc*) kill -9 "$pid" ;; esac
        done
    fi
    if wait $mpid; then bad "$name: the job ended without the kill"; cat "$T/a.err" >&2; return; fi
    kill_wait_quiet || bad "$name: the hosts' processes outlived mpirun by 15 s"
    # the phase: the victim's last step passed
    local tr last g
    tr=$(ls "$T/trace/h$victim".* 2>/dev/null | head -1)
    last=$(tail -n 1 "$tr" 2>/dev/null | awk '{print $1}')
    g=$(tail -n 1 "$tr" 2>/dev/null | awk '{print $2}')
    case "$last" in
        "") KILL_PHASE=before-save ;;
        hosts.resolved) KILL_PHASE=exchange ;;
        hosts.exchanged) KILL_PHASE=write ;;
        hosts.written) KILL_PHASE=local-commit ;;
        hosts.local) KILL_PHASE=prepare-record ;;
        hosts.prepared) KILL_PHASE=vote ;;
        hosts.voted) KILL_PHASE=commit-record ;;
        hosts.marked) KILL_PHASE=acknowledgement ;;
        hosts.acked) KILL_PHASE=trim ;;
        hosts.done) KILL_PHASE=training-step ;;
        persist.*) KILL_PHASE=$last ;;
        *) KILL_PHASE=other:$last ;;
    esac
    echo "$KILL_PHASE" >>"$T/phases"
    # 2. the journals as left: D, and D against the victim's phase at G
    local d=0 c
    for h in 0 1 2; do
        c=$(kill_rec $h committed 24)
        [ "$c" -gt "$d" ] && d=$c
    done
    case "$KILL_PHASE" in
        exchange | write | local-commit | prepare-record)
            [ "$d" = $((g - 1)) ] && ok || bad "$name: killed before preparing version $g, but version $d is committed" ;;
        acknowledgement | trim | training-step)
            [ "$d" = "$g" ] && ok || bad "$name: killed after committing version $g, but the journals say $d" ;;
        vote | commit-record)
            [ "$d" = "$g" ] || [ "$d" = $((g - 1)) ] && ok ||
                bad "$name: killed in doubt at version $g, the journals say $d" ;;
    esac
    local lastprinted
    lastprinted=$(awk '/^step /{s=$2} END{print s + 0}' "$T/a.out")
    # 3. resume on the 3 hosts: recovery, load, one step, the next save
    if net_mpirun -np 3 "$PTC" train "${KILL_COMMON[@]}" --steps 1 --store "$T/store" \
        --save-every 1 --replicas 1 --keep-local 2 --resume >"$T/b.out" 2>"$T/b.err"; then ok
    else cat "$T/b.err" >&2; bad "$name: the resume failed"; return; fi
    local v s
    v=$(sed -nE 's/^resumed from version ([0-9]+) at step.*/\1/p' "$T/b.out")
    s=$(sed -nE 's/^resumed from version [0-9]+ at step ([0-9]+).*/\1/p' "$T/b.out")
    [ "$v" = "$d" ] && ok || bad "$name: resumed from version $v, the journals' newest committed is $d"
    # blocking saves lose at most the step being saved; with --save-async
    # (KILL_SLACK=1) also the step that ran while the previous save committed
    [ -n "$s" ] && [ "$s" -ge $((lastprinted - ${KILL_SLACK:-0})) ] && ok ||
        bad "$name: resumed at step $s, the job had printed step $lastprinted"
    [ "$(kill_losses "$T/b.out")" = "$(kill_losses "$T/ref.out" | awk -v s="$s" '$1 == s')" ] && ok ||
        bad "$name: the resumed step's loss differs from the uninterrupted run's"
    local a0 a
    a0=$(kill_rec 0 committed 40)
    for h in 0 1 2; do
        [ "$(kill_rec $h committed 24)" = $((d + 1)) ] && [ "$(kill_rec $h prepared 24)" = $((d + 1)) ] &&
            [ "$(kill_rec $h committed 40)" = "$a0" ] && ok ||
            bad "$name: host $h's journal after the next save: committed $(kill_rec $h committed 24), prepared $(kill_rec $h prepared 24) (want $((d + 1)))"
        "$PTC" verify --store "$T/disks/h$h" >/dev/null 2>"$T/v.err" && ok ||
            { bad "$name: ptc verify of host $h's disk"; cat "$T/v.err" >&2; }
    done
    echo "$name: killed host $victim in $KILL_PHASE of version $g (last step printed $lastprinted); committed $d, resumed at step $s, next save $((d + 1))"
}

# The phases hit, counted.
kill_summary() { sort "$T/phases" | uniq -c | awk '{printf "%s %s, ", $2, $1} END{print ""}'; }
