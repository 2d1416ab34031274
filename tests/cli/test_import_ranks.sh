#!/usr/bin/env bash
# Per-rank imports (issue 18 item 5): rank files exported under a config are
# imported back under that config and the whole model round-trips byte for
# byte; files without ptc.* metadata are identified by rank-<R> names or by
# order; wrong shapes, wrong configs and missing ranks are named errors; an
# index whose listed file is missing is an error naming the file.
. "$(dirname "$0")/lib.sh"

"$PTC" synth --preset llama-tiny --seed 5 --optim --out "$T/llama.safetensors"
"$PTC" synth --preset gpt2-tiny --seed 6 --out "$T/gpt2.safetensors"

roundtrip() { # model preset config
    local model=$1 preset=$2 cfg=$3 s="$T/s-$RANDOM" s2="$T/s2-$RANDOM"
    rm -rf "$T/d"
    "$PTC" import --store "$s" --config "$cfg" --rules "$preset" "$T/$model.safetensors" >/dev/null
    "$PTC" export --store "$s" --config "$cfg" --out-dir "$T/d"
    if "$PTC" import --store "$s2" --config "$cfg" --rules "$preset" "$T"/d/rank-*.safetensors >/dev/null; then ok
    else bad "$model $cfg: import of rank files failed"; return 0; fi
    "$PTC" export --store "$s2" --out "$T/back.safetensors"
    if cmp -s "$T/$model.safetensors" "$T/back.safetensors"; then ok; else bad "$model $cfg: whole export differs"; fi
    rm -rf "$T/d2"
    "$PTC" export --store "$s2" --config "$cfg" --out-dir "$T/d2"
    for f in "$T"/d/rank-*.safetensors; do
        if cmp -s "$f" "$T/d2/$(basename "$f")"; then ok; else bad "$model $cfg: $(basename "$f") differs"; fi
    done
    if "$PTC" verify --store "$s2" >/dev/null; then ok; else bad "$model $cfg: verify"; fi
}

roundtrip llama llama tp=2,pp=2
roundtrip llama llama dp=2,tp=3,pp=1
roundtrip llama llama dp=2,tp=2,pp=2,zero=1
roundtrip gpt2 gpt2 dp=1,tp=2,pp=2

