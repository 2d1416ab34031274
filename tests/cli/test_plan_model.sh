#!/usr/bin/env bash
# ptc plan from shapes alone: --model SPEC (figures and the predicted move
# time against closed forms), --optim, --store with --from (the same figures
# as a store imported under that configuration), --net, usage errors; and
# ptc suggest --from (scores, order, the configuration it starts from).
. "$(dirname "$0")/lib.sh"
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
MLP=mlp:layers=2,hidden=8,vocab=16
GPT=gpt:layers=2,hidden=16,heads=2,vocab=32,seq=8

"$PTC" plan --help >"$T/h" && grep -q -- "--model SPEC" "$T/h" && grep -q -- "--net SPEC" "$T/h" \
    && ok || bad help

# The mlp spec, F32, 16 tensors: embedding [16,8]; per layer a LayerNorm (2 x 8), up
# [32,8] + 32, down [8,32] + 8; final norm 2 x 8; head [16,8]: 1408
# elements, 5632 bytes. dp=1 -> dp=2, one rank per host: host 1 needs all
# of it over the network, rank 0 keeps its shards.
"$PTC" plan --model $MLP --from dp=1 --to dp=2 --hosts 1 --json >"$T/a" && ok || bad "mlp plan"
for kv in bytes_total=11264 bytes_reused=5632 bytes_network=5632 \
          bytes_network_lower_bound=5632 max_rank_send=5632 max_rank_recv=5632 hosts=2 \
          bytes_local_copy=0 tensors=16; do
    k=${kv%=*} v=${kv#*=}
    [ "$(jget "$T/a" "d['$k']")" = "$v" ] && ok || bad "mlp $k = $(jget "$T/a" "d['$k']"), want $v"
done
[ "$(jget "$T/a" "d['model']")" = "$MLP" ] && ok || bad "model key"
# the link model: 5632 bytes over one GPU's 25 GB/s inter-host link, plus 5 us
[ "$(jget "$T/a" "abs(d['predicted_move_seconds'] - (5632/25e9 + 5e-6)) < 1e-15")" = True ] \
    && ok || bad "predicted move $(jget "$T/a" "d['predicted_move_seconds']")"
[ "$(jget "$T/a" "d['busiest_host']")" = 0 ] && ok || bad "busiest host"
"$PTC" plan --model $MLP --from dp=1 --to dp=2 --hosts 1 --net inter-bw=1,inter-lat=0 --json >"$T/b"
[ "$(jget "$T/b" "abs(d['predicted_move_seconds'] - 5632e-9) < 1e-18")" = True ] && ok \
    || bad "--net inter-bw=1: $(jget "$T/b" "d['predicted_move_seconds']")"
# one host: the copy of rank 1 goes over the intra-host link (2 GPUs)
"$PTC" plan --model $MLP --from dp=1 --to dp=2 --net intra-bw=1,intra-lat=0 --json >"$T/c"
[ "$(jget "$T/c" "(d['bytes_network'], d['bytes_host_copy'], d['per_host'][0]['bytes_copy'])")" \
    = "(0, 5632, 5632)" ] && ok || bad "one host copies"
[ "$(jget "$T/c" "abs(d['predicted_copy_seconds'] - 5632e-9/2) < 1e-18")" = True ] && ok \
    || bad "copy time $(jget "$T/c" "d['predicted_copy_seconds']")"
# --optim: AdamW's two fp32 moments per parameter, so three times the bytes
"$PTC" plan --model $MLP --optim --from dp=1 --to dp=2 --hosts 1 --json >"$T/o"
[ "$(jget "$T/o" "(d['tensors'], d['bytes_network'])")" = "(48, 16896)" ] && ok \
    || bad "--optim $(jget "$T/o" "(d['tensors'], d['bytes_network'])")"
# zero=1 shards the moments only: dp=2,zero=1 holds the parameters twice
# and the moments once
"$PTC" plan --model $MLP --optim --from dp=1 --to dp=2,zero=1 --json >"$T/z"
[ "$(jget "$T/z" "d['bytes_total']")" = $((2 * 5632 + 2 * 5632)) ] && ok \
    || bad "zero=1 total $(jget "$T/z" "d['bytes_total']")"

# The gpt spec, BF16: 2 x 3280 layer elements, embedding 512, positions
# 128, final norm 32, output 512: 7744 elements, 15488 bytes.
"$PTC" plan --model $GPT --from tp=1 --to dp=2 --json >"$T/g"
[ "$(jget "$T/g" "(d['bytes_total'], d['bytes_reused'], d['bytes_host_copy'])")" \
    = "(30976, 15488, 15488)" ] && ok || bad "gpt $(jget "$T/g" "(d['bytes_total'], d['bytes_reused'])")"
# tp=2 -> tp=4 over 2 ranks per host: the network bytes are the lower bound
"$PTC" plan --model $GPT --from tp=2,pp=2 --to dp=2,tp=4 --hosts 2 --json >"$T/g2"
[ "$(jget "$T/g2" "d['bytes_network'] == d['bytes_network_lower_bound'] > 0")" = True ] && ok \
    || bad "gpt network = lower bound"
[ "$(jget "$T/g2" "d['bytes_total'] == d['bytes_reused'] + d['bytes_local_copy'] + d['bytes_network']")" \
    = True ] && ok || bad "gpt figures add up"
# the text output names the prediction
"$PTC" plan --model $GPT --from tp=2 --to tp=1 >"$T/txt" && grep -q "predicted_move_seconds" "$T/txt" \
    && ok || bad "text output"

# --store --from: a stored version's shapes planned from another
# configuration give the figures of a store imported under it
"$PTC" synth --preset llama-tiny --seed 3 --out "$T/m.safetensors" >/dev/null
"$PTC" import --store "$T/st1" --config tp=2 --rules llama "$T/m.safetensors" >/dev/null
"$PTC" import --store "$T/st2" --config dp=2,pp=3 --rules llama "$T/m.safetensors" >/dev/null
"$PTC" plan --store "$T/st1" --from dp=2,pp=3 --to tp=4,pp=2 --hosts 2 --json >"$T/p1"
"$PTC" plan --store "$T/st2" --to tp=4,pp=2 --hosts 2 --json >"$T/p2"
same=$(python3 -c "
import json,sys
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
for d in (a, b):
    d.pop('plan_seconds')
print(a == b)" "$T/p1" "$T/p2")
[ "$same" = True ] && ok || bad "--store --from differs from a store imported so"
[ "$(jget "$T/p1" "d['from']")" = "dp=2,tp=1,pp=3" ] && ok || bad "from key"

# usage errors and bad input: one line, exit 2 (1 for a missing store)
expect_fail 2 required -- "$PTC" plan --model $MLP --from dp=1
expect_fail 2 either -- "$PTC" plan --to dp=2
expect_fail 2 either -- "$PTC" plan --model $MLP --store "$T/st1" --from dp=1 --to dp=2
expect_fail 2 from -- "$PTC" plan --model $MLP --to dp=2
expect_fail 2 optim -- "$PTC" plan --store "$T/st1" --optim --to dp=2
expect_fail 2 version -- "$PTC" plan --model $MLP --version 1 --from dp=1 --to dp=2
expect_fail 2 model -- "$PTC" plan --model bert:layers=2 --from dp=1 --to dp=2
expect_fail 2 from -- "$PTC" plan --model $MLP --from dp=0 --to dp=2
expect_fail 2 net unknown colour -- "$PTC" plan --model $MLP --from dp=1 --to dp=2 --net colour=1
expect_fail 2 net inter-bw positive -- "$PTC" plan --model $MLP --from dp=1 --to dp=2 --net inter-bw=0
expect_fail 2 net intra-bw -- "$PTC" plan --model $MLP --from dp=1 --to dp=2 --net intra-bw=fast
expect_fail 2 net key=value -- "$PTC" plan --model $MLP --from dp=1 --to dp=2 --net inter-bw
expect_fail 2 net -- "$PTC" plan --model $MLP --from dp=1 --to dp=2 --net inter-bw=1,
expect_fail 1 store -- "$PTC" plan --store "$T/nothing" --to dp=2
# a configuration the model cannot take: more stages than layers is fine,
# a layers= map that does not sum to the layers is not
expect_fail 1 layers -- "$PTC" plan --model $MLP --from dp=1 --to pp=2,layers=1:2

# ptc suggest --from: the move amortised over the following steps
S="--model $GPT --gpus 8 --global-batch 8 --top 6"
"$PTC" suggest $S --json >"$T/j0" && ok || bad "suggest"
best=$(jget "$T/j0" "'dp=%d,tp=%d,pp=%d,zero=%d' % tuple(d['configs'][0][k] for k in ('dp','tp','pp','zero'))")
"$PTC" suggest $S --from "$best" --amortize 10 --json >"$T/j1" && ok || bad "suggest --from"
[ "$(jget "$T/j1" "d['from'] == '$best' and d['amortize_steps'] == 10")" = True ] && ok || bad "from keys"
[ "$(jget "$T/j1" "len(d['configs']) > 1")" = True ] && ok || bad "candidates"
[ "$(jget "$T/j1" "all(abs(c['score_s'] - (c['step_time_s'] + c['move_seconds'] / 10)) <= 1e-12 * c['score_s'] for c in d['configs'])")" \
    = True ] && ok || bad "score = step + move / amortize"
[ "$(jget "$T/j1" "[c['score_s'] for c in d['configs']] == sorted(c['score_s'] for c in d['configs'])")" \
    = True ] && ok || bad "ranked by score"
# the configuration the job is in costs nothing to move to
[ "$(jget "$T/j1" "[(c['move_seconds'], c['move_bytes_network']) for c in d['configs'] if c['config'] == '$best'][0]")" \
    = "(0.0, 0)" ] && ok || bad "staying put costs nothing"
[ "$(jget "$T/j1" "all(c['move_seconds'] > 0 for c in d['configs'] if c['config'] != '$best')")" \
    = True ] && ok || bad "other configurations cost a move"
# over slow links (8 GPUs on one host: the copies between them) and one
# step the move dominates: staying put ranks first
"$PTC" suggest $S --from "$best" --amortize 1 --intra-bw 0.000001 --json >"$T/j2"
[ "$(jget "$T/j2" "d['configs'][0]['config']")" = "$best" ] && ok || bad "slow links: stay put"
"$PTC" suggest $S --from "$best" >"$T/j3" && grep -q "ranked with the move from $best" "$T/j3" \
    && ok || bad "suggest --from text"
# a stored model: its tensors (optimizer state as stored) move from its shapes
"$PTC" suggest --store "$T/st1" --gpus 4 --global-batch 8 --from tp=2 --json >"$T/j4" \
    && ok || bad "suggest --store --from"
[ "$(jget "$T/j4" "[c['move_seconds'] == 0 for c in d['configs'] if c['config'] == 'dp=1,tp=2,pp=1,zero=0']")" \
    != "[False]" ] && ok || bad "stored: staying put costs nothing"
[ "$(jget "$T/j4" "all(c['move_bytes_network'] == 0 for c in d['configs'])")" = True ] && ok \
    || bad "stored: one host of 8 GPUs, no network bytes"
expect_fail 2 from -- "$PTC" suggest $S --from dp=x
expect_fail 2 amortize -- "$PTC" suggest $S --from "$best" --amortize 0
finish
