#!/usr/bin/env bash
# tokens:u16:LEN treats its inputs as one token stream (issue 17): 100
# files of 1000 tokens with LEN=2049 make 48 windows, most across files, and
# the 1648 tokens of the last partial window are dropped with a warning on
# stderr, never silently; a stream shorter than one window is an error.
. "$(dirname "$0")/lib.sh"
cd "$T"
python3 - <<'PY'
import struct
for f in range(100):
    with open("tok-%03d.bin" % f, "wb") as o:
        o.write(struct.pack("<1000H", *[(f * 1000 + i) % 65536 for i in range(1000)]))
PY
set +e
"$PTC" dataset ingest --store st --name tk --format tokens:u16:2049 tok-*.bin >"$T/out" 2>"$T/err"
rc=$?
set -e
if [ $rc = 0 ] && grep -q " 48 records" "$T/out"; then ok; else
    bad "100 files of 1000 tokens, LEN 2049: rc $rc: $(cat "$T/out" "$T/err")"; fi
if grep -q "dropped the last 1648 of 100000 tokens" "$T/err"; then ok; else
    bad "no warning about the dropped tail: $(cat "$T/err")"; fi
n=$("$PTC" dataset info --store st --name tk --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["samples"])')
if [ "$n" = 48 ]; then ok; else bad "samples: $n"; fi
expect_fail 1 "fewer than one window" -- "$PTC" dataset ingest --store st --name short --format tokens:u16:2049 tok-000.bin tok-001.bin
finish