# Rank files of another job: no ptc.* metadata (stripped), names rank-<R>
# (given out of order), or names that say nothing (file order decides).
s="$T/s-meta"
rm -rf "$T/d"
"$PTC" import --store "$s" --config tp=2,pp=2 --rules llama "$T/llama.safetensors" >/dev/null
"$PTC" export --store "$s" --config tp=2,pp=2 --out-dir "$T/d"
mkdir -p "$T/plain" "$T/order"
python3 - "$T/d" "$T/plain" "$T/order" <<'PY'
import json, struct, sys, os
src, plain, order = sys.argv[1:]
for r in range(4):
    b = open(f"{src}/rank-{r}.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h["__metadata__"] = {k: v for k, v in h["__metadata__"].items() if not k.startswith("ptc.")}
    hj = json.dumps(h, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    out = struct.pack("<Q", len(hj)) + hj + b[8 + n:]
    open(f"{plain}/rank-{r}.safetensors", "wb").write(out)
    open(f"{order}/job-{chr(ord('a') + r)}.safetensors", "wb").write(out)
    if r == 3:  # a bad copy: model.norm.weight (replicated on ranks 2, 3) one element short
        t = h["model.norm.weight"]
        es = {"F32": 4, "BF16": 2, "F16": 2}[t["dtype"]]
        t["shape"] = [t["shape"][0] - 1]
        b0, e0 = t["data_offsets"]
        data = bytearray(b[8 + n:])
        del data[e0 - es:e0]
        for k, v in h.items():
            if k != "__metadata__" and v["data_offsets"][0] >= e0:
                v["data_offsets"] = [v["data_offsets"][0] - es, v["data_offsets"][1] - es]
        t["data_offsets"] = [b0, e0 - es]
        hj = json.dumps(h, separators=(",", ":")).encode()
        hj += b" " * (-len(hj) % 8)
        os.makedirs(f"{plain}/../short", exist_ok=True)
        for q in range(3):
            os.system(f"cp {plain}/rank-{q}.safetensors {plain}/../short/")
        open(f"{plain}/../short/rank-3.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + bytes(data))
PY
"$PTC" export --store "$s" --out "$T/orig.safetensors"
for dir in plain order; do
    s2="$T/s-$dir"
    # shuffled order on the command line: rank-<R> names decide
    if [ $dir = plain ]; then files="$T/plain/rank-3.safetensors $T/plain/rank-1.safetensors $T/plain/rank-0.safetensors $T/plain/rank-2.safetensors"
    else files=$(ls "$T"/order/job-*.safetensors); fi
    if "$PTC" import --store "$s2" --config tp=2,pp=2 --rules llama $files >/dev/null; then ok
    else bad "$dir: import failed"; continue; fi
    "$PTC" export --store "$s2" --out "$T/b.safetensors"
    if cmp -s "$T/orig.safetensors" "$T/b.safetensors"; then ok; else bad "$dir: whole export differs"; fi
done

# Without ptc.* metadata, global shapes come from the rules: uneven splits,
# gpt2's fused c_attn blocks, dp replicas, zero-sharded optimizer state (1-D
# flat ranges: the shape is its parameter's).
strip() { # SRC-DIR DST-DIR: copies of the rank files without the ptc.* keys
    mkdir -p "$2"
    python3 - "$1" "$2" <<'PY'
import glob, json, os, struct, sys
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    b = open(f, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    h["__metadata__"] = {k: v for k, v in h["__metadata__"].items() if not k.startswith("ptc.")}
    hj = json.dumps(h, separators=(",", ":")).encode(); hj += b" " * (-len(hj) % 8)
    open(os.path.join(sys.argv[2], os.path.basename(f)), "wb").write(struct.pack("<Q", len(hj)) + hj + b[8 + n:])
PY
}
for case in gpt2:gpt2:dp=2,tp=3,pp=2 llama:llama:dp=2,tp=3,pp=2 llama:llama:tp=4 gpt2:gpt2:tp=4 \
    llama:llama:dp=2,zero=1 llama:llama:dp=3,tp=2,pp=2,zero=1; do
    model=${case%%:*} rest=${case#*:} preset=${rest%%:*} cfg=${rest#*:}
    rm -rf "$T/m" "$T/mp" "$T/ms" "$T/ms2"
    "$PTC" import --store "$T/ms" --config "$cfg" --rules "$preset" "$T/$model.safetensors" >/dev/null
    "$PTC" export --store "$T/ms" --config "$cfg" --out-dir "$T/m"
    strip "$T/m" "$T/mp"
    if "$PTC" import --store "$T/ms2" --config "$cfg" --rules "$preset" "$T"/mp/*.safetensors >/dev/null &&
        "$PTC" export --store "$T/ms2" --out "$T/b.safetensors" && cmp -s "$T/$model.safetensors" "$T/b.safetensors"
    then ok; else bad "$model $cfg without metadata: no byte-identical round trip"; fi
done

# Errors: a config other than the files', a missing rank, local shapes that
# do not fit the layout (files without metadata imported under tp=1,pp=4).
expect_fail 1 ptc.config tp=2 -- "$PTC" import --store "$T/e1" --config tp=4 --rules llama "$T"/d/rank-*.safetensors
expect_fail 1 "one file per rank" "4 ranks" -- "$PTC" import --store "$T/e2" --config tp=2,pp=2 --rules llama \
    "$T/d/rank-0.safetensors" "$T/d/rank-1.safetensors" "$T/d/rank-2.safetensors"
expect_fail 1 "lacks tensor" -- "$PTC" import --store "$T/e3" --config dp=1,tp=4,pp=1 --rules llama "$T"/plain/rank-*.safetensors
expect_fail 1 "local shape" model.norm.weight rank-3 -- "$PTC" import --store "$T/e6" --config tp=2,pp=2 --rules llama "$T"/short/rank-*.safetensors
expect_fail 1 "not on rank" -- "$PTC" import --store "$T/e4" --config tp=1,pp=4 --rules llama "$T"/plain/rank-*.safetensors
for e in e1 e2 e3 e4 e6; do [ -e "$T/$e/packs" ] && [ -n "$(ls "$T/$e/packs" 2>/dev/null)" ] && bad "$e: left a version" || ok; done

# An index whose listed file is missing: an error naming the file.
mkdir -p "$T/idx"
cp "$T/llama.safetensors" "$T/idx/model-00001-of-00002.safetensors"
python3 - "$T/idx" <<'PY'
import json, struct, sys
d = sys.argv[1]
b = open(f"{d}/model-00001-of-00002.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
names = [k for k in json.loads(b[8:8 + n]) if k != "__metadata__"]
wm = {k: "model-00001-of-00002.safetensors" for k in names}
wm["lm_head.extra"] = "model-00002-of-00002.safetensors"
json.dump({"metadata": {"total_size": 1}, "weight_map": wm}, open(f"{d}/model.safetensors.index.json", "w"))
PY
expect_fail 1 model-00002-of-00002.safetensors -- "$PTC" import --store "$T/e5" --config tp=1 --rules llama "$T/idx/model.safetensors.index.json"

# ptc export --max-shard-size / --params-only: usage errors and the shard files
expect_fail 2 max-shard-size -- "$PTC" export --store "$s" --max-shard-size 5XB --out-dir "$T/hf"
expect_fail 2 max-shard-size -- "$PTC" export --store "$s" --max-shard-size 5GB --out "$T/hf.safetensors"
expect_fail 2 params-only -- "$PTC" export --store "$s" --params-only --rank 0 --out "$T/hf.safetensors"
"$PTC" export --store "$s" --max-shard-size 100KiB --out-dir "$T/hf"
if python3 - "$T/hf" "$T/orig.safetensors" <<'PY'; then ok; else bad "sharded export"; fi
import json, os, struct, sys
d, orig = sys.argv[1:]
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
idx = json.load(open(f"{d}/model.safetensors.index.json"))
want = read(orig)
got = {}
for f in sorted(set(idx["weight_map"].values())):
    part = read(f"{d}/{f}")
    assert len(part) == 1 or sum(map(len, part.values())) <= 100 * 1024, f
    for k in part: assert idx["weight_map"][k] == f
    got.update(part)
assert got == want and idx["metadata"]["total_size"] == sum(map(len, want.values()))
PY

finish
