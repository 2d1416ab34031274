#!/usr/bin/env bash
# ptc suggest: usage errors, bad input as one-line errors, --json keys and
# order, --exhaustive agreeing with descent, "no configuration fits" with
# the smallest shortfall, a stored model (--store), --top.
. "$(dirname "$0")/lib.sh"
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
GPT=gpt:layers=24,hidden=2304,heads=24,vocab=51200,seq=2048

"$PTC" suggest --help >"$T/h" && grep -q "usage: ptc suggest" "$T/h" && grep -q -- "--exhaustive" "$T/h" && ok || bad help

# usage errors (exit 2, one line)
expect_fail 2 -- "$PTC" suggest
expect_fail 2 model -- "$PTC" suggest --gpus 8 --global-batch 8
expect_fail 2 either -- "$PTC" suggest --model "$GPT" --store "$T/s" --gpus 8 --global-batch 8
expect_fail 2 required -- "$PTC" suggest --model "$GPT" --global-batch 8
expect_fail 2 gpus -- "$PTC" suggest --model "$GPT" --gpus 0 --global-batch 8
expect_fail 2 gpus -- "$PTC" suggest --model "$GPT" --gpus -3 --global-batch 8
expect_fail 2 global-batch -- "$PTC" suggest --model "$GPT" --gpus 8 --global-batch 0
expect_fail 2 mem -- "$PTC" suggest --model "$GPT" --gpus 8 --global-batch 8 --mem -1
expect_fail 2 inter-bw -- "$PTC" suggest --model "$GPT" --gpus 8 --global-batch 8 --inter-bw x
expect_fail 2 unknown -- "$PTC" suggest --model "$GPT" --gpus 8 --global-batch 8 --bogus
expect_fail 2 version -- "$PTC" suggest --model "$GPT" --version 2 --gpus 8 --global-batch 8
# a spec whose heads do not divide hidden, unknown keys, families
expect_fail 2 heads "must divide hidden" -- "$PTC" suggest --model gpt:layers=2,hidden=100,heads=3,vocab=10,seq=8 --gpus 8 --global-batch 8
expect_fail 2 unknown colour -- "$PTC" suggest --model gpt:layers=2,hidden=96,heads=3,vocab=10,seq=8,colour=1 --gpus 8 --global-batch 8
expect_fail 2 seq -- "$PTC" suggest --model gpt:layers=2,hidden=96,heads=3,vocab=10 --gpus 8 --global-batch 8
expect_fail 2 expected -- "$PTC" suggest --model bert:layers=2 --gpus 8 --global-batch 8
# no valid configuration at all: 7 GPUs, batch 4, 2 layers, 4 heads
expect_fail 1 "no valid configuration" -- "$PTC" suggest --model gpt:layers=2,hidden=64,heads=4,vocab=64,seq=8 --gpus 7 --global-batch 4
# a store that is not there
expect_fail 1 store -- "$PTC" suggest --store "$T/nothing" --gpus 8 --global-batch 8

# --json: one object, configs best first with the documented keys
"$PTC" suggest --model "$GPT" --gpus 32 --global-batch 512 --top 4 --json >"$T/j" && ok || bad "json run"
[ "$(wc -l <"$T/j")" = 1 ] && ok || bad "json is not one line"
[ "$(jget "$T/j" 'len(d["configs"])')" = 4 ] && ok || bad "--top 4"
for k in dp tp pp zero schedule microbatches step_time_s memory_bytes breakdown mb_size; do
    [ "$(jget "$T/j" "'$k' in d['configs'][0]")" = True ] && ok || bad "configs[0] lacks $k"
done
for k in compute_s bubble_s tp_comm_s dp_comm_s pp_comm_s; do
    [ "$(jget "$T/j" "'$k' in d['configs'][0]['breakdown']")" = True ] && ok || bad "breakdown lacks $k"
done
[ "$(jget "$T/j" 'all(a["step_time_s"] <= b["step_time_s"] * (1 + 1e-9) for a, b in zip(d["configs"], d["configs"][1:]))')" = True ] && ok || bad "configs not best first"
[ "$(jget "$T/j" 'd["configs"][0]["dp"] * d["configs"][0]["tp"] * d["configs"][0]["pp"]')" = 32 ] && ok || bad "dp*tp*pp != gpus"
[ "$(jget "$T/j" 'd["configs"][0]["dp"] * d["configs"][0]["microbatches"] * d["configs"][0]["mb_size"]')" = 512 ] && ok || bad "dp*M*mb != batch"
[ "$(jget "$T/j" 'abs(sum(d["configs"][0]["breakdown"].values()) - d["configs"][0]["step_time_s"]) < 1e-9 * d["configs"][0]["step_time_s"]')" = True ] && ok || bad "breakdown does not add up"
[ "$(jget "$T/j" 'd["search"]["method"]')" = descent ] && ok || bad "method"
[ "$(jget "$T/j" 'd["no_fit"]')" = None ] && ok || bad "no_fit should be null"
[ "$(jget "$T/j" 'd["configs"][0]["tp"] <= 8')" = True ] && ok || bad "tp crosses hosts"

