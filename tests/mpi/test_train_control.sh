#!/bin/bash
# The control file of `ptc train` read robustly, the watchdog between steps,
# and the last steps a job counts (docs/runtime.md, "The control file"):
# 1. what is no request the job can carry out — an empty file, garbage, an
#    infeasible resize, two lines, a NUL byte, a directory, a file over
#    256 MiB, a FIFO at the path — is said once (`ptc: warning: control
#    file ...`) and ignored: the job runs all its steps, exits 0 and saves,
#    never blocked; a complete file is removed once read, the others are left;
# 2. a slow writer, `(sleep 1; echo stop) > ctl` on a 4-process job: the
#    empty file is looked at again until its line is complete, then the job
#    stops and saves, exit 0;
# 3. the watchdog (--timeout) covers the waits between steps: rank 0 stopped
#    (SIGSTOP) in a job that saves every step ends the job within the
#    timeout, non-zero, with a `watchdog` line (before, the others waited for
#    its decision for ever unless they happened to be inside a step);
# 4. a resume near the last step a job counts (2^63-1): a record at step
#    2^63-4 runs 2 more steps, and refuses 8 with a clear error, nothing run
#    or saved (before: exit 0 having done nothing); one more step saves at
#    2^63-1, from which a resume is refused the same way; a --resize step past
#    2^63-1 is refused (before: taken as 2^63-1).
. "$(dirname "$0")/lib_mpi.sh"
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
common=(--microbatches 2 --schedule 1f1b --model $M --seed 4)

# ---- 1. no request: said once, ignored ------------------------------------------------------
# One 2-process job; each case is put at the control path by rename (never seen half-made),
# then the test waits until the job has said it (a removed request: until it is gone too)
ctl="$TMP/ctl"
"${MPIRUN[@]}" -np 2 "$PTC" train --config pp=2 "${common[@]}" --timeout 60 --jitter 5 \
    --steps 100000 --store "$TMP/one" --save-every 0 --control "$ctl" > "$TMP/one.out" 2> "$TMP/one.err" &
job=$!
for _ in $(seq 300); do grep -q '^step 1 ' "$TMP/one.out" 2> /dev/null && break; sleep 0.1; done
said() { # WHAT WORDS keep|removed
    for _ in $(seq 600); do
        grep -qF -- "$2" "$TMP/one.err" && { [ "$3" = keep ] || [ ! -e "$ctl" ]; } && break
        kill -0 $job 2> /dev/null || { cat "$TMP/one.err"; fail "$1: the job ended"; }
        sleep 0.05
    done
    grep -qF -- "$2" "$TMP/one.err" || { cat "$TMP/one.err"; fail "$1: never said '$2'"; }
    [ "$3" = keep ] && { [ -e "$ctl" ] || fail "$1: the control path was removed"; } || true
    [ "$3" = keep ] || [ ! -e "$ctl" ] || fail "$1: the request was not removed once read"
    rm -rf "$ctl"
}
put() { printf "$1" > "$ctl.tmp" && mv "$ctl.tmp" "$ctl"; }
put ''
said empty "control file $ctl is incomplete ('' without its newline); looked at again" keep
put 'grow please\n'
said garbage "control file $ctl: 'grow please' is not a request ('resize CFG' or 'stop'); ignored, the job goes on" removed
put 'resize dp=2,pp=2\n'
said processes "control file $ctl: resize to dp=2,tp=1,pp=2 needs 4 processes, the job has 2; ignored" removed
put 'resize pp=2,layers=3:3\n'
said layers "control file $ctl: resize to dp=1,tp=1,pp=2,layers=3:3: " removed
put 'stop\nstop\n'
said lines "control file $ctl: 'stop' and more lines: one request per file; ignored" removed
put 'st\0op\n'
said nul "control file $ctl holds a NUL byte at byte 2; ignored" removed
mkdir "$ctl"
said directory "control file $ctl is not a regular file (a directory); ignored" keep
truncate -s 300M "$ctl.tmp" && mv "$ctl.tmp" "$ctl"
said big "control file $ctl: 314572800 bytes, expected at most 4096; ignored" keep
mkfifo "$ctl.tmp" && mv "$ctl.tmp" "$ctl"
said fifo "control file $ctl is not a regular file (a FIFO); ignored" keep
put 'stop\n'
rc=0
wait $job || rc=$?
[ $rc = 0 ] || { cat "$TMP/one.err"; fail "exit $rc (want 0)"; }
grep -q '^stopped at step [0-9]* (dp=1,tp=1,pp=2), saved version 1$' "$TMP/one.out" ||
    { tail -3 "$TMP/one.out"; fail "the job did not stop and save at the end"; }
