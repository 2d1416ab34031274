#!/usr/bin/env bash
# ptc schedule: exit codes, --json keys, --emit | --validate round trip,
# broken and deadlocking files rejected, pictures written.
set -euo pipefail
PTC=${PTC:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_rc() { # rc command...
    local want=$1; shift
    set +e; "$@" >"$T/out" 2>"$T/err"; local rc=$?; set -e
    [ "$rc" = "$want" ] || { cat "$T/out" "$T/err" >&2; fail "'$*' exited $rc, want $want"; }
}
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

expect_rc 0 "$PTC" schedule --help
grep -q "kfkb" "$T/out" || fail "help lacks kinds"

# usage errors: exit 2, one 'ptc: error:' line
expect_rc 2 "$PTC" schedule
expect_rc 2 "$PTC" schedule --kind 1f1b --stages 4
expect_rc 2 "$PTC" schedule --kind nope --stages 4 --microbatches 8
expect_rc 2 "$PTC" schedule --kind 1f1b --stages 4 --microbatches 8 --bogus
expect_rc 2 "$PTC" schedule --kind 1f1b --stages x --microbatches 8
expect_rc 2 "$PTC" schedule --kind 1f1b --stages 4 --microbatches 8 --k 2
expect_rc 2 "$PTC" schedule --kind kfkb --stages 4 --microbatches 8 --k 2 --adaptive
expect_rc 2 "$PTC" schedule --kind 1f1b --stages 4 --microbatches 8 --bandwidth 10
expect_rc 2 "$PTC" schedule --kind 1f1b --stages 4 --microbatches 8 --emit --json
expect_rc 2 "$PTC" schedule --validate
head -1 "$T/err" | grep -q '^ptc: error: ' || fail "usage error line"
# generator requirement not met: exit 1
expect_rc 1 "$PTC" schedule --kind interleaved --stages 4 --microbatches 6 --chunks 2

# --json keys and closed forms
expect_rc 0 "$PTC" schedule --kind 1f1b --stages 4 --microbatches 8 --json
cp "$T/out" "$T/j"
[ "$(jget "$T/j" 'd["makespan"]')" = 33 ] || fail "1f1b makespan"
[ "$(jget "$T/j" 'd["peak_activations"]')" = "[4, 3, 2, 1]" ] || fail "1f1b peaks"
python3 - "$T/j" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("makespan", "bubble_fraction", "peak_activations", "kind", "ranks", "microbatches", "valid"):
    assert k in d, k
assert abs(d["bubble_fraction"] - 3 / 11) < 1e-12
PY
expect_rc 0 "$PTC" schedule --kind kfkb --stages 4 --microbatches 8 --k 2 --json
[ "$(jget "$T/out" 'd["k"]')" = 2 ] || fail "kfkb k"
expect_rc 0 "$PTC" schedule --kind kfkb --stages 4 --microbatches 16 --adaptive --comm-latency 2 --json
[ "$(jget "$T/out" 'd["k"] > 1')" = True ] || fail "adaptive k under slow links"
expect_rc 0 "$PTC" schedule --kind kfkb --stages 4 --microbatches 16 --adaptive --json
[ "$(jget "$T/out" 'd["k"]')" = 1 ] || fail "adaptive k under free links"
expect_rc 1 "$PTC" schedule --kind gpipe --stages 4 --microbatches 16 --mem-limit 4
grep -q "exceed --mem-limit" "$T/err" || fail "mem-limit message"
printf '0 1\n10 0.5\n' > "$T/bw"
expect_rc 0 "$PTC" schedule --kind 1f1b --stages 2 --microbatches 2 --bw-trace "$T/bw" --act-bytes 1 --json
[ "$(jget "$T/out" 'd["makespan"] > 9')" = True ] || fail "bw trace slows the run"
printf '5 1\n' > "$T/badbw"
expect_rc 1 "$PTC" schedule --kind 1f1b --stages 2 --microbatches 2 --bw-trace "$T/badbw" --act-bytes 1

# --emit | --validate round trip, every kind; pictures
for kind in gpipe 1f1b interleaved kfkb chimera zb-h1 zb-v; do
    extra=""
    [ $kind = interleaved ] && extra="--chunks 2"
    [ $kind = kfkb ] && extra="--k 3"
    expect_rc 0 "$PTC" schedule --kind $kind --stages 4 --microbatches 8 $extra --cost-w 1 --emit \
        --svg "$T/$kind.svg" --trace "$T/$kind.json"
    cp "$T/out" "$T/$kind.txt"
    expect_rc 0 "$PTC" schedule --file "$T/$kind.txt" --validate --json
    [ "$(jget "$T/out" 'd["valid"]')" = True ] || fail "$kind round trip"
    grep -q "<svg" "$T/$kind.svg" || fail "$kind svg"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert any(e.get('ph')=='X' for e in d['traceEvents'])" "$T/$kind.json"
done
# emitting the parsed file again gives the same text
expect_rc 0 "$PTC" schedule --file "$T/chimera.txt" --validate --svg "$T/v.svg"
grep -q "<svg" "$T/v.svg" || fail "validate svg"

# broken files: exit 1
printf 'ranks 2\nstages 2\nmicrobatches 2\nrank 0: F0 Q1\n' > "$T/broken.txt"
expect_rc 1 "$PTC" schedule --file "$T/broken.txt" --validate
grep -q "line 4: bad action 'Q1'" "$T/err" || fail "parse error message"
printf 'ranks 2\nstages 2\nmicrobatches 2\nrank 0: F0 B0 F1 B1\nrank 1: F0 F1 B0 B1\n' > "$T/dead.txt"
expect_rc 1 "$PTC" schedule --file "$T/dead.txt" --validate
grep -q "deadlock: rank 0 step 1 (B0)" "$T/err" || fail "deadlock message"
grep -q "\[B0\]" "$T/out" || fail "deadlock grid"
expect_rc 1 "$PTC" schedule --file "$T/dead.txt" --validate --json
[ "$(jget "$T/out" 'd["problem"]')" = deadlock ] || fail "deadlock json"
printf 'ranks 2\nstages 2\nmicrobatches 1\nrank 0: F0 B0\nrank 1: B0 F0\n' > "$T/order.txt"
expect_rc 1 "$PTC" schedule --file "$T/order.txt" --validate
grep -q "backward before the forward" "$T/err" || fail "order message"
expect_rc 1 "$PTC" schedule --file "$T/missing.txt" --validate
# the cost and link options, closed forms: GPipe, 2 stages, 1 micro-batch runs
# F0 on rank 0, F0 on rank 1, B0 on rank 1, B0 on rank 0 one after the other
expect_rc 0 "$PTC" schedule --kind gpipe --stages 2 --microbatches 1 --cost-f 2 --cost-b 4 --json
[ "$(jget "$T/out" 'd["makespan"]')" = 12 ] || fail "--cost-f 2 --cost-b 4: makespan 2+2+4+4"
# 20 bytes at 10 per time unit: each of the two messages takes 2
expect_rc 0 "$PTC" schedule --kind gpipe --stages 2 --microbatches 1 --bandwidth 10 --act-bytes 20 --json
[ "$(jget "$T/out" 'd["makespan"]')" = 10 ] || fail "--bandwidth 10 --act-bytes 20: makespan 1+2+1+2+2+2"
expect_rc 2 "$PTC" schedule --kind gpipe --stages 2 --microbatches 1 --bandwidth 0 --act-bytes 1
grep -q "bad value '0' for --bandwidth" "$T/err" || fail "--bandwidth 0 message"
expect_rc 2 "$PTC" schedule --kind gpipe --stages 2 --microbatches 1 --cost-b -1
grep -q "bad value '-1' for --cost-b" "$T/err" || fail "--cost-b -1 message"
expect_rc 2 "$PTC" schedule --kind gpipe --stages 2 --microbatches 1 --cost-w 3
grep -q "must not exceed --cost-b" "$T/err" || fail "--cost-w > --cost-b message"
# --trace: Chrome/Perfetto JSON, one complete event per action
expect_rc 0 "$PTC" schedule --kind gpipe --stages 2 --microbatches 1 --trace "$T/t.json"
[ "$(jget "$T/t.json" 'sorted(e["name"] for e in d["traceEvents"] if e["ph"] == "X")')" = \
  "['B0', 'B0', 'F0', 'F0']" ] || fail "--trace events"
# one FILE after --from FORMAT, no more
expect_rc 2 "$PTC" schedule --from torch "$T/a.csv" "$T/b.csv"
grep -q "unexpected argument" "$T/err" || fail "second FILE message"
echo "ok"
