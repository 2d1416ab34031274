#!/bin/bash
# The GPU check of the CUDA paths (issue 29): builds (unless --no-build),
# runs the `gpu`-labelled tests and the GPU benchmark of ptc.save / ptc.load /
# ptc.async_save on CUDA tensors (bench/python/bench_gpu.py: a state of
# --gib GiB; async_save's stall against a plain device-to-pinned copy, loads
# to the device against a storage read + host-to-device copy overlapped), on
# one GPU, each stage under its own timeout, within --budget seconds (360).
# Every figure goes to one file (--out, default BUILD/gpu-check.txt).
#
#   scripts/gpu-check.sh [--build DIR] [--no-build] [--out FILE] [--gib N]
#                        [--budget S] [--rehearse]
#   make gpu-check
#
# Where there is no GPU (no nvidia-smi, or torch sees no CUDA device) the GPU
# stages are skipped and said so in the file, exit 0; --rehearse then runs
# the benchmark on the CPU through ptc's stand-in device (its figures mean
# nothing, the script's steps are exercised). CI never runs this script.
# On a lent GPU machine without the build's libraries, build here and carry
# the build (/work/shared/gpu/README.md), then run it there with --no-build.
# Python: PY, else PTC_VENV's python, else python3 (torch needed for the
# benchmark; pytest for test_python_cuda.sh, which skips without it); its
# stages run with PY_LD_LIBRARY_PATH as LD_LIBRARY_PATH where that is set
# (torch's own CUDA libraries before the toolkit's).
# The benchmark runs first, then the tests/gpu scripts one by one, as ctest
# runs them (PTC, PTC_SRC, PTC_BUILD set; exit 77 is a skip): ctest and the
# build's CTest files are not needed, so a carried build runs them too.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build
do_build=1
out=
gib=4
budget=360
rehearse=
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$(cd "$2" 2>/dev/null && pwd || echo "$2"); shift 2 ;;
    --no-build) do_build=; shift ;;
    --out) out=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --rehearse) rehearse=1; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
out=${out:-$build/gpu-check.txt}
PY=${PY:-}
if [ -z "$PY" ]; then
    if [ -n "${PTC_VENV:-}" ] && [ -x "$PTC_VENV/bin/python" ]; then PY=$PTC_VENV/bin/python
    elif [ -x "$src/.venv/bin/python" ]; then PY=$src/.venv/bin/python
    else PY=python3; fi
fi
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
mkdir -p "$(dirname "$out")"
: > "$out"
say() { echo "$*" | tee -a "$out"; }
# stage NAME SECONDS CMD...: CMD's output to the terminal and the file, its
# outcome and time in the file; skipped when the budget is spent
stage() {
    local name=$1 tmo=$2 l rc s
    shift 2
    l=$(left)
    if [ "$l" -lt 10 ]; then
        say "== $name: SKIPPED (budget of ${budget}s spent)"
        return 0
    fi
    [ "$tmo" -gt "$l" ] && tmo=$l
    say "== $name (timeout ${tmo}s)"
    s=$(date +%s)
    timeout -k 5 "$tmo" "$@" 2>&1 | tee -a "$out"
    rc=${PIPESTATUS[0]}
    local st=FAIL
    case $rc in 0) st=PASS ;; 77) st=SKIP ;; 124|137) st=TIMEOUT ;; esac
    say "== $name: $st (rc $rc, $(($(date +%s) - s)) s)"
    [ "$st" = FAIL ] || [ "$st" = TIMEOUT ] && failed=1
    return 0
}
failed=
ran=
say "gpu-check $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname), $(date -u +%FT%TZ)"

if [ -n "$do_build" ]; then
    cuda=OFF
    command -v nvcc > /dev/null && cuda=ON
    stage build 300 bash -c "cmake -S '$src' -B '$build' -DPTC_WITH_CUDA=$cuda > /dev/null && cmake --build '$build' -j \$(nproc)"
fi
[ -x "$build/ptc" ] || { say "gpu-check: error: no build at $build (ptc missing)"; exit 1; }

pyld=${PY_LD_LIBRARY_PATH:-$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
gpu=
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
    say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
    if LD_LIBRARY_PATH="$pyld" "$PY" -c \
        'import torch; assert torch.cuda.is_available()' 2> /dev/null; then
        gpu=1
    else
        say "gpu-check: $PY has no torch that sees the GPU"
    fi
else
    say "gpu-check: no GPU here (nvidia-smi finds none)"
fi

export PTC_LIB=$build/libptc.so PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH}
if [ -n "$gpu" ]; then
    stage bench-gpu 240 env LD_LIBRARY_PATH="$pyld" "$PY" "$src/bench/python/bench_gpu.py" \
        --gib "$gib" --json "$out.json"
    [ -f "$out.json" ] && { say "== figures (JSON)"; cat "$out.json" >> "$out"; echo >> "$out"; rm -f "$out.json"; }
    for t in "$src"/tests/gpu/test_python_cuda.sh "$src"/tests/gpu/test_*.sh; do
        n=$(basename "$t" .sh)
        case " $ran " in *" $n "*) continue ;; esac
        ran="$ran $n"
        ld=${LD_LIBRARY_PATH:-}
        [ "$n" = test_python_cuda ] && ld=$pyld
        stage "gpu.$n" 180 env LD_LIBRARY_PATH="$ld" PY="$PY" PTC="$build/ptc" PTC_SRC="$src" \
            PTC_BUILD="$build" bash "$t"
    done
else
    say "== gpu-tests: SKIPPED (no GPU)"
    say "== bench-gpu: SKIPPED (no GPU)"
    if [ -n "$rehearse" ]; then
        stage bench-gpu-rehearsal 120 "$PY" "$src/bench/python/bench_gpu.py" --device fake \
            --gib 0.25
    fi
fi
say "gpu-check: done in $(($(date +%s) - t0)) s; figures in $out"
[ -z "$failed" ]
