#!/usr/bin/env bash
# The cost model's predicted activation bytes equal the runtime's own count
# (tests/mpi/search_memory.c) for 1F1B, GPipe, kFkB, ZB-H1, interleaved,
# ZB-V and Chimera at pp = 2, 3 and 4 (8 micro-batches, the 8-layer demo
# model: 3 stages split it unevenly, so a rank's two chunks differ).
. "$(dirname "$0")/lib_mpi.sh"
: "${PTC_BUILD:?PTC_BUILD must name the build folder}"
for P in 2 3 4; do
    timeout 300 "${MPIRUN[@]}" -np "$P" "$PTC_BUILD/search_memory" >"$TMP/out.$P" 2>"$TMP/err.$P" ||
        { cat "$TMP/out.$P" "$TMP/err.$P" >&2; fail "pp=$P: prediction and runtime differ"; }
    python3 - "$TMP/out.$P" "$P" <<'PY' || fail "pp=$P: bad report"
import json, sys
d = json.load(open(sys.argv[1]))
runs = d["runs"]
kinds = {r["schedule"] for r in runs}
want = {"1f1b", "gpipe", "kfkb", "zb-h1", "chimera"} | ({"interleaved", "zb-v"} if sys.argv[2] != "3" else {"zb-v"})
assert want <= kinds, (want, kinds)
for r in runs:
    assert r["ok"] and r["predicted_activation_bytes"] == r["runtime_activation_bytes"] > 0, r
    print("pp=%s %-12s %8d B" % (sys.argv[2], r["schedule"], r["runtime_activation_bytes"]))
PY
done
echo "ok: predicted activation bytes equal the runtime's count"
