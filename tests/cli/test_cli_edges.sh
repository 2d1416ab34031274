#!/usr/bin/env bash
# Edges of the command line contract: usage errors exit 2 (an unknown ingest
# format, --all with --version, the removed train --save), `verify --all --json` names the versions it
# checked, `export --out` refuses a target its final rename could not replace
# before writing anything, a failed first import or ingest leaves no empty
# store behind, and `info` prints tensor names escaped.
. "$(dirname "$0")/lib.sh"
mkdir "$T/w" && cd "$T/w"
"$PTC" synth --preset llama-tiny --seed 7 --out m.safetensors
"$PTC" import --store st --config tp=2 --rules llama m.safetensors >/dev/null
"$PTC" reshard --store st --to tp=1 >/dev/null
printf 'a\nb\n' >l.txt

# ---- usage errors exit 2 ----------------------------------------------------------
expect_fail 2 format nope -- "$PTC" dataset ingest --store st --name d --format nope l.txt
expect_fail 2 format tokens -- "$PTC" dataset ingest --store st --name d --format tokens:u16:0 l.txt
expect_fail 2 format -- "$PTC" dataset ingest --store nowhere --name d --format bogus l.txt
[ ! -e nowhere ] && ok || bad "a usage error created a store"
expect_fail 2 all version -- "$PTC" verify --store st --all --version 1
# train --save (the gathered save) is gone: the error names what replaces it, and nothing runs
expect_fail 2 "--save was removed" "--store DIR --save-every 0" "ptc export --store DIR --out FILE" \
    -- "$PTC" train --config pp=1 --schedule 1f1b --microbatches 1 --steps 1 --save g.safetensors
[ ! -e g.safetensors ] && ok || bad "train --save wrote a file"
# the option table (cli/cli.c): each kind of value refused with its option's own line
expect_fail 2 "--threads: '0' is not 1..4096" -- "$PTC" reshard --store st --to tp=1 --threads 0
expect_fail 2 "--batch: '0' is not a positive integer" -- \
    "$PTC" dataset audit --store st --name d --seed 1 --epoch 0 --policy none --batch 0 --dp 1
expect_fail 2 "--cache-mib needs 0 to 1073741824" -- "$PTC" mount --store st --cache-mib 1073741825 m
expect_fail 2 "--version: '0' is not a version number" -- "$PTC" info --store st --version 0
expect_fail 2 "--timeout: expected seconds >= 0" -- \
    "$PTC" train --config pp=1 --schedule 1f1b --microbatches 1 --steps 1 --timeout -1
expect_fail 2 "--dtype must be F32, BF16 or F16, not 'F64'" -- "$PTC" export --store st --dtype F64 --out x
expect_fail 2 "--compress: unknown codec 'lz4'" -- "$PTC" reshard --store st --to tp=1 --compress lz4
expect_fail 2 "unexpected argument 'extra'" -- "$PTC" gc --store st extra
expect_fail 2 "missing value '--store'" -- "$PTC" verify --store
expect_fail 2 "unknown option or missing value '-z'" -- "$PTC" mount --store st -z m
if "$PTC" mount -h | grep -q '^usage: ptc mount'; then ok; else bad "mount -h"; fi
[ ! -e x ] && [ ! -e m ] && ok || bad "a refused command wrote a file"

# ---- verify --all --json names the versions ----------------------------------------
"$PTC" verify --store st --all --json >"$T/v.json"
if python3 - "$T/v.json" <<'PY'; then ok; else bad "verify --all --json: $(cat "$T/v.json")"; fi
import json, sys
o = json.load(open(sys.argv[1]))
assert o.get("ok") is True, o
assert "version" not in o, o          # no made-up "version": 0
assert o.get("versions") == [1, 2], o
PY
"$PTC" verify --store st --version 1 --json >"$T/v1.json"
if grep -q '"version":1' "$T/v1.json"; then ok; else bad "verify --version 1 --json: $(cat "$T/v1.json")"; fi

