#!/usr/bin/env bash
# A store written before metadata checksums (format 1, tests/cli/data/
# store-format1.tar.gz: two versions and a dataset, made by ptc 0.1.0 of
# d544c44) still opens: info, export and verify read it and say that its
# metadata is unchecked; its next write upgrades it to format 2 in the same
# transaction (docs/format.md §2.5), after which every answer is the same,
# the metadata is checked, and a changed record is refused.
. "$(dirname "$0")/lib.sh"
cd "$T"
tar xzf "$PTC_SRC/tests/cli/data/store-format1.tar.gz"   # store/ and m.safetensors
fmt() { "$PTC" info --store store --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["format"], j["metadata_checked"])'; }
if [ "$(fmt)" = "1 False" ]; then ok; else bad "format 1 store reported as: $(fmt)"; fi
"$PTC" export --store store --out e1.safetensors
if cmp -s e1.safetensors m.safetensors; then ok; else bad "export of the format-1 store differs"; fi
"$PTC" verify --store store --all >v.out
if grep -q "all versions and datasets verified" v.out && grep -q "no checksums" v.out; then ok; else
    bad "verify of a format-1 store: $(cat v.out)"; fi
if "$PTC" verify --store store --all --json | grep -q '"metadata_checked":false'; then ok; else
    bad "verify --json does not say unchecked"; fi
"$PTC" versions --store store --json >vs1.json
"$PTC" dataset ls --store store --json >ds1.json

# the next write upgrades it
printf 'x\ny\n' >l.txt
"$PTC" dataset ingest --store store --name more --format lines l.txt >/dev/null
if [ "$(fmt)" = "2 True" ]; then ok; else bad "not upgraded by a write: $(fmt)"; fi
"$PTC" versions --store store --json >vs2.json
if cmp -s vs1.json vs2.json; then ok; else bad "the versions changed in the upgrade"; fi
"$PTC" export --store store --out e2.safetensors
"$PTC" export --store store --version 1 --out e3.safetensors
if cmp -s e2.safetensors m.safetensors && cmp -s e3.safetensors m.safetensors; then ok; else
    bad "exports after the upgrade differ"; fi
if "$PTC" verify --store store --all >v2.out && ! grep -q "no checksums" v2.out; then ok; else
    bad "verify after the upgrade: $(cat v2.out)"; fi
python3 - ds1.json <<'PY' || bad "the dataset changed in the upgrade"
import json, subprocess, sys, os
old = json.load(open(sys.argv[1]))["datasets"]
new = json.loads(subprocess.check_output([os.environ["PTC"], "dataset", "ls", "--store", "store", "--json"]))["datasets"]
assert [d for d in new if d["name"] != "more"] == old, (old, new)
PY
ok
# checked now: the config text of a version record, changed, is refused
python3 - store/meta/data.mdb <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
i = b.find(b"dp=1,tp=2,pp=1")
while i >= 0:
    b[i + 3] ^= 1          # tp -> tq
    i = b.find(b"dp=1,tp=2,pp=1", i + 1)
open(p, "wb").write(b)
PY
expect_fail 1 "corrupt metadata" -- "$PTC" versions --store store
finish
