#!/usr/bin/env bash
# Import synthetic models under several configurations (uneven splits, fused
# blocks, tied embeddings on first+last, zero=1 with optimizer state, layers=
# overrides); whole exports must be byte-identical to the input and per-rank
# exports must equal an independent slicing (check_rank_files.py).
. "$(dirname "$0")/lib.sh"
check="python3 $PTC_SRC/tests/cli/check_rank_files.py"

"$PTC" synth --preset llama-tiny --seed 3 --optim --out "$T/llama.safetensors"
"$PTC" synth --preset gpt2-tiny --seed 4 --out "$T/gpt2.safetensors"

run_case() { # model preset stored-config other-config
    local model=$1 preset=$2 cfg=$3 other=$4 s="$T/store-$RANDOM"
    "$PTC" import --store "$s" --config "$cfg" --rules "$preset" --compress zstd:3 \
        "$T/$model.safetensors" >/dev/null
    "$PTC" export --store "$s" --out "$T/whole.safetensors"
    if cmp -s "$T/$model.safetensors" "$T/whole.safetensors"; then ok; else bad "$model $cfg: whole export differs"; fi
    rm -rf "$T/ranks" "$T/other"
    "$PTC" export --store "$s" --config "$cfg" --out-dir "$T/ranks"
    if $check "$T/$model.safetensors" "$cfg" "$preset" "$T/ranks"; then ok; else bad "$model $cfg: rank files"; fi
    "$PTC" export --store "$s" --config "$other" --out-dir "$T/other"
    if $check "$T/$model.safetensors" "$other" "$preset" "$T/other"; then ok; else bad "$model $cfg -> $other: rank files"; fi
    local last=$(( $(ls "$T/ranks" | wc -l) - 1 ))
    "$PTC" export --store "$s" --rank "$last" --out "$T/rl.safetensors"
    if cmp -s "$T/rl.safetensors" "$T/ranks/rank-$last.safetensors"; then ok; else bad "$model $cfg: --rank $last differs from --config"; fi
    if "$PTC" verify --store "$s" >/dev/null; then ok; else bad "$model $cfg: verify"; fi
    rm -rf "$s"
}

run_case llama llama dp=1,tp=1,pp=1 dp=2,tp=3,pp=1
run_case llama llama dp=2,tp=3,pp=1 tp=2,pp=3
run_case llama llama tp=2,pp=3 dp=2,tp=2,pp=2,zero=1
run_case llama llama dp=2,tp=2,pp=2,zero=1 dp=3,tp=1,pp=2,zero=1,layers=1:2
run_case llama llama dp=2,tp=1,pp=2,layers=2:1 dp=1,tp=4,pp=1
run_case gpt2 gpt2 dp=1,tp=2,pp=2 dp=2,tp=3,pp=2
run_case gpt2 gpt2 dp=2,tp=3,pp=1 dp=1,tp=1,pp=2

# Path-form configs are accepted too, and zstd and raw stores export the same.
s="$T/store-path"
"$PTC" import --store "$s" --config dp2-tp2-pp1 --rules llama "$T/llama.safetensors" >/dev/null
"$PTC" export --store "$s" --out "$T/whole.safetensors"
if cmp -s "$T/llama.safetensors" "$T/whole.safetensors"; then ok; else bad "path-form config"; fi

# Versions count up; --version selects; info --json is one object.
"$PTC" import --store "$s" --config tp=1 --rules llama --step 20 "$T/llama.safetensors" >/dev/null
n=$("$PTC" versions --store "$s" --json | python3 -c 'import json,sys; v=json.load(sys.stdin)["versions"]; print(",".join(str(x["version"]) for x in v))')
if [ "$n" = "1,2" ]; then ok; else bad "versions are '$n', want 1,2"; fi
if "$PTC" info --store "$s" --version 1 --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["datasets"] == [] and d["versions"][0]["version"] == 1'
then ok; else bad "info --json"; fi

# --dtype converts floating-point tensors on export.
"$PTC" export --store "$s" --dtype BF16 --out "$T/bf16.safetensors"
if python3 - "$T/bf16.safetensors" <<'PY'
import json, struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
h.pop("__metadata__", None)
assert h and all(t["dtype"] == "BF16" for t in h.values())
PY
then ok; else bad "--dtype BF16"; fi

finish