# ---- export --out: a target the rename cannot replace fails before writing ------------
mkdir outdir
expect_fail 1 directory outdir -- "$PTC" export --store st --out outdir
expect_fail 1 directory -- "$PTC" export --store st --out .
expect_fail 1 directory -- "$PTC" export --store st --out outdir/..
if grep -qi rename "$T/err"; then bad "export failed only at the rename"; else ok; fi
if ls -A | grep -q '\.tmp\.'; then bad "export left a temporary file: $(ls -A)"; else ok; fi
if [ -z "$(ls -A outdir)" ]; then ok; else bad "export wrote into outdir"; fi
"$PTC" export --store st --out good.safetensors && [ -s good.safetensors ] && ok || bad "export"

# ---- a failed first import / ingest leaves no store -------------------------------------
python3 - <<'PY'
import json, struct
h = json.dumps({"model.layers.0.mystery.weight": {"dtype": "F32", "shape": [2],
                                                  "data_offsets": [0, 8]}}).encode()
h += b" " * (-len(h) % 8)
open("norule.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 8)
PY
expect_fail 1 mystery -- "$PTC" import --store fresh --config tp=1 --rules llama norule.safetensors
[ ! -e fresh ] && ok || bad "a failed first import left $(find fresh | tr '\n' ' ')"
mkdir empty
expect_fail 1 mystery -- "$PTC" import --store empty --config tp=1 --rules llama norule.safetensors
if [ -d empty ] && [ -z "$(ls -A empty)" ]; then ok; else
    bad "import into an empty directory left $(find empty | tr '\n' ' ')"; fi
expect_fail 1 missing -- "$PTC" import --store fresh2 --config tp=1 --rules llama missing.safetensors
[ ! -e fresh2 ] && ok || bad "a failed first import (missing input) left a store"
printf '{"a":1}\nnot json\n' >bad.jsonl
expect_fail 1 json -- "$PTC" dataset ingest --store fresh3 --name d --format jsonl bad.jsonl
[ ! -e fresh3 ] && ok || bad "a failed first ingest left $(find fresh3 | tr '\n' ' ')"
# ... but a failure in an existing store removes nothing of it
expect_fail 1 mystery -- "$PTC" import --store st --config tp=1 --rules llama norule.safetensors
"$PTC" verify --store st --all >/dev/null && ok || bad "existing store damaged"
# ... and an existing empty store (no version yet) is an existing store: kept
"$PTC" dataset ingest --store keep --name d --format lines l.txt >/dev/null
expect_fail 1 mystery -- "$PTC" import --store keep --config tp=1 --rules llama norule.safetensors
"$PTC" dataset info --store keep --name d >/dev/null && ok || bad "a store with a dataset was removed"

# ---- info escapes names -------------------------------------------------------------
python3 - <<'PY'
import json, struct
names = ["evil\x1b[2J\x1b[31mred\x07", "line\nbreak", "back\\slash", "bidi\u202egnp.exe",
         "c1\u009bcsi", "plain.weight"]
hdr = {}
off = 0
for n in names:
    hdr[n] = {"dtype": "F32", "shape": [1], "data_offsets": [off, off + 4]}
    off += 4
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open("names.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * off)
PY
"$PTC" import --store sn --config tp=1 --rules none names.safetensors >/dev/null
"$PTC" info --store sn >"$T/info.txt"
if python3 - "$T/info.txt" <<'PY'; then ok; else bad "info prints raw names: $(od -c "$T/info.txt" | head -20)"; fi
import sys
t = open(sys.argv[1], "rb").read()
bad = [c for c in t if (c < 0x20 and c != 0x0a) or c == 0x7f]
assert not bad, bad
s = t.decode()
for ch in ("\u202e", "\u009b"):
    assert ch not in s, repr(ch)
lines = s.splitlines()
# one line per tensor after the two header lines: the newline in a name did not split one
assert len(lines) == 2 + 6, lines
assert "evil\\x1b[2J\\x1b[31mred\\x07" in s, s
assert "line\\x0abreak" in s and "back\\x5cslash" in s, s
assert "bidi\\u202egnp.exe" in s and "c1\\u009bcsi" in s and "plain.weight" in s, s
PY
# the JSON output keeps the exact names
"$PTC" info --store sn --json >"$T/info.json"
if python3 - "$T/info.json" <<'PY'; then ok; else bad "info --json names"; fi
import json, sys
o = json.load(open(sys.argv[1]))
names = {t["name"] for v in o["versions"] for t in v["tensors"]}
assert "evil\x1b[2J\x1b[31mred\x07" in names and "line\nbreak" in names, names
PY
finish
