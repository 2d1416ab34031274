#!/usr/bin/env bash
# kill -9 during ptc reshard at several moments, and injected write failures
# (PTC_FAULT_WRITE=N:ENOSPC): the previous version stays intact and
# verifiable, ptc gc removes the debris, the next reshard succeeds. A second
# reshard while one runs meets the writer lock (clear error, no damage).
. "$(dirname "$0")/lib.sh"

# a ~64 MiB Llama-named model (bytes from a fixed generator)
python3 - "$T/big.safetensors" <<'PY'
import json, random, struct, sys
h, L = 1024, 2
names = []
for l in range(L):
    for k in ("q_proj", "k_proj", "v_proj", "o_proj"):
        names.append((f"model.layers.{l}.self_attn.{k}.weight", [h, h]))
    names.append((f"model.layers.{l}.mlp.gate_proj.weight", [2 * h, h]))
    names.append((f"model.layers.{l}.mlp.down_proj.weight", [h, 2 * h]))
names.append(("model.embed_tokens.weight", [2 * h, h]))
hdr, off = {}, 0
for n, s in names:
    size = 4 * s[0] * s[1]
    hdr[n] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + size]}
    off += size
j = json.dumps(hdr, separators=(",", ":")).encode()
j += b" " * (-len(j) % 8)
rnd = random.Random(7)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(j)) + j)
    block = rnd.randbytes(1 << 20)
    left = off
    while left:
        n = min(left, len(block))
        f.write(block[:n])
        block = block[1:] + block[:1]
        left -= n
PY
s="$T/s"
"$PTC" import --store "$s" --config tp=2,pp=2 --rules llama "$T/big.safetensors" >/dev/null

nversions() {
    "$PTC" versions --store "$s" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))'
}

# After a failure: either no new version (then gc removes every file of the
# would-be version) or, for a kill that came after the commit, a complete
# one. Every committed version verifies. Returns 0 if no version appeared.
intact() { # what versions-before
    local n next
    n=$(nversions)
    if "$PTC" verify --store "$s" --all >/dev/null; then ok; else bad "$1: a version does not verify"; fi
    "$PTC" gc --store "$s" >/dev/null
    next=$(( $2 + 1 ))
    if [ "$n" = "$2" ]; then
        if [ ! -e "$s/packs/v$next" ] || [ -z "$(ls -A "$s/packs/v$next")" ]; then ok; else bad "$1: gc left $(ls "$s/packs/v$next")"; fi
        return 0
    fi
    if [ "$n" = "$next" ]; then ok; else bad "$1: $n versions, had $2"; fi
    return 1
}

# zstd at a high level on incompressible bytes keeps the run long enough
# for the kills to land while pack files are being written
landed=0
for at in 1 2000000 8000000 24000000 48000000; do
    before=$(nversions)
    "$PTC" reshard --store "$s" --version 1 --to tp=4 --threads 2 --compress zstd:12 >/dev/null 2>&1 &
    pid=$!
    kill_at_bytes "$pid" "$s/packs/v$((before + 1))" "$at" || true
    wait "$pid" 2>/dev/null || true
    if intact "kill -9 after $at bytes" "$before"; then landed=$((landed + 1)); fi
done
if [ "$landed" -ge 3 ]; then ok; else bad "only $landed of 5 kills landed before the commit"; fi

for n in 1 3 9; do
    before=$(nversions)
    expect_fail 1 space -- env PTC_FAULT_WRITE=$n:ENOSPC "$PTC" reshard --store "$s" --version 1 --to tp=4
    if intact "ENOSPC at write $n" "$before"; then ok; else bad "ENOSPC at write $n: a version appeared"; fi
done

# the lock: a second reshard while the first holds it
"$PTC" reshard --store "$s" --version 1 --to dp=1,tp=4 --threads 1 --compress zstd:12 >/dev/null &
pid=$!
next=$(( $(nversions) + 1 ))
for i in $(seq 1 3000); do  # the first holds the lock once it writes packs
    [ -d "$s/packs/v$next" ] && break
    sleep 0.01
done
locked=0
for i in $(seq 1 200); do
    set +e
    PTC_LOCK_TIMEOUT=0 "$PTC" reshard --store "$s" --version 1 --to tp=2 >"$T/o2" 2>"$T/e2"
    rc=$?
    set -e
    if [ $rc = 1 ] && grep -qi lock "$T/e2"; then locked=1; break; fi
    if [ $rc = 0 ]; then break; fi
done
wait "$pid"
if [ $locked = 1 ]; then ok; else bad "the second reshard did not meet the lock (rc $rc: $(cat "$T/e2"))"; fi
if [ "$(wc -l <"$T/e2")" -le 1 ]; then ok; else bad "lock error is not one line"; fi

# after all that the next reshard succeeds and the data is right
"$PTC" reshard --store "$s" --version 1 --to tp=4 --json >"$T/ok.json"
"$PTC" export --store "$s" --out "$T/whole.safetensors"
if cmp -s "$T/big.safetensors" "$T/whole.safetensors"; then ok; else bad "export after recovery differs"; fi
if "$PTC" verify --store "$s" --all >/dev/null; then ok; else bad "verify --all"; fi
finish
