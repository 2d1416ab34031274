#!/bin/sh
# The main job end to end on generated data in a temporary store:
# synthesize a model, import it under one configuration, export per-rank
# files for another, export the whole model and compare it byte for byte
# with the input, verify every checksum.
set -eu
PTC=${1:-build/ptc}
PTC=$(cd "$(dirname "$PTC")" && pwd)/$(basename "$PTC")
work=$(mktemp -d "${TMPDIR:-/tmp}/ptc-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
step() { printf '\n== %s\n' "$*"; }

step "synthesize a small Llama-style model (uneven dims)"
"$PTC" synth --preset llama-tiny --seed 7 --optim --out model.safetensors
ls -l model.safetensors

step "import it under dp=2,tp=2,pp=2 with zero=1 (optimizer state sharded over dp)"
"$PTC" import --store store --config dp=2,tp=2,pp=2,zero=1 --rules llama --compress zstd \
    --step 100 model.safetensors
"$PTC" versions --store store
"$PTC" info --store store | head -8

step "export every rank of another configuration: tp=3,pp=1 (never stored)"
"$PTC" export --store store --config tp=3,pp=1 --out-dir tp3
ls -l tp3

step "export the whole model and compare with the input"
"$PTC" export --store store --out whole.safetensors
cmp model.safetensors whole.safetensors && echo "whole export is byte-identical to the input"

step "plan resharding to dp=1,tp=4,pp=2 with 2 ranks per host (figures only)"
"$PTC" plan --store store --to dp=1,tp=4,pp=2 --hosts 2

step "reshard to dp=1,tp=4,pp=2 (a new version; unchanged shards referenced)"
"$PTC" reshard --store store --to dp=1,tp=4,pp=2
"$PTC" export --store store --out whole2.safetensors
cmp model.safetensors whole2.safetensors && echo "resharded version exports byte-identical to the input"

step "verify every block checksum"
"$PTC" verify --store store
printf '\ndemo finished\n'