! grep -q 'error' "$TMP/one.err" || { cat "$TMP/one.err"; fail "an error line"; }
[ "$(grep -c '^ptc: warning: control file ' "$TMP/one.err")" = 9 ] ||
    { cat "$TMP/one.err"; fail "not 9 warnings: each problem said once"; }
echo "ok: empty, garbage, infeasible (2), two lines, NUL, directory, 300 MiB, FIFO: each said once, ignored; $(grep -c '^step ' "$TMP/one.out") steps, stopped and saved"

# ---- 2. a slow writer ------------------------------------------------------------------------
"${MPIRUN[@]}" -np 4 "$PTC" train --config tp=2,pp=2 "${common[@]}" --timeout 60 --jitter 20 \
    --steps 100000 --store "$TMP/slow" --control "$TMP/ctl-slow" > "$TMP/slow.out" 2> "$TMP/slow.err" &
job=$!
for _ in $(seq 300); do grep -q '^step 2 ' "$TMP/slow.out" 2> /dev/null && break; sleep 0.1; done
(sleep 1; echo stop) > "$TMP/ctl-slow" # empty for a second: steps take ~50 ms
rc=0
wait $job || rc=$?
[ $rc = 0 ] || { cat "$TMP/slow.err"; fail "slow writer: exit $rc (want 0)"; }
grep -q '^stopped at step [0-9]* (dp=1,tp=2,pp=2), saved version 1$' "$TMP/slow.out" ||
    { cat "$TMP/slow.out"; fail "slow writer: the job did not stop and save"; }
[ "$(grep -c "ctl-slow is incomplete ('' without its newline)" "$TMP/slow.err")" = 1 ] ||
    { cat "$TMP/slow.err"; fail "slow writer: the empty file was not seen, or said more than once"; }
[ ! -e "$TMP/ctl-slow" ] || fail "slow writer: the request was not removed"
echo "ok: (sleep 1; echo stop) > ctl on 4 processes: waited for the line, stopped at $(grep -o 'step [0-9]*' "$TMP/slow.out" | tail -1), saved"

# ---- 3. the watchdog between steps -------------------------------------------------------------
T=5
"${MPIRUN[@]}" -np 4 bash -c 'echo $$ > "$0.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$TMP/pid" \
    "$PTC" train --config tp=2,pp=2 "${common[@]}" --timeout $T --steps 100000 \
    --store "$TMP/wd" --save-every 1 > "$TMP/wd.out" 2> "$TMP/wd.err" &
job=$!
for _ in $(seq 300); do grep -q '^step 3 ' "$TMP/wd.out" 2> /dev/null && break; sleep 0.1; done
pid0=$(cat "$TMP/pid.0")
kill -STOP "$pid0"
t0=$(date +%s)
# a bound for the test itself, not the job's; its sleep must not hold the test's output open
# once the test ends (ctest waits for the output to close: 60 s more for a killed guard)
( sleep 60; kill -KILL "$pid0" 2> /dev/null ) > /dev/null 2>&1 &
guard=$!
rc=0
wait $job || rc=$?
t1=$(date +%s)
pkill -P "$guard" sleep 2> /dev/null || true
kill "$guard" 2> /dev/null || true
kill -KILL "$pid0" 2> /dev/null || true
[ $rc != 0 ] || fail "watchdog: the job with a stopped rank 0 exited 0"
[ $((t1 - t0)) -lt $((T + 30)) ] || { cat "$TMP/wd.err"; fail "watchdog: the job took $((t1 - t0)) s to end (timeout $T s)"; }
grep -q 'watchdog: rank [1-3]' "$TMP/wd.err" || { cat "$TMP/wd.err"; fail "watchdog: no watchdog line"; }
echo "ok: rank 0 stopped: the job ended after $((t1 - t0)) s ($(grep -m1 -o 'watchdog: rank [0-9]*: no progress for [^,(]*' "$TMP/wd.err"))"

