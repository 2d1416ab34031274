#!/usr/bin/env bash
# ptc maps no MPI, CUDA, cuBLAS, NCCL or OpenBLAS (issue 17, item 3): its
# commands are linked from libptc.a with --as-needed, and what needs those
# libraries (train, reshard --mpi) runs as ptc-full, which ptc execs
# (docs/architecture.md, "What a command loads"). `ptc reshard` with threads
# is one of ptc's own.
. "$(dirname "$0")/lib.sh"
# the shipped commands (the build tree's, as installed), not the test build's
PTC=${PTC_BUILD:-$(dirname "$PTC")/..}/ptc
heavy='libmpi|libcudart|libcublas|libnccl|libopenblas|libptc\.so'
full=$(cd "$(dirname "$PTC")" && pwd)/ptc-full

# ptc: none of them, directly or through another library
if ldd "$PTC" | grep -E "$heavy" > "$T/ldd"; then bad "ptc loads: $(tr '\n' ' ' < "$T/ldd")"; else ok; fi
# ... and none is mapped while a light command runs (a store, then dataset ls)
"$PTC" synth --preset gpt2-tiny --seed 1 --out "$T/m.safetensors" > /dev/null
"$PTC" import --store "$T/st" --config tp=1 --rules none "$T/m.safetensors" > /dev/null
LD_DEBUG=libs "$PTC" dataset ls --store "$T/st" > /dev/null 2> "$T/libs"
if grep -q 'calling init' "$T/libs" && ! grep -E "calling init: .*($heavy)" "$T/libs" > "$T/init"; then ok; else
    bad "ptc dataset ls initialised: $(tr '\n' ' ' < "$T/init")"; fi

# ptc-full: beside ptc, every command, over libptc.so (unless a sanitizer build)
if [ -x "$full" ]; then ok; else bad "no ptc-full beside $PTC"; fi
for c in reshard train; do
    # ptc lists it, with the first line of ptc-full's help
    want=$("$full" "$c" --help | head -n1)
    if "$PTC" --help | grep -qF -- "$want"; then ok; else bad "ptc --help lacks '$c: $want'"; fi
    # the same full help, exit 0 (train: run as ptc-full; reshard: ptc's own)
    if "$PTC" "$c" --help > "$T/h" && cmp -s "$T/h" <("$full" "$c" --help); then ok; else
        bad "ptc $c --help is not ptc-full's"; fi
done
# the exec keeps the arguments and the exit status (a usage error: 2)
expect_fail 2 "schedule" -- "$PTC" train --config pp=1 --microbatches 1 --steps 1
# a reshard with threads maps none of them; with --mpi it is ptc-full's
LD_DEBUG=libs "$PTC" reshard --store "$T/st" --to tp=2 > /dev/null 2> "$T/libs"
if grep -q 'calling init' "$T/libs" && ! grep -E "calling init: .*($heavy)" "$T/libs" > "$T/init"; then ok; else
    bad "ptc reshard initialised: $(tr '\n' ' ' < "$T/init")"; fi
[ "$("$PTC" versions --store "$T/st" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))')" = 2 ] &&
    ok || bad "ptc reshard (threads) made no version"
LD_DEBUG=libs "$PTC" reshard --mpi --help > /dev/null 2> "$T/libs"
if grep -qE "calling init: .*libmpi" "$T/libs"; then ok; else bad "ptc reshard --mpi did not run as ptc-full"; fi

# without ptc-full (nor ../libexec/ptc/ptc-full) a full command fails cleanly,
# and a light one still works
mkdir -p "$T/alone/bin"
cp "$PTC" "$T/alone/bin/ptc"
expect_fail 1 "ptc-full" -- "$T/alone/bin/ptc" train --help
expect_fail 1 "ptc-full" -- "$T/alone/bin/ptc" reshard --mpi --store "$T/st" --to tp=1
if "$T/alone/bin/ptc" reshard --store "$T/st" --to tp=1 > /dev/null; then ok; else bad "ptc reshard without ptc-full"; fi
if "$T/alone/bin/ptc" versions --store "$T/st" > /dev/null; then ok; else bad "ptc versions without ptc-full"; fi
# the elastic controller is one of ptc's own (its ranks run ptc train, as ptc-full)
if "$T/alone/bin/ptc" elastic --help | grep -q usage; then ok; else bad "ptc elastic without ptc-full"; fi
# installed layout: PREFIX/libexec/ptc/ptc-full
mkdir -p "$T/alone/libexec/ptc"
ln -s "$full" "$T/alone/libexec/ptc/ptc-full"
if "$T/alone/bin/ptc" train --help | grep -q usage; then ok; else bad "ptc did not find ../libexec/ptc/ptc-full"; fi
finish
