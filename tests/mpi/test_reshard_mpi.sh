#!/usr/bin/env bash
# mpirun -np 2 / -np 4 ptc reshard --mpi: byte-identical to the threaded
# executor (whole export and every rank's export), and the store verifies.
. "$(dirname "$0")/../cli/lib.sh"
mpi="mpirun --allow-run-as-root --oversubscribe"
"$PTC" synth --preset llama-tiny --seed 8 --optim --out "$T/m.safetensors"
s="$T/s"
"$PTC" import --store "$s" --config tp=2,pp=2 --rules llama "$T/m.safetensors" >/dev/null

compare() { # version-a version-b config
    "$PTC" export --store "$s" --version "$1" --out "$T/a.st"
    "$PTC" export --store "$s" --version "$2" --out "$T/b.st"
    if cmp -s "$T/a.st" "$T/b.st" && cmp -s "$T/a.st" "$T/m.safetensors"; then ok; else bad "whole export v$1 v$2"; fi
    rm -rf "$T/ra" "$T/rb"
    "$PTC" export --store "$s" --version "$1" --config "$3" --out-dir "$T/ra"
    "$PTC" export --store "$s" --version "$2" --config "$3" --out-dir "$T/rb"
    if diff -r "$T/ra" "$T/rb" >/dev/null; then ok; else bad "rank exports v$1 v$2 ($3)"; fi
    w=$(ls "$T/ra" | wc -l)
    for r in $(seq 0 $((w - 1))); do
        "$PTC" export --store "$s" --version "$1" --rank "$r" --out "$T/x.st"
        "$PTC" export --store "$s" --version "$2" --rank "$r" --out "$T/y.st"
        if cmp -s "$T/x.st" "$T/y.st"; then ok; else bad "--rank $r v$1 v$2"; fi
    done
}

v=1
for np_cfg in "2 tp=4" "4 dp=2,tp=2,pp=2,zero=1" "2 dp=3,tp=1,pp=2,zero=1,layers=1:2" "4 tp=3" "3 dp=2,tp=1,pp=1"; do
    set -- $np_cfg
    $mpi -np "$1" "$PTC" reshard --mpi --store "$s" --version $v --to "$2" --json >"$T/mpi.json"
    a=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$T/mpi.json")
    b=$("$PTC" reshard --store "$s" --version $v --to "$2" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
    compare "$a" "$b" "$2"
    v=$a
done
if "$PTC" verify --store "$s" --all >/dev/null; then ok; else bad "verify --all"; fi
finish
