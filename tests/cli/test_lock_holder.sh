#!/usr/bin/env bash
# A second writer is told who holds the store's lock: "locked by another
# process (pid N)" with the holder's real pid, also when the holder has not
# written its pid into the lock file (yet) or the file holds something else,
# and when two writers start at the same moment. Never "pid 0".
. "$(dirname "$0")/lib.sh"
# writers wait for the lock by default (test_lock_wait.sh): here they must not
export PTC_LOCK_TIMEOUT=0
mkdir "$T/w" && cd "$T/w"
"$PTC" synth --preset llama-tiny --seed 5 --out m.safetensors
"$PTC" import --store st --config tp=1 --rules llama m.safetensors >/dev/null
printf 'a\nb\n' >l.txt

# hold STORE/lock from another process: flock, then write CONTENT (or
# nothing) into it and wait until told to stop
hold() {
    python3 - "$1" "$2" <<'PY' &
import fcntl, os, sys, time
f = open(sys.argv[1] + "/lock", "r+")
fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
f.truncate(0)
if sys.argv[2]:
    f.write(sys.argv[2]); f.flush()
open(sys.argv[1] + ".held", "w").close()
while not os.path.exists(sys.argv[1] + ".release"):
    time.sleep(0.01)
PY
    holder=$!
    for i in $(seq 1 500); do [ -e "$1.held" ] && break; sleep 0.01; done
}
release() {
    touch "$1.release"
    wait "$holder"
    rm -f "$1.held" "$1.release"
}

for content in "" "garbage" "0"; do
    hold st "$content"
    for c in "import --store st --config tp=1 --rules llama m.safetensors" \
             "reshard --store st --to tp=2" "gc --store st" \
             "dataset ingest --store st --name l --format lines l.txt"; do
        # shellcheck disable=SC2086
        expect_fail 1 locked "pid $holder" -- "$PTC" $c
    done
    release st
done

# two writers at the same moment, many times: the loser names the winner
zero=0 named=0
for i in $(seq 1 24); do
    "$PTC" dataset ingest --store st --name "r$i" --format lines l.txt >"$T/o1" 2>"$T/e1" &
    p1=$!
    "$PTC" dataset ingest --store st --name "s$i" --format lines l.txt >"$T/o2" 2>"$T/e2" &
    p2=$!
    wait $p1 || true
    wait $p2 || true
    if grep -q "pid 0)" "$T/e1" "$T/e2"; then zero=$((zero + 1)); fi
    if grep -q "pid $p2)" "$T/e1" || grep -q "pid $p1)" "$T/e2"; then named=$((named + 1)); fi
done
if [ $zero = 0 ]; then ok; else bad "$zero of 24 races reported pid 0"; fi
echo "races where the loser named the winner: $named of 24"

# after all that the store still works
if "$PTC" gc --store st >/dev/null && "$PTC" verify --store st >/dev/null; then ok; else
    bad "store unusable"; fi
finish
