#!/bin/bash
# ptc train across 2 hosts made of network namespaces (tests/net/lib_net.sh),
# one process per host, over TCP: dp=2 (gradients all-reduced across the
# link) and pp=2 (activations and gradients sent across it) give the same
# losses and parameters as on one host: bit-identical to the same job under a
# plain mpirun, and pp=2 bit-identical to a single process, dp=2 within 1e-6
# of it (its gradient sums in another order). The link bytes are printed.
. "$(dirname "$0")/lib_net.sh"
here=$(dirname "$0")
net_setup 2
MODEL=mlp:layers=4,hidden=8,vocab=16,tokens=4 # as tests/mpi/test_train_equal.sh
common=(--model $MODEL --seed 7 --steps 3 --microbatches 4 --schedule 1f1b --timeout 60)
losses() { awk '/^step /{print $4}' "$1"; }
# the final parameters of a run that saved to store $1, as one file $2
export_params() { "$PTC" export --store "$1" --out "$2" --params-only > /dev/null; }
same_params() { python3 "$PTC_SRC/tests/mpi/compare_st.py" "$1" "$2" > /dev/null 2>&1; }

for ref_m in 4 8; do
    "$PTC" train --config pp=1 "${common[@]}" --microbatches $ref_m \
        --store "$T/ref$ref_m.store" --save-every 0 >"$T/ref$ref_m.txt"
    export_params "$T/ref$ref_m.store" "$T/ref$ref_m.safetensors"
done
[ "$(losses "$T/ref4.txt" | wc -l)" = 3 ] || bad "the reference printed no losses"
[ "$(losses "$T/ref4.txt" | head -1)" != "$(losses "$T/ref4.txt" | tail -1)" ] || bad "the loss did not move"

for cfg in dp=2 pp=2; do
    tx0=$(net_bytes 0 tx) rx0=$(net_bytes 0 rx)
    if net_mpirun -np 2 "$PTC" train --config $cfg "${common[@]}" \
        --store "$T/net-$cfg.store" --save-every 0 >"$T/net-$cfg.txt" 2>"$T/net-$cfg.err" &&
        export_params "$T/net-$cfg.store" "$T/net-$cfg.safetensors"; then ok
    else cat "$T/net-$cfg.err" >&2; bad "train $cfg across 2 hosts exited non-zero"; continue; fi
    echo "train $cfg across 2 hosts: host 0 sent $(($(net_bytes 0 tx) - tx0)), received $(($(net_bytes 0 rx) - rx0)) link bytes"
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$PTC" train --config $cfg "${common[@]}" \
        --store "$T/one-$cfg.store" --save-every 0 >"$T/one-$cfg.txt"
    export_params "$T/one-$cfg.store" "$T/one-$cfg.safetensors"
    [ "$(losses "$T/net-$cfg.txt" | wc -l)" = 3 ] || bad "$cfg across 2 hosts: no losses printed"
    if [ "$(losses "$T/net-$cfg.txt")" = "$(losses "$T/one-$cfg.txt")" ] &&
        same_params "$T/net-$cfg.safetensors" "$T/one-$cfg.safetensors"; then ok
    else bad "$cfg: 2 hosts differ from one host: $(losses "$T/net-$cfg.txt" | tr '\n' ' ') vs $(losses "$T/one-$cfg.txt" | tr '\n' ' ')"; fi
done
# Against a single process: pp=2 sums every gradient in the reference's
# order; dp=2 sums the replicas' halves (8 micro-batches in all).
if [ "$(losses "$T/net-pp=2.txt")" = "$(losses "$T/ref4.txt")" ] &&
    same_params "$T/net-pp=2.safetensors" "$T/ref4.safetensors"; then ok
else bad "pp=2 across 2 hosts is not bit-identical to one process"; fi
if python3 "$PTC_SRC/tests/mpi/compare_st.py" "$T/net-dp=2.safetensors" "$T/ref8.safetensors" --rel 1e-6 &&
    paste <(losses "$T/net-dp=2.txt") <(losses "$T/ref8.txt") |
        awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-6*$2) exit 1}'; then ok
else bad "dp=2 across 2 hosts differs from one process beyond 1e-6"; fi
finish
