# Shared helpers of the CLI test scripts (sourced).
set -eu
: "${PTC:?PTC must name the ptc binary}"
: "${PTC_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
T=$(mktemp -d "${TMPDIR:-/tmp}/ptc-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
checks=0
fails=0

ok() { checks=$((checks + 1)); }
bad() { fails=$((fails + 1)); echo "FAIL: $*" >&2; }

# expect_fail CODE WORDS... -- CMD...: CMD must exit CODE with exactly one
# stderr line starting "ptc: error:" that contains WORDS (case-insensitive).
expect_fail() {
    code=$1; shift
    words=""
    while [ "$1" != "--" ]; do words="$words $1"; shift; done
    shift
    set +e
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    set -e
    if [ "$rc" != "$code" ]; then
        bad "exit $rc (want $code): $*"; cat "$T/err" >&2; return 0
    fi
    if [ "$(wc -l <"$T/err")" != 1 ] || ! grep -q '^ptc: error: ' "$T/err"; then
        bad "stderr is not one 'ptc: error:' line: $*"; cat "$T/err" >&2; return 0
    fi
    for w in $words; do
        if ! grep -qi -- "$w" "$T/err"; then
            bad "error does not mention '$w': $(cat "$T/err")"; return 0
        fi
    done
    ok
}

finish() {
    echo "$checks passed, $fails failed"
    [ "$fails" = 0 ]
}

# kill_at_bytes PID DIR BYTES: kill -9 PID once the files under DIR hold at
# least BYTES (progress-driven, so the kill lands mid-write even on a loaded
# machine). Returns 0 if the process was still running when killed.
kill_at_bytes() {
    local pid=$1 dir=$2 want=$3 i have
    for i in $(seq 1 3000); do
        kill -0 "$pid" 2>/dev/null || return 1
        have=$(du -sb "$dir" 2>/dev/null | cut -f1)
        [ "${have:-0}" -ge "$want" ] && break
        sleep 0.01
    done
    kill -9 "$pid" 2>/dev/null
}
