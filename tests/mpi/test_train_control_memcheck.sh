# labels: slow
# The control file of `ptc train` under valgrind's memcheck (issue 33: an
# empty control file read uninitialised heap): one process, 3 steps, with an
# empty control file (looked at twice), then with garbage and with a stop:
# memcheck reports no read of uninitialised memory and no error whose stack
# passes through the control file's code (train_resize.c, base/file.c,
# base/error.c). Open MPI's and the loader's own reports are not ours and
# are not counted. Skipped (77) without valgrind. About 1 minute.
. "$(dirname "$0")/lib_mpi.sh"
command -v valgrind > /dev/null || { echo "skipped: no valgrind"; exit 77; }
full="$(dirname "$PTC")/ptc-full" # the training job's binary (ptc execs it)
[ -x "$full" ] || full=$PTC
M=mlp:layers=4,hidden=8,vocab=16,tokens=4
run() { # NAME TEXT (printf format)
    printf "$2" > "$TMP/ctl-$1"
    valgrind --log-file="$TMP/$1.vg" --num-callers=30 "$full" train --config pp=1 --microbatches 2 \
        --schedule 1f1b --model $M --steps 3 --control "$TMP/ctl-$1" > "$TMP/$1.out" 2> "$TMP/$1.err" ||
        { cat "$TMP/$1.err"; fail "$1: exit non-zero under valgrind"; }
    grep -q 'ERROR SUMMARY' "$TMP/$1.vg" || fail "$1: valgrind did not run"
    ! grep -q 'uninitialised' "$TMP/$1.vg" || { cat "$TMP/$1.vg"; fail "$1: a read of uninitialised memory"; }
    # each error's stack, one line per error: none through the control file's code
    awk '/^==[0-9]+== [A-Z]/ { if (s) print s; s = $0; next } /^==[0-9]+==    (at|by)/ { s = s " " $0 }
         END { if (s) print s }' "$TMP/$1.vg" | grep -E '\((train_resize|file|error)\.c:' &&
        fail "$1: memcheck reports an error in the control file's code"
    grep -q "$3" "$TMP/$1.err" "$TMP/$1.out" || { cat "$TMP/$1.out" "$TMP/$1.err"; fail "$1: not '$3'"; }
}
run empty '' "is incomplete ('' without its newline)"
run garbage 'grow please\n' "is not a request"
run stop 'stop\n' "^stopped at step 1"
echo "ok: an empty, a garbage and a stop control file under memcheck: no uninitialised read, no error in the control file's code"
