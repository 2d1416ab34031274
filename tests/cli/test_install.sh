#!/bin/bash
# cmake --install puts libptc.so, libptc.a, the headers, ptc.pc and the CMake
# package into a prefix; a small C program builds against that copy with
# pkg-config (and another with find_package) and runs, using the installed
# library, not the build tree's. The installed bin/ptc maps no MPI, CUDA,
# NCCL or OpenBLAS and runs train/reshard/elastic as libexec/ptc/ptc-full.
# Nothing installed carries a test knob (fault injection is the test build's).
set -eu
: "${PTC_SRC:?}" "${PTC_BUILD:?}"
T=$(mktemp -d "${TMPDIR:-/tmp}/ptc-install.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
P=$T/prefix
cmake --install "$PTC_BUILD" --prefix "$P" > "$T/install.log" || { cat "$T/install.log"; fail "cmake --install"; }
libdir=$(cd "$P" && ls -d lib*/libptc.so | head -n1 | xargs dirname)
for f in "$libdir/libptc.so" "$libdir/libptc.a" "$libdir/pkgconfig/ptc.pc" \
         "$libdir/cmake/ptc/ptcConfig.cmake" include/ptc/ptc.h include/ptc/train.h bin/ptc libexec/ptc/ptc-full; do
    [ -e "$P/$f" ] || fail "not installed: $f"
done
# no private header, no generated build configuration
! ls "$P/include/ptc" | grep -q "internal\|build_config" || fail "a private header was installed"
# every header the umbrella includes is installed
grep -o '"ptc/[a-z_0-9]*\.h"' "$PTC_SRC/include/ptc/ptc.h" | tr -d '"' | while read -r h; do
    [ -e "$P/include/$h" ] || fail "ptc.h includes $h, which is not installed"
done

# the installed commands: ptc is light, ptc-full (over the installed libptc.so)
# runs the full commands; neither uses the build tree
! ldd "$P/bin/ptc" | grep -E 'libmpi|libcudart|libcublas|libnccl|libopenblas|libptc' ||
    fail "the installed ptc loads a GPU, MPI or BLAS library"
full_lib=$(ldd "$P/libexec/ptc/ptc-full" | awk '$1 ~ /^libptc\.so/ {print $3}')
[ -n "$full_lib" ] && [ "$(readlink -f "$full_lib")" = "$(readlink -f "$P/$libdir/libptc.so")" ] ||
    fail "the installed ptc-full does not load the installed libptc.so"
"$P/bin/ptc" train --help > "$T/train.help" && grep -q usage "$T/train.help" ||
    fail "the installed ptc train --help"
"$P/bin/ptc" synth --preset gpt2-tiny --seed 1 --out "$T/m.safetensors" > /dev/null ||
    fail "the installed ptc synth"
echo "ok: installed ptc (light) and libexec/ptc/ptc-full"

# No test knob ships (base/fault_testing.c is the test build's): the library
# exports no fault-injection or test entry point, nothing installed mentions
# PTC_FAULT_*, and the installed commands ignore it where the test build's
# fail (so this check can fail).
! nm -D --defined-only "$P/$libdir/libptc.so" | grep -i -E 'fault|testing' ||
    fail "the installed libptc.so exports a test knob"
! nm --defined-only "$P/$libdir/libptc.a" 2>/dev/null | grep -E ' T ptc_fault_[a-z]+_(at|count)$' ||
    fail "the installed libptc.a defines a fault-injection setter"
for f in "$P/$libdir/libptc.so" "$P/$libdir/libptc.a" "$P/bin/ptc" "$P/libexec/ptc/ptc-full"; do
    ! grep -q -a PTC_FAULT "$f" || fail "$f mentions PTC_FAULT_*"
done
train=(train --config pp=1 --schedule 1f1b --microbatches 1 --steps 1)
PTC_FAULT_ALLOC=1 "$P/bin/ptc" synth --preset gpt2-tiny --seed 1 --out "$T/f.safetensors" > /dev/null ||
    fail "the installed ptc honours PTC_FAULT_ALLOC"
PTC_FAULT_ALLOC=1 "$P/bin/ptc" "${train[@]}" > /dev/null || fail "the installed ptc-full honours PTC_FAULT_ALLOC"
PTC_FAULT_WRITE=1:ENOSPC "$P/bin/ptc" import --store "$T/f" --config tp=2 --rules gpt2 \
    "$T/f.safetensors" > /dev/null || fail "the installed ptc honours PTC_FAULT_WRITE"
if [ -n "${PTC:-}" ]; then # the test build's commands, which the other tests run
    ! PTC_FAULT_ALLOC=1 "$PTC" synth --preset gpt2-tiny --seed 1 --out "$T/g.safetensors" 2> /dev/null ||
        fail "the test build's ptc ignores PTC_FAULT_ALLOC"
    ! PTC_FAULT_ALLOC=1 "$PTC" "${train[@]}" > /dev/null 2>&1 || fail "the test build's ptc-full ignores PTC_FAULT_ALLOC"
    ! PTC_FAULT_WRITE=1:ENOSPC "$PTC" import --store "$T/g" --config tp=2 --rules gpt2 \
        "$T/f.safetensors" 2> /dev/null || fail "the test build's ptc ignores PTC_FAULT_WRITE"
fi
echo "ok: no test knob installed (libptc.so, libptc.a, ptc, ptc-full)"

cat > "$T/hello.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <ptc/ptc.h>

int main(int argc, char **argv)
{
    ptc_store *s = NULL;
    if (argc != 2 || ptc_store_open(&s, argv[1], PTC_STORE_CREATE) != PTC_OK) {
        fprintf(stderr, "store: %s\n", ptc_last_error());
        return 1;
    }
    uint64_t latest = 99;
    int rc = ptc_store_latest(s, &latest);
    ptc_config c;
    int rc2 = ptc_config_parse(&c, "dp=2,tp=4,pp=3");
    printf("ptc %s latest %llu world %d\n", ptc_version(), (unsigned long long)latest,
           ptc_config_world(&c));
    ptc_store_close(s);
    return rc || rc2;
}
C
export PKG_CONFIG_PATH="$P/$libdir/pkgconfig"
cc -std=c11 -Wall -Werror -o "$T/hello" "$T/hello.c" $(pkg-config --cflags --libs ptc) ||
    fail "building against the installed library with pkg-config"
out=$(LD_LIBRARY_PATH="$P/$libdir" "$T/hello" "$T/store") || fail "the program failed"
[ "$out" = "ptc $(pkg-config --modversion ptc) latest 0 world 24" ] || fail "unexpected output: $out"
LD_LIBRARY_PATH="$P/$libdir" ldd "$T/hello" | grep -q "$P/$libdir/libptc.so" ||
    fail "the program did not load the installed libptc.so"
echo "ok: pkg-config: $out"

mkdir -p "$T/cm"
cat > "$T/cm/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.20)
project(hello C)
find_package(ptc 0.1 REQUIRED)
add_executable(hello ../hello.c)
target_link_libraries(hello PRIVATE ptc::ptc)
C
cmake -S "$T/cm" -B "$T/cm/build" -DCMAKE_PREFIX_PATH="$P" > "$T/cm.log" 2>&1 &&
    cmake --build "$T/cm/build" >> "$T/cm.log" 2>&1 || { cat "$T/cm.log"; fail "find_package(ptc)"; }
out=$("$T/cm/build/hello" "$T/store2") || fail "the CMake-built program failed"
echo "$out" | grep -q "world 24" || fail "unexpected output: $out"
echo "ok: find_package(ptc): $out"
