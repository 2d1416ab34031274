#!/bin/bash
# Start-up cost of the ptc command (issue 17, item 3): what a light command
# pays for libraries it does not use.
#   - `ptc dataset ls`, `ptc info` and `ptc --help` on a small store, each run
#     N times: the median wall time (ms) and the largest peak RSS (MB, from
#     /usr/bin/time -f %M);
#   - the mount daemon (`ptc mount -f`) idle for a second: its private memory
#     (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup, MB);
#   - the shared libraries the process maps (ldd) and, with LD_DEBUG=statistics,
#     the dynamic loader's count of objects and relocations.
# Each figure is printed against the goal (20 ms, 15 MB; daemon 30 MB).
# Usage: bench/bench_startup.sh [BUILD_DIR] [N]   (default build, 20)
# PTC_BENCH_BIN=NAME measures BUILD_DIR/NAME instead of BUILD_DIR/ptc: with
# ptc-full (every command over libptc.so, which is what ptc was before the
# split of docs/architecture.md) it gives the "before" figures.
set -eu
B=${1:-build}
N=${2:-20}
PTC=$(cd "$B" && pwd)/${PTC_BENCH_BIN:-ptc}
T=$(mktemp -d "${TMPDIR:-/tmp}/ptc-bench-startup.XXXXXX")
MNT=$T/mnt
cleanup() {
    fusermount3 -u "$MNT" 2> /dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT

# ---- a small store: one model version, one dataset ----
"$PTC" synth --preset llama-tiny --seed 1 --out "$T/m.safetensors" > /dev/null
"$PTC" import --store "$T/st" --config tp=2 --rules llama "$T/m.safetensors" > /dev/null
seq 1 1000 | sed 's/^/line /' > "$T/lines.txt"
"$PTC" dataset ingest --store "$T/st" --name lines --format lines "$T/lines.txt" > /dev/null

# median wall ms and max RSS (MB) of N runs of the command
measure() {
    local i
    : > "$T/ms"
    : > "$T/kb"
    for i in $(seq "$N"); do
        /usr/bin/time -f '%e %M' -o "$T/time" "$@" > /dev/null
        local t0 t1
        t0=$(date +%s%N)
        "$@" > /dev/null
        t1=$(date +%s%N)
        echo $(((t1 - t0) / 1000)) >> "$T/ms"
        awk '{print $2}' "$T/time" >> "$T/kb"
    done
    local med kb
    med=$(sort -n "$T/ms" | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%.1f", m/1000}')
    kb=$(sort -n "$T/kb" | tail -n1)
    echo "$med $(awk -v k="$kb" 'BEGIN{printf "%.1f", k/1024}')"
}
verdict() { # VALUE GOAL -> ok / OVER
    awk -v v="$1" -v g="$2" 'BEGIN{print (v <= g) ? "ok" : "OVER"}'
}

printf '%-22s %10s %10s   %s\n' command "median ms" "max RSS MB" "goal (20 ms, 15 MB)"
for c in "dataset ls" "info" "--help"; do
    case $c in
        "dataset ls") args=(dataset ls --store "$T/st") ;;
        info) args=(info --store "$T/st") ;;
        --help) args=(--help) ;;
    esac
    read -r ms mb < <(measure "$PTC" "${args[@]}")
    printf '%-22s %10s %10s   %s %s\n' "ptc $c" "$ms" "$mb" "$(verdict "$ms" 20)" "$(verdict "$mb" 15)"
done

# ---- the mount daemon, idle ----
mkdir -p "$MNT"
if [ -e /dev/fuse ] && command -v fusermount3 > /dev/null; then
    "$PTC" mount --store "$T/st" "$MNT" -f 2> "$T/mount.err" &
    pid=$!
    for _ in $(seq 100); do
        [ -e "$MNT/README.txt" ] && break
        sleep 0.05
    done
    ls "$MNT/models" "$MNT/datasets" > /dev/null
    sleep 1
    if [ -r /proc/$pid/smaps_rollup ]; then
        priv=$(awk '/^Private_(Clean|Dirty):/ {k += $2} END {printf "%.1f", k/1024}' /proc/$pid/smaps_rollup)
        rss=$(awk '/^Rss:/ {printf "%.1f", $2/1024}' /proc/$pid/smaps_rollup)
        printf '%-22s %10s %10s   %s\n' "mount daemon idle" "private" "$priv MB" \
            "$(verdict "$priv" 30) (goal 30 MB private; RSS $rss MB)"
    fi
    fusermount3 -u "$MNT"
    wait "$pid" || true
else
    echo "mount daemon idle: skipped (no /dev/fuse or fusermount3)"
fi

# ---- what the process loads ----
echo
echo "shared libraries of $PTC (ldd): $(ldd "$PTC" | wc -l)"
ldd "$PTC" | awk '{print "  " $1}' | grep -E 'mpi|cuda|cublas|nccl|openblas|ptc|fuse|gfortran' || true
echo "dynamic loader, ptc dataset ls (LD_DEBUG=statistics):"
LD_DEBUG=statistics "$PTC" dataset ls --store "$T/st" 2>&1 > /dev/null |
    grep -E 'total startup time|number of relocations:|objects loaded' | sed -E 's/^ *[0-9]+: */  /'
