#!/usr/bin/env bash
# The smaller store and format items of issue 33 (item 9):
#  - a failed ptc export --config ... --out-dir D leaves no rank file of it
#    in D (nor a staging file), and rank files of an earlier export stay;
#  - ptc dataset audit --start X with X past the dataset is an error;
#  - a token ingest of inputs without a single token is an error;
#  - a sharded export's index records total_parameters (and total_size);
#  - per-rank import of grouped-query rank files (an export under tp=4 of a
#    model with 2 KV heads) takes each tensor's placement from the file's
#    ptc.layout: no config.json needed, the model comes back byte for byte.
. "$(dirname "$0")/lib.sh"
cd "$T"
"$PTC" synth --preset llama-tiny --seed 9 --out m.safetensors
printf '{"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}\n' >config.json
"$PTC" import --store st --config tp=2 --rules llama --hf-config config.json m.safetensors >/dev/null

# ---- a failed export leaves nothing ---------------------------------------------------
"$PTC" export --store st --config tp=2 --out-dir d
sum_before=$(cat d/rank-*.safetensors | sha256sum)
cp -r st c
python3 - c <<'PY'    # a bit of rank 1's pack file rots
import sys
p = sys.argv[1] + "/packs/v1/rank-1.pack"
with open(p, "r+b") as f:
    f.seek(200); b = f.read(1)[0]; f.seek(200); f.write(bytes([b ^ 1]))
PY
expect_fail 1 checksum -- "$PTC" export --store c --config tp=2 --out-dir d
if [ "$(cat d/rank-*.safetensors | sha256sum)" = "$sum_before" ] && [ "$(ls -A d | wc -l)" = 2 ]; then
    ok; else bad "a failed export changed D: $(ls -A d)"; fi
expect_fail 1 checksum -- "$PTC" export --store c --config tp=2 --out-dir e
if [ -z "$(ls -A e)" ]; then ok; else bad "a failed export left $(ls -A e)"; fi

# ---- audit start, empty token ingest -------------------------------------------------------
seq 1 10 >l.txt
"$PTC" dataset ingest --store st --name ten --format lines l.txt >/dev/null
expect_fail 1 "start 11" "past" -- "$PTC" dataset audit --store st --name ten --seed 1 --epoch 0 \
    --policy drop-last --batch 2 --dp 1 --start 11
if "$PTC" dataset audit --store st --name ten --seed 1 --epoch 0 --policy drop-last --batch 2 \
    --dp 1 --start 10 >/dev/null; then ok; else bad "audit --start N (the end) refused"; fi
: >empty.bin
expect_fail 1 "no tokens" -- "$PTC" dataset ingest --store st --name tok --format tokens:u16:8 empty.bin
expect_fail 1 "no dataset 'tok'" -- "$PTC" dataset info --store st --name tok

# ---- sharded export index ---------------------------------------------------------------------
"$PTC" export --store st --out-dir sh --max-shard-size 100KB
python3 - sh m.safetensors <<'PY' && ok || bad "index metadata"
import json, struct, sys
idx = json.load(open(sys.argv[1] + "/model.safetensors.index.json"))["metadata"]
h = open(sys.argv[2], "rb")
n = struct.unpack("<Q", h.read(8))[0]
hdr = json.loads(h.read(n))
params = size = 0
for k, v in hdr.items():
    if k == "__metadata__":
        continue
    el = 1
    for d in v["shape"]:
        el *= d
    params += el
    size += v["data_offsets"][1] - v["data_offsets"][0]
assert idx == {"total_parameters": params, "total_size": size}, (idx, params, size)
PY

# ---- per-rank import of GQA rank files ------------------------------------------------------
"$PTC" export --store st --config tp=4 --out-dir r4
mkdir in && cp r4/rank-*.safetensors in/   # no config.json beside them
"$PTC" import --store st4 --config tp=4 --rules llama in/rank-0.safetensors in/rank-1.safetensors \
    in/rank-2.safetensors in/rank-3.safetensors >/dev/null
"$PTC" export --store st4 --out back.safetensors
if cmp -s back.safetensors m.safetensors; then ok; else bad "GQA rank files did not come back"; fi
if "$PTC" info --store st4 | grep -q "k_proj.weight .*kv_heads=2"; then ok; else
    bad "the recorded GQA placement was not kept"; fi
finish
