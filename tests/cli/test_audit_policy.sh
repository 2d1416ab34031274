#!/usr/bin/env bash
# ptc dataset audit --policy: its usage errors (exit 2, one "ptc: error:"
# line naming the option), and the audit of an unread epoch under a policy
# (nothing served: the dropped records are dropped, the rest missing).
. "$(dirname "$0")/lib.sh"

seq 1 10 >"$T/ten.txt"
s="$T/store"
"$PTC" dataset ingest --store "$s" --name ten --format lines "$T/ten.txt" >/dev/null
A=(dataset audit --store "$s" --name ten --seed 1 --epoch 0)

expect_fail 2 policy -- "$PTC" "${A[@]}" --policy sometimes --batch 4 --dp 3
expect_fail 2 policy -- "$PTC" "${A[@]}" --policy equal+drop-last --batch 4 --dp 3
expect_fail 2 policy -- "$PTC" "${A[@]}" --policy "" --batch 4 --dp 3
expect_fail 2 batch dp -- "$PTC" "${A[@]}" --policy equal
expect_fail 2 batch dp -- "$PTC" "${A[@]}" --policy equal --batch 4
expect_fail 2 batch dp -- "$PTC" "${A[@]}" --policy equal --dp 3
expect_fail 2 batch -- "$PTC" "${A[@]}" --policy equal --batch 0 --dp 3
expect_fail 2 dp -- "$PTC" "${A[@]}" --policy equal --batch 4 --dp 0
expect_fail 2 dp -- "$PTC" "${A[@]}" --policy equal --batch 4 --dp x
expect_fail 2 start -- "$PTC" "${A[@]}" --policy equal --batch 4 --dp 3 --start -1
expect_fail 2 need policy -- "$PTC" "${A[@]}" --batch 4 --dp 3
expect_fail 2 need policy -- "$PTC" "${A[@]}" --start 4
expect_fail 2 audit -- "$PTC" dataset info --store "$s" --name ten --policy equal
expect_fail 2 audit -- "$PTC" dataset ls --store "$s" --batch 4

# nothing read: N = 10, batch 4, dp 3 (equal drops positions 3, 7, 8, 9;
# drop-last 8, 9; from start 2 equal drops one of each batch of 4)
check() {
    local want=$1; shift
    local a
    a=$("$PTC" "${A[@]}" --json "$@")
    if [ "$a" = "$want" ]; then ok; else bad "audit $*: $a (want $want)"; fi
}
check '{"samples":10,"once":0,"repeated":0,"missing":10}'
check '{"samples":10,"once":0,"repeated":0,"missing":10,"dropped":0}' --policy none --batch 4 --dp 3
check '{"samples":10,"once":0,"repeated":0,"missing":6,"dropped":4}' --policy equal --batch 4 --dp 3
check '{"samples":10,"once":0,"repeated":0,"missing":8,"dropped":2}' --policy drop-last --batch 4 --dp 3
check '{"samples":10,"once":0,"repeated":0,"missing":6,"dropped":4}' --policy drop-last+equal --batch 4 --dp 3
check '{"samples":10,"once":0,"repeated":0,"missing":8,"dropped":2}' --policy equal --batch 4 --dp 3 --start 2
t=$("$PTC" "${A[@]}" --policy equal --batch 4 --dp 3)
if echo "$t" | grep -q "policy equal: 10 samples, 0 served once, 0 repeated, 6 missing, 4 dropped"; then ok; else bad "text audit: $t"; fi
finish
