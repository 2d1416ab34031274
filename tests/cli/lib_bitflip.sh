# The store of the bit-flip campaigns (sourced after lib.sh): two versions
# (an import with checkpoint metadata, a reshard that references some of its
# extents), a deleted third one (pages LMDB keeps free) and a dataset.
bitflip_store() {
    local s=$1
    "$PTC" synth --preset llama-tiny --seed 4 --layers 2 --hidden 32 --vocab 64 \
        --out "$T/m.safetensors"
    "$PTC" import --store "$s" --config tp=2 --rules llama --step 10 "$T/m.safetensors" >/dev/null
    "$PTC" reshard --store "$s" --to tp=1,pp=2 >/dev/null
    "$PTC" reshard --store "$s" --version 1 --to tp=2,dp=2 >/dev/null
    "$PTC" versions delete --store "$s" 3 >/dev/null
    seq 1 200 >"$T/l.txt"
    "$PTC" dataset ingest --store "$s" --name d --format lines "$T/l.txt" >/dev/null
}
