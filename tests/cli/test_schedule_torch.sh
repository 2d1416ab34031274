#!/usr/bin/env bash
# ptc schedule --to torch / --from torch: every single-pipe kind written as
# torch's action lists and read back simulates the same; two-pipe kinds and
# torch's broken 1F1B order are refused with the reason; the new kinds and
# the link-aware zero-bubble plans from the command line; text-format
# errors that name the problem.
. "$(dirname "$0")/lib.sh"
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
run_ok() { # command... : exit 0 expected, stdout in $T/out
    if "$@" >"$T/out" 2>"$T/err"; then ok; else bad "exit $?: $* ($(cat "$T/err"))"; fi
}

run_ok "$PTC" schedule --help
for w in zb-h2 zb-interleaved looped-bfs dualpipev dualpipe "--to torch" "--from torch"; do
    grep -q -- "$w" "$T/out" && ok || bad "help lacks '$w'"
done

# usage errors: exit 2
expect_fail 2 needs a FILE -- "$PTC" schedule --from torch
expect_fail 2 bad value -- "$PTC" schedule --kind 1f1b --stages 2 --microbatches 2 --to csv
expect_fail 2 bad value -- "$PTC" schedule --from yaml x.csv
expect_fail 2 pick one -- "$PTC" schedule --kind 1f1b --stages 2 --microbatches 2 --to torch --emit
expect_fail 2 do not combine -- "$PTC" schedule --from torch x.csv --kind 1f1b
expect_fail 2 chunks applies -- "$PTC" schedule --kind dualpipev --stages 2 --microbatches 4 --chunks 3
# requirements of the new kinds: exit 1
expect_fail 1 dualpipev needs microbatches -- "$PTC" schedule --kind dualpipev --stages 4 --microbatches 7
expect_fail 1 even number of stages -- "$PTC" schedule --kind dualpipe --stages 3 --microbatches 12

# every single-pipe kind: --to torch, --from torch, same figures
for spec in "gpipe" "1f1b" "interleaved --chunks 2" "kfkb --k 2" "zb-h1" "zb-h2" "zb-v" \
            "zb-interleaved --chunks 3" "looped-bfs --chunks 2" "dualpipev"; do
    set -- $spec
    kind=$1; shift
    run_ok "$PTC" schedule --kind "$kind" --stages 4 --microbatches 8 "$@" --cost-w 1 --json
    want=$(jget "$T/out" 'd["makespan"], d["peak_activations"]')
    for form in torch torch-comms; do
        run_ok "$PTC" schedule --kind "$kind" --stages 4 --microbatches 8 "$@" --cost-w 1 --to $form
        cp "$T/out" "$T/$kind.csv"
        [ "$(wc -l <"$T/$kind.csv")" = 4 ] && ok || bad "$kind $form: not 4 rows"
        run_ok "$PTC" schedule --from torch "$T/$kind.csv" --cost-w 1 --json
        [ "$(jget "$T/out" 'd["makespan"], d["peak_activations"]')" = "$want" ] && ok ||
            bad "$kind $form: read back simulates $(jget "$T/out" 'd["makespan"]'), want $want"
        [ "$(jget "$T/out" 'd["source"], d["valid"]')" = "('torch', True)" ] && ok || bad "$kind json"
        if [ $form = torch-comms ]; then
            [ "$(jget "$T/out" 'd["skipped_actions"] > 0')" = True ] && ok || bad "$kind skipped"
            grep -q "WAIT_SEND_F" "$T/$kind.csv" && grep -q "REDUCE_GRAD" "$T/$kind.csv" && ok ||
                bad "$kind: comms form lacks its waits"
        fi
    done
    # imported, emitted as PTC's text, validated again
    run_ok "$PTC" schedule --from torch "$T/$kind.csv" --emit
    cp "$T/out" "$T/$kind.txt"
    run_ok "$PTC" schedule --file "$T/$kind.txt" --validate --json
done

# two pipelines cannot be written for torch
expect_fail 1 2 pipelines chimera -- "$PTC" schedule --kind chimera --stages 4 --microbatches 8 --to torch
expect_fail 1 2 pipelines dualpipe -- "$PTC" schedule --kind dualpipe --stages 4 --microbatches 8 --to torch
run_ok "$PTC" schedule --kind dualpipe --stages 4 --microbatches 8 --json
[ "$(jget "$T/out" 'd["pipes"]')" = 2 ] && ok || bad "dualpipe pipes"

# torch 2.15's Schedule1F1B.pipeline_order (P=4, M=4): its last rank has no
# F0 and runs an F4
cat >"$T/1f1b.csv" <<'EOF'
0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3,0REDUCE_GRAD,0WAIT_REDUCE_GRAD
1F0,1F1,1F2,1B0,1F3,1B1,1B2,1B3,1REDUCE_GRAD,1WAIT_REDUCE_GRAD
2F0,2F1,2B0,2F2,2B1,2F3,2B2,2B3,2REDUCE_GRAD,2WAIT_REDUCE_GRAD
3F1,3B0,3F2,3B1,3F3,3B2,3F4,3B3,3REDUCE_GRAD,3WAIT_REDUCE_GRAD
EOF
expect_fail 1 "rank 3 step 1 (B0): backward before the forward" -- "$PTC" schedule --from torch "$T/1f1b.csv"
expect_fail 1 "rank 3 runs micro-batch 4, out of range (microbatches 4)" -- \
    "$PTC" schedule --from torch "$T/1f1b.csv" --microbatches 4
printf '0F0,0X1\n' >"$T/bad.csv"
expect_fail 1 "line 1 (rank 0) cell 2 '0X1': unknown action type" -- "$PTC" schedule --from torch "$T/bad.csv"

# planning for the links: zb-v at P=8, M=16, latency = one forward
run_ok "$PTC" schedule --kind zb-v --stages 8 --microbatches 16 --cost-w 1 --comm-latency 1 --json
planned=$(jget "$T/out" 'd["makespan"]')
[ "$(jget "$T/out" 'd["makespan"] <= 89.5 and max(d["peak_activations"]) <= 8')" = True ] && ok ||
    bad "zb-v planned for latency 1: $planned"
run_ok "$PTC" schedule --kind zb-v --stages 8 --microbatches 16 --cost-w 1 --to torch
cp "$T/out" "$T/free.csv"
run_ok "$PTC" schedule --from torch "$T/free.csv" --cost-w 1 --comm-latency 1 --json
[ "$(jget "$T/out" "d['makespan'] > $planned")" = True ] && ok ||
    bad "the free-links order is not slower under latency 1"

# the text format's errors name the problem
printf 'kind %s\nranks 2\nstages 2\nmicrobatches 2\n' abcdefghijklmnopqrstuvwxyz0123456789 >"$T/k.txt"
expect_fail 1 "line 1: kind label" "has 36 characters, at most 31" -- "$PTC" schedule --file "$T/k.txt" --validate
printf 'ranks 2\nstages 2\nmicrobatches 2\nrank 0: F0 F7\n' >"$T/m.txt"
expect_fail 1 "line 4: action 'F7': micro-batch 7 out of range (microbatches 2)" -- \
    "$PTC" schedule --file "$T/m.txt" --validate
printf 'ranks 99999\nstages 2\nmicrobatches 2\n' >"$T/r.txt"
expect_fail 1 "line 1: ranks 99999 over the limit 16384" -- "$PTC" schedule --file "$T/r.txt"
finish
