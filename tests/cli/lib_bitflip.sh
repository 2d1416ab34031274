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

# A larger one (branch pages, overflow pages, two datasets): 13 versions of
# a 6-layer model under many configurations, two of them deleted.
bitflip_store_big() {
    local s=$1 c
    "$PTC" synth --preset llama-tiny --seed 4 --layers 6 --hidden 32 --vocab 64 \
        --out "$T/mb.safetensors"
    "$PTC" import --store "$s" --config tp=2 --rules llama --step 1 "$T/mb.safetensors" >/dev/null
    for c in tp=1,pp=2 tp=2,dp=2 tp=4 pp=3 tp=2,pp=2 dp=2,zero=1 tp=4,pp=2 dp=3 tp=1 pp=6 \
        tp=2,pp=3 dp=4,zero=1; do
        "$PTC" reshard --store "$s" --version 1 --to "$c" >/dev/null
    done
    "$PTC" versions delete --store "$s" 4 >/dev/null
    "$PTC" versions delete --store "$s" 7 >/dev/null
    seq 1 2000 >"$T/l2.txt"
    "$PTC" dataset ingest --store "$s" --name d --format lines "$T/l2.txt" >/dev/null
    "$PTC" dataset ingest --store "$s" --name e --format lines --compress zstd "$T/l2.txt" >/dev/null
}