# ---- 4. the last steps a job counts ------------------------------------------------------------
last=(--config pp=1 "${common[@]}" --store "$TMP/last" --save-every 0)
"$PTC" train "${last[@]}" --steps 1 > /dev/null
"$PTC_BUILD/train_restep" "$TMP/last" $M 9223372036854775804 > /dev/null
before=$("$PTC" versions --store "$TMP/last" --json)
set +e
"$PTC" train "${last[@]}" --steps 8 --resume > "$TMP/last.out" 2> "$TMP/last.err"
rc=$?
set -e
[ $rc = 1 ] || { cat "$TMP/last.out" "$TMP/last.err"; fail "a resume past step 2^63-1: exit $rc (want 1)"; }
grep -qx 'ptc: error: version 2 was saved after step 9223372036854775804: 8 more steps would pass step 9223372036854775807, the last a job counts' \
    "$TMP/last.err" || { cat "$TMP/last.err"; fail "a resume past step 2^63-1: not the expected error"; }
! grep -q '^step ' "$TMP/last.out" || fail "a resume past step 2^63-1 ran steps"
[ "$("$PTC" versions --store "$TMP/last" --json)" = "$before" ] || fail "a refused resume changed the store"
"$PTC" train "${last[@]}" --steps 2 --resume > "$TMP/last2.out"
[ "$(awk '/^step /{print $2}' "$TMP/last2.out" | tr '\n' ' ')" = "9223372036854775804 9223372036854775805 " ] ||
    { cat "$TMP/last2.out"; fail "the last steps: not steps 2^63-4 and 2^63-3"; }
grep -qx 'saved version 3 (step 9223372036854775806)' "$TMP/last2.out" || { cat "$TMP/last2.out"; fail "not saved at step 2^63-2"; }
"$PTC" train "${last[@]}" --steps 1 --resume > "$TMP/last3.out"
grep -qx 'saved version 4 (step 9223372036854775807)' "$TMP/last3.out" || { cat "$TMP/last3.out"; fail "not saved at step 2^63-1"; }
# a record at the last step a job counts: nothing more to run (before: exit 0 having done nothing)
set +e
"$PTC" train "${last[@]}" --steps 1 --resume > "$TMP/end.out" 2> "$TMP/end.err"
rc=$?
set -e
[ $rc = 1 ] && grep -qx "ptc: error: version 4 was saved after step 9223372036854775807: 1 more steps would pass step 9223372036854775807, the last a job counts" "$TMP/end.err" ||
    { cat "$TMP/end.out" "$TMP/end.err"; fail "a resume from step 2^63-1: exit $rc (want 1 and the last step)"; }
! grep -q '^step ' "$TMP/end.out" || fail "a resume from step 2^63-1 ran steps"
set +e
"$PTC" train "${last[@]}" --steps 1 --resize 18446744073709551616:dp=1 > /dev/null 2> "$TMP/rs.err"
rc=$?
set -e
[ $rc = 2 ] && grep -qx 'ptc: error: --resize: step 18446744073709551616 is out of range (1..9223372036854775807)' "$TMP/rs.err" ||
    { cat "$TMP/rs.err"; fail "--resize 2^64: exit $rc, want 2 and the range"; }
echo "ok: resume at step 2^63-4: 2 steps run, 8 refused (nothing run or saved); saved at 2^63-1, a resume from it refused; --resize 2^64 refused"
