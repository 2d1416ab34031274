#!/usr/bin/env bash
# kill -9 of `ptc import` at several moments: the committed versions stay
# intact and verify, a half-written version is invisible, `ptc gc` removes
# the debris, and the next import succeeds.
. "$(dirname "$0")/lib.sh"
cd "$T"
"$PTC" synth --preset llama-tiny --seed 9 --out small.safetensors
"$PTC" synth --preset llama-tiny --seed 10 --hidden 384 --layers 6 --optim --out big.safetensors
"$PTC" import --store st --config tp=2 --rules llama small.safetensors >/dev/null

killed=0
for at in 1 100000 1000000 4000000 10000000 20000000 30000000; do
    "$PTC" import --store st --config dp=2,tp=2,pp=2,zero=1 --rules llama --compress zstd:1 \
        big.safetensors >/dev/null 2>&1 &
    pid=$!
    if kill_at_bytes "$pid" st/packs/v2 "$at"; then killed=$((killed + 1)); fi
    wait "$pid" 2>/dev/null || true
    # whatever committed is intact; version 1 is untouched
    if "$PTC" verify --store st --all >/dev/null; then ok; else bad "verify after kill at $at bytes"; fi
    "$PTC" export --store st --version 1 --out w.safetensors
    if cmp -s w.safetensors small.safetensors; then ok; else bad "version 1 changed (kill at $at bytes)"; fi
    if "$PTC" gc --store st >/dev/null; then ok; else bad "gc after kill at $at bytes"; fi
    # only directories of committed versions remain
    committed=$("$PTC" versions --store st --json | python3 -c 'import json,sys; print(" ".join("v%d" % v["version"] for v in json.load(sys.stdin)["versions"]))')
    for d in st/packs/*; do
        [ -e "$d" ] || continue
        case " $committed " in *" $(basename "$d") "*) ok ;; *) bad "debris left after gc: $d" ;; esac
    done
done
[ "$killed" -ge 3 ] && ok || bad "only $killed imports were still running when killed"
"$PTC" import --store st --config tp=3 --rules llama big.safetensors >/dev/null && ok || bad "import after crashes"
"$PTC" export --store st --out w.safetensors && cmp -s w.safetensors big.safetensors && ok || bad "final export"
finish
