#!/bin/sh
# A fuzzing campaign: every libFuzzer target of build-fuzz/ (make fuzz) for
# SECONDS each, one after another, under -rss_limit_mb=2048 and a 10 s
# per-input timeout, starting from its saved corpus. Inputs that add coverage
# are merged (-merge=1) into tests/fuzz/corpus/<name>/; a crash, timeout or
# OOM stops the target and leaves its reproducer in OUT/. One line per target
# (executions, coverage, features, corpus size, and the CPU seconds the
# fuzzer used, user + system) is appended to tests/fuzz/CAMPAIGN.tsv, which
# keeps the total fuzzing time of each target. SECONDS is wall time; a
# fuzzer that shares its core (run it niced beside other work) gets less CPU
# than that, so count the cpu_s column (rows before it was added have none).
#
# usage: scripts/fuzz-campaign.sh [-t SECONDS] [-b BUILD] [-o OUT] [NAME...]
set -eu
secs=300 build=build-fuzz out=${TMPDIR:-/tmp}/ptc-fuzz-campaign
while getopts t:b:o: opt; do
    case $opt in
    t) secs=$OPTARG ;;
    b) build=$OPTARG ;;
    o) out=$OPTARG ;;
    *) echo "usage: $0 [-t SECONDS] [-b BUILD] [-o OUT] [NAME...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- $(ls "$root/tests/fuzz" | sed -n 's/^fuzz_\(.*\)\.c$/\1/p')
log=$root/tests/fuzz/CAMPAIGN.tsv
[ -f "$log" ] || printf 'date\ttarget\tseconds\texecs\tcov\tft\tcorpus\tresult\tcpu_s\n' >"$log"
hz=$(getconf CLK_TCK)
# CPU ticks of this shell's waited-for children (fields cutime and cstime)
child_ticks() { awk '{print $16 + $17}' /proc/$$/stat; }
mkdir -p "$out"
status=0
for name in "$@"; do
    bin=$root/$build/fuzz_${name}_lf
    [ -x "$bin" ] || { echo "fuzz-campaign: no $bin (run make fuzz)" >&2; exit 2; }
    corpus=$root/tests/fuzz/corpus/$name
    new=$out/$name.new
    rm -rf "$new"; mkdir -p "$new" "$corpus"
    echo "fuzz-campaign: $name for ${secs} s" >&2
    result=ok
    t0=$(child_ticks)
    (cd "$out" && "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$out/$name-" "$new" "$corpus" \
        >"$out/$name.log" 2>&1) || result=FAILED
    cpu=$(awk -v a="$t0" -v b="$(child_ticks)" -v hz="$hz" 'BEGIN { printf "%.0f", (b - a) / hz }')
    [ $result = ok ] || status=1
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$name.log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$out/$name.log" | tail -1)
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    # keep only what adds coverage to the saved corpus
    "$bin" -merge=1 -rss_limit_mb=2048 "$corpus" "$new" >"$out/$name.merge.log" 2>&1 || true
    n=$(ls "$corpus" | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$name" "$secs" \
        "${execs:-?}" "${cov:-?}" "${ft:-?}" "$n" "$result" "$cpu" >>"$log"
    echo "fuzz-campaign: $name: ${execs:-?} executions in $cpu CPU s, cov ${cov:-?}, ft ${ft:-?}, corpus $n, $result" >&2
done
exit $status