# --exhaustive finds the same best step time here (within 1%)
"$PTC" suggest --model "$GPT" --gpus 32 --global-batch 512 --exhaustive --json >"$T/x" && ok || bad "exhaustive run"
[ "$(jget "$T/x" 'd["search"]["method"]')" = exhaustive ] && ok || bad "exhaustive method"
a=$(jget "$T/j" 'd["configs"][0]["step_time_s"]'); b=$(jget "$T/x" 'd["configs"][0]["step_time_s"]')
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if a <= b*1.01 and b <= a*(1+1e-9) else 1)" "$a" "$b" && ok || bad "descent $a vs exhaustive $b"
[ "$(jget "$T/x" 'd["search"]["evaluated"] >= 100')" = True ] && ok || bad "exhaustive evaluated few"

# rejected for memory: at 8 GiB the fastest configurations do not fit
"$PTC" suggest --model "$GPT" --gpus 32 --global-batch 512 --mem 8 --json >"$T/r" && ok || bad "8 GiB run"
[ "$(jget "$T/r" 'all(c["memory_bytes"] <= 8 * 2**30 for c in d["configs"])')" = True ] && ok || bad "a config over --mem"
[ "$(jget "$T/r" 'len(d["rejected_for_memory"]) > 0 and all(not c["fits"] and c["shortfall_bytes"] > 0 and c["step_time_s"] < d["configs"][0]["step_time_s"] for c in d["rejected_for_memory"])')" = True ] && ok || bad "rejected entries"
"$PTC" suggest --model "$GPT" --gpus 32 --global-batch 512 --mem 8 >"$T/rt" && ok || bad "8 GiB text"
grep -q "rejected for memory" "$T/rt" && grep -q "short" "$T/rt" && ok || bad "text lacks the rejected list"

# nothing fits: exit 1, one line with the smallest shortfall; JSON says so too
BIG=gpt:layers=128,hidden=25600,heads=160,vocab=51200,seq=2048
expect_fail 1 "no configuration fits" "smallest shortfall" GiB -- "$PTC" suggest --model "$BIG" --gpus 8 --global-batch 8
set +e; "$PTC" suggest --model "$BIG" --gpus 8 --global-batch 8 --json >"$T/n" 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] && ok || bad "no fit json exit $rc"
[ "$(jget "$T/n" 'len(d["configs"]) == 0 and d["no_fit"]["shortfall_bytes"] > 0')" = True ] && ok || bad "no_fit json"
[ "$(jget "$T/n" 'd["search"]["method"]')" = exhaustive ] && ok || bad "no fit must be proven by trying everything"

# the demo model (mlp) and a stored model (gpt2 and llama presets)
"$PTC" suggest --model mlp:layers=8,hidden=64,vocab=32,tokens=16 --gpus 4 --gpus-per-host 4 --tflops 0.01 --global-batch 16 --json >"$T/m" && ok || bad "mlp"
[ "$(jget "$T/m" 'd["model"]["source"]')" = mlp ] && ok || bad "mlp source"
"$PTC" synth --preset gpt2-tiny --seed 3 --out "$T/g.safetensors" >/dev/null
"$PTC" import --store "$T/s" --config dp=1 --rules gpt2 "$T/g.safetensors" >/dev/null
"$PTC" suggest --store "$T/s" --gpus 4 --gpus-per-host 2 --global-batch 16 --json >"$T/s.json" && ok || bad "store"
[ "$(jget "$T/s.json" 'd["model"]["source"] == "store" and d["model"]["version"] == 1 and len(d["configs"]) > 0')" = True ] && ok || bad "store json"
"$PTC" suggest --store "$T/s" --version 1 --gpus 4 --global-batch 16 >"$T/s.txt" && grep -q "version 1" "$T/s.txt" && ok || bad "store --version"
expect_fail 1 "version 9" -- "$PTC" suggest --store "$T/s" --version 9 --gpus 4 --global-batch 16
"$PTC" synth --preset llama-tiny --seed 3 --out "$T/l.safetensors" >/dev/null
"$PTC" import --store "$T/s2" --config dp=1 --rules llama "$T/l.safetensors" >/dev/null
"$PTC" suggest --store "$T/s2" --gpus 8 --global-batch 32 --json >"$T/l.json" && ok || bad "llama store"
[ "$(jget "$T/l.json" 'd["model"]["seq_assumed"]')" = True ] && ok || bad "llama has no position table: seq assumed"
# the link latencies land in the cluster as given (us -> s)
"$PTC" suggest --model mlp:layers=8,hidden=64,vocab=32,tokens=16 --gpus 4 --global-batch 16 \
    --intra-lat 3 --inter-lat 7 --json >"$T/lat" && ok || bad "latency run"
[ "$(jget "$T/lat" 'd["cluster"]["intra_lat_s"] == 3e-6 and d["cluster"]["inter_lat_s"] == 7e-6')" = True ] \
    && ok || bad "--intra-lat/--inter-lat"
expect_fail 2 inter-lat positive -- "$PTC" suggest --model "$GPT" --gpus 8 --global-batch 8 --inter-lat 0
finish
