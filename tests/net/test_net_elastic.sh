#!/bin/bash
# ptc elastic across 3 hosts made of network namespaces (tests/net/lib_net.sh),
# 2 slots each, Open MPI over TCP, the controller given the hostfile and a
# launcher that enters the namespaces (--mpirun). The job (--pp 2, global
# batch 4) starts as dp1-tp2-pp2 on hosts 0 and 1 (slots filled in host
# order), then:
# 1. kill -9 of one rank on host 1: mpirun names the host; the controller
#    drops that slot (5 left, host 1 has one: tp 1 by the rule) and resumes
#    as dp2-tp1-pp2 from the newest version;
# 2. host 1's link cut (veth down): mpirun loses the host's daemon; the
#    controller drops all of its slots and resumes as dp1-tp2-pp2 on hosts 0
#    and 2 (when the job ended before mpirun named the host, the relaunch on
#    every slot fails, the controller probes the hosts and drops host 1's);
# 3. scale-out by the hostfile: the job starts on hosts 0 and 1 with one
#    slot each (dp1-tp1-pp2); host 2 with 2 slots is added to the file while
#    it runs: it stops at a step boundary, saves and resumes as dp2-tp1-pp2
#    on the 4 slots, no step lost.
# 4. host 2 cut off from the start: the first launch fails, the probe drops
#    it (below).
# Every case: the steps after the version run again and nothing else, the
# dataset audit counts exactly those steps' records as repeated and every
# other record of the 12 steps once (a step reads 4 records per replica),
# ptc verify passes.
. "$(dirname "$0")/lib_net.sh"
net_setup 3
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
net_mpirun_script "$T/mpirun"
python3 - "$T/tok.bin" <<'PY'
import random, struct, sys
r = random.Random(1)
n = 200 * 5
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[r.randrange(16) for _ in range(n)]))
PY
wait_for() { # FILE REGEX: up to 60 s
    for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
hostfile() { # FILE SLOTS...: host i gets the i-th count (0: left out)
    local f=$1 i=0 s
    shift
    : >"$f"
    for s in "$@"; do
        [ "$s" = 0 ] || echo "10.177.0.$((i + 1)) slots=$s" >>"$f"
        i=$((i + 1))
    done
}
# run_case NAME HOSTFILE-SLOTS ACTION WANT-LINE-REGEX [FIRST-REGEX HOST]:
# start the job, wait for step 4, do ACTION, check the log, the audit and the
# store. With FIRST-REGEX, two reconfigurations may be seen instead of one: a
# first matching it, whose relaunch failed before its first step, then the
# probe's warning naming HOST, then WANT resuming the same version.
run_case() {
    local name=$1 action=$3 want=$4 st="$T/$1"
    "$PTC" dataset ingest --store "$st" --name toks --format tokens:u16:5 "$T/tok.bin" >/dev/null
    hostfile "$T/$name.hosts" $2
    "$PTC" elastic --store "$st" --hostfile "$T/$name.hosts" --mpirun "$T/mpirun" --pp 2 \
        --watchdog 60 -- ptc train --schedule 1f1b --microbatches 4 --model $M --seed 3 \
        --data dataset:toks --steps 12 --save-every 3 --jitter 40 >"$T/$name.out" 2>"$T/$name.err" &
    local epid=$!
    if ! wait_for "$T/$name.out" "^step 4 "; then
        kill $epid 2>/dev/null || true
        cat "$T/$name.out" "$T/$name.err" >&2
        bad "$name: no step 4"
        return 0
    fi
    eval "$action"
    if ! wait $epid; then
        cat "$T/$name.out" "$T/$name.err" >&2
        bad "$name: ptc elastic exited non-zero"
        return 0
    fi
    ok
    local out="$T/$name.out" line lines
    lines=$(grep '^elastic: \(failure\|scale-out\|scale-in\) at step ' "$out") || {
        cat "$out" >&2; bad "$name: no reconfiguration line"; return 0; }
    line=$lines
    if [ -n "${5:-}" ] && [ "$(echo "$lines" | wc -l)" = 2 ]; then
        # the lost host not named before the job ended: the relaunch on
        # every slot failed before its first step, the probe named it
        # (warning), and the next relaunch resumed the same version
        line=$(echo "$lines" | head -1)
        local s1 s2
        s1=$(echo "$line" | sed -E 's/.*\(step ([0-9]+)\).*/\1/')
        s2=$(echo "$lines" | tail -1 | sed -E 's/^elastic: failure at step ([0-9]+): .*\(step ([0-9]+)\), 0 steps lost.*/\1 \2/')
        if echo "$lines" | tail -1 | grep -q -- "$want" && [ "$s2" = "$s1 $s1" ] &&
            echo "$line" | grep -q -- "$5" &&
            grep -q "^ptc: warning: elastic: host $6 cannot run a process" "$T/$name.err"; then ok
        else cat "$out" "$T/$name.err" >&2; bad "$name: reconfigurations: $lines"; return 0; fi
    elif [ "$(echo "$line" | wc -l)" = 1 ] && echo "$line" | grep -q -- "$want"; then ok
    else cat "$out" >&2; bad "$name: reconfiguration: $line (want $want)"; return 0; fi
    local K S L
    read -r K S L <<<"$(echo "$line" | sed -E 's/^elastic: [a-z-]+ at step ([0-9]+):.*\(step ([0-9]+)\), ([0-9]+) steps lost.*/\1 \2 \3/')"
    [ "$L" = $((K - S)) ] && ok || bad "$name: $L steps lost, at step $K, resumed $S"
    local s n want_n good=1
    for s in $(seq 0 11); do
        n=$(grep -c "^step $s " "$out" || true)
        want_n=1
        [ "$s" -ge "$S" ] && [ "$s" -lt "$K" ] && want_n=2
        [ "$n" = $want_n ] || { good=0; bad "$name: step $s reported $n times, expected $want_n"; }
    done
    [ $good = 1 ] && ok
    grep -q "^elastic: done: step 12, version [0-9]*, " "$out" && ok || bad "$name: no done line"
    # 4 micro-batches of one record per replica: 4 x dp records a step; the
    # job resumed at step S reads on from record 4 S (the lost steps' again)
    local audit dp1 u
    dp1=$(echo "$lines" | tail -1 | sed -E 's/.* -> dp=([0-9]+),.*/\1/')
    u=$((4 * S + 4 * dp1 * (12 - S)))
    audit=$("$PTC" dataset audit --store "$st" --name toks --seed 3 --epoch 0 --json)
    [ "$audit" = "{\"samples\":200,\"once\":$((u - 4 * L)),\"repeated\":$((4 * L)),\"missing\":$((200 - u))}" ] &&
        ok || bad "$name: audit $audit, expected $u served, $((4 * L)) of them twice"
    "$PTC" verify --store "$st" >/dev/null && ok || bad "$name: verify"
    echo "$name: $line"
}

# 1. one rank on host 1 killed: that host keeps one slot
kill_rank_on_host1='v=$(for p in $(ip netns pids $NET-h1); do [ "$(cat /proc/$p/comm 2>/dev/null)" = ptc-full ] && echo $p; done | head -1)
    [ -n "$v" ] || bad "kill-rank: no rank process on host 1"; kill -9 $v'
run_case kill-rank "2 2 2" "$kill_rank_on_host1" \
    ': dp=1,tp=2,pp=2 -> dp=2,tp=1,pp=2 on 5 slots, resumed version '

# 2. host 1 cut off: all its slots go, hosts 0 and 2 carry on
run_case link-cut "2 2 2" 'ip -n $NET-l link set h1 down' \
    ': dp=1,tp=2,pp=2 -> dp=1,tp=2,pp=2 on 4 slots, resumed version ' \
    ': dp=1,tp=2,pp=2 -> dp=1,tp=2,pp=2 on 6 slots, ' 10.177.0.2
ip -n "$NET-l" link set h1 up

# 3. scale-out by the hostfile: 2 hosts of 1 slot, then host 2 with 2 slots
run_case hostfile-grows "1 1 0" 'hostfile "$T/hostfile-grows.hosts" 1 1 2' \
    ': dp=1,tp=1,pp=2 -> dp=2,tp=1,pp=2 on 4 slots, resumed version '
# 4. a host that cannot be reached: host 2's link is down from the start.
#    mpirun starts a daemon on every host of the hostfile, so the first
#    launch fails before its first step naming no process; the controller
#    probes the hosts, drops host 2's slots (a warning names it) and starts
#    on hosts 0 and 1; then a rank on host 1 is killed and the relaunch stays
#    off host 2 (3 slots: dp=1,tp=1,pp=2).
name=down-host st="$T/down-host"
"$PTC" dataset ingest --store "$st" --name toks --format tokens:u16:5 "$T/tok.bin" >/dev/null
hostfile "$T/$name.hosts" 2 2 2
ip -n "$NET-l" link set h2 down
"$PTC" elastic --store "$st" --hostfile "$T/$name.hosts" --mpirun "$T/mpirun" --pp 2 \
    --watchdog 60 -- ptc train --schedule 1f1b --microbatches 4 --model $M --seed 3 \
    --data dataset:toks --steps 12 --save-every 3 --jitter 40 >"$T/$name.out" 2>"$T/$name.err" &
epid=$!
if wait_for "$T/$name.out" "^step 4 "; then
    eval "$kill_rank_on_host1"
    if wait $epid; then
        ok
        out="$T/$name.out"
        lines=$(grep '^elastic: failure at step ' "$out")
        if [ "$(echo "$lines" | wc -l)" = 2 ] && echo "$lines" | head -1 |
            grep -q '^elastic: failure at step 0: dp=1,tp=2,pp=2 -> dp=1,tp=2,pp=2 on 4 slots, resumed version 0 (step 0), 0 steps lost, ' &&
            echo "$lines" | tail -1 | grep -q ': dp=1,tp=2,pp=2 -> dp=1,tp=1,pp=2 on 3 slots, resumed version '
        then ok; else cat "$out" >&2; bad "$name: reconfigurations: $lines"; fi
        grep -q '^ptc: warning: elastic: host 10.177.0.3 cannot run a process (probed after the launch failed): its slots are dropped$' \
            "$T/$name.err" && ok || { cat "$T/$name.err" >&2; bad "$name: no warning naming host 2"; }
        grep -q "^elastic: done: step 12, version [0-9]*, dp=1,tp=1,pp=2, 2 reconfigurations (2 failures)" \
            "$out" && ok || bad "$name: no done line"
        read -r K S L <<<"$(echo "$lines" | tail -1 | sed -E 's/^elastic: [a-z-]+ at step ([0-9]+):.*\(step ([0-9]+)\), ([0-9]+) steps lost.*/\1 \2 \3/')"
        audit=$("$PTC" dataset audit --store "$st" --name toks --seed 3 --epoch 0 --json)
        [ "$audit" = "{\"samples\":200,\"once\":$((48 - 4 * L)),\"repeated\":$((4 * L)),\"missing\":152}" ] &&
            ok || bad "$name: audit $audit, expected 48 served, $((4 * L)) of them twice (step $K, resumed $S)"
        "$PTC" verify --store "$st" >/dev/null && ok || bad "$name: verify"
        echo "$name: $(echo "$lines" | tail -1)"
    else
        cat "$T/$name.out" "$T/$name.err" >&2
        bad "$name: ptc elastic exited non-zero"
    fi
else
    kill $epid 2>/dev/null || true
    cat "$T/$name.out" "$T/$name.err" >&2
    bad "$name: no step 4"
fi
ip -n "$NET-l" link set h2 up
finish
