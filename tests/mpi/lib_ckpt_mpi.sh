# Shared by the scripts that drive tests/mpi/ckpt_mpi.c (sourced after
# lib_mpi.sh): D, the program; S, a store under the test's folder.
: "${PTC_BUILD:?PTC_BUILD must name the build folder}"
D="$PTC_BUILD/ckpt_mpi"
S="$TMP/s"
# run NP ARGS: the program on NP processes
run() { timeout 300 "${MPIRUN[@]}" -np "$1" "$D" "${@:2}"; }
# expect_all_fail NP WORDS -- ARGS: every process exits 1 with one error
# line that names each of the |-separated WORDS (mpirun's own lines aside).
expect_all_fail() {
    local np=$1 words=$2
    shift 3
    if mpirun_each "$np" timeout 300 "$D" "$@" >"$TMP/out" 2>"$TMP/err"; then
        fail "$* succeeded"
    fi
    local n
    n=$(grep -c '^error: ' "$TMP/err" || true)
    [ "$n" = "$np" ] || { cat "$TMP/err" >&2; fail "$n error lines from $np processes: $*"; }
    local IFS='|'
    for w in $words; do
        [ "$(grep '^error: ' "$TMP/err" | grep -ci -- "$w")" = "$np" ] ||
            { cat "$TMP/err" >&2; fail "not every error names '$w'"; }
    done
}
