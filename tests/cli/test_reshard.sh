#!/usr/bin/env bash
# ptc reshard chains: every configuration with dp*tp*pp <= 8 (zero 0/1 and
# layers= overrides) is a target at least once, from varied sources, on
# llama-tiny (with optimizer state) and gpt2-tiny (fused c_attn, tied
# embeddings). After each step: the whole export is byte-identical to the
# original and the per-rank exports equal an independent slicing
# (check_rank_files.py). ptc plan figures are consistent. The fast subset
# runs by default; PTC_TEST_FULL=1 (test_reshard_all.sh, label slow) runs
# every configuration.
. "$(dirname "$0")/lib.sh"
check="python3 $PTC_SRC/tests/cli/check_rank_files.py"

"$PTC" synth --preset llama-tiny --seed 5 --optim --out "$T/llama.safetensors"
"$PTC" synth --preset gpt2-tiny --seed 6 --out "$T/gpt2.safetensors"

configs() { # layer-count
    local L=$1
    if [ "${PTC_TEST_FULL:-0}" = 1 ]; then
        for z in 0 1; do for pp in 1 2 3 4 5 6 7 8; do for tp in 1 2 3 4 5 6 7 8; do
            for dp in 1 2 3 4 5 6 7 8; do
                [ $((dp * tp * pp)) -le 8 ] && echo "dp=$dp,tp=$tp,pp=$pp,zero=$z"
            done; done; done; done
        if [ "$L" = 3 ]; then
            echo "tp=2,pp=2,layers=1:2"; echo "dp=2,pp=3,zero=1,layers=0:2:1"; echo "pp=2,layers=3:0"
        else
            echo "tp=2,pp=2,layers=1:1"; echo "dp=2,pp=3,zero=1,layers=0:2:0"; echo "pp=2,layers=0:2"
        fi
    else
        printf '%s\n' dp=2,tp=3,pp=1 tp=2,pp=2 dp=2,tp=2,pp=2,zero=1 tp=8 \
            "dp=3,tp=1,pp=2,zero=1,layers=$((L - 1)):1" pp=3 dp=4,tp=2,zero=1 tp=1,pp=1
    fi
}

chain() { # model preset first-config layers
    local model=$1 preset=$2 s="$T/store-$1" prev=$3 n=1 L=$4
    "$PTC" import --store "$s" --config "$3" --rules "$preset" "$T/$model.safetensors" >/dev/null
    for cfg in $(configs "$L"); do
        "$PTC" plan --store "$s" --to "$cfg" --hosts 2 --json >"$T/plan.json"
        if python3 - "$T/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["bytes_network"] == p["bytes_network_lower_bound"], p
assert p["bytes_total"] == p["bytes_reused"] + p["bytes_local_copy"] + p["bytes_network"], p
assert sum(h["bytes_in"] for h in p["per_host"]) == p["bytes_network"], p
PY
        then ok; else bad "$model $prev -> $cfg: plan figures"; fi
        out=$("$PTC" reshard --store "$s" --to "$cfg" --threads 2)
        n=$((n + 1))
        if [ "$(echo "$out" | head -1)" = "version $n" ]; then ok; else bad "$model -> $cfg: '$out'"; fi
        "$PTC" export --store "$s" --out "$T/whole.safetensors"
        if cmp -s "$T/$model.safetensors" "$T/whole.safetensors"; then ok; else bad "$model $prev -> $cfg: whole export differs"; fi
        rm -rf "$T/ranks"
        "$PTC" export --store "$s" --config "$cfg" --out-dir "$T/ranks"
        if $check "$T/$model.safetensors" "$cfg" "$preset" "$T/ranks" >/dev/null; then ok; else bad "$model $prev -> $cfg: rank files"; fi
        prev=$cfg
    done
    if "$PTC" verify --store "$s" --all >/dev/null; then ok; else bad "$model: verify --all"; fi
}

chain llama llama tp=2,pp=2 3
chain gpt2 gpt2 dp=2,tp=3,pp=1 2

# Resharding to the same configuration copies nothing: every shard reused.
s="$T/store-llama"
cfg=$("$PTC" versions --store "$s" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["versions"][-1]["config"])')
"$PTC" reshard --store "$s" --to "$cfg" --json >"$T/same.json"
if python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["bytes_written"]==0 and r["shards_written"]==0 and r["bytes_reused"]==r["bytes_total"], r' "$T/same.json"; then ok; else bad "same-config reshard wrote data: $(cat "$T/same.json")"; fi

# --dtype BF16 converts floating-point tensors; the whole export equals an
# export with --dtype BF16 of the original.
"$PTC" reshard --store "$s" --version 1 --to tp=4 --dtype BF16 >/dev/null
"$PTC" export --store "$s" --out "$T/bf16a.safetensors"
"$PTC" export --store "$s" --version 1 --dtype BF16 --out "$T/bf16b.safetensors"
if cmp -s "$T/bf16a.safetensors" "$T/bf16b.safetensors"; then ok; else bad "--dtype BF16 differs from export --dtype BF16"; fi

# --step labels the version; --version picks the source.
"$PTC" reshard --store "$s" --version 2 --to pp=2 --step 77 --json >"$T/st.json"
v=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$T/st.json")
step=$("$PTC" versions --store "$s" --json | python3 -c "import json,sys; print([x for x in json.load(sys.stdin)['versions'] if x['version']==$v][0]['step'])")
if [ "$step" = 77 ]; then ok; else bad "--step: '$step'"; fi

# Bad input: a layers= list the model cannot take, a missing version, a
# locked store, bad options.
expect_fail 1 layers -- "$PTC" reshard --store "$s" --to pp=2,layers=1:1
expect_fail 1 layers -- "$PTC" plan --store "$s" --to pp=2,layers=5:5
expect_fail 1 version 99 -- "$PTC" reshard --store "$s" --version 99 --to tp=2
expect_fail 1 version 99 -- "$PTC" plan --store "$s" --version 99 --to tp=2
expect_fail 2 to -- "$PTC" reshard --store "$s"
expect_fail 2 dtype -- "$PTC" reshard --store "$s" --to tp=2 --dtype I8
expect_fail 2 hosts -- "$PTC" plan --store "$s" --to tp=2 --hosts 0
expect_fail 2 "" -- "$PTC" plan --store "$s" --to tp=0
expect_fail 1 store -- "$PTC" reshard --store "$T/nowhere" --to tp=2
finish
