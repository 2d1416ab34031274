#!/usr/bin/env bash
# ptc rules list/show/check, ptc versions delete, and ptc import reading
# rules parameters from config.json (head-aware splits).
. "$(dirname "$0")/lib.sh"
cd "$T"

# ---- rules list / show ------------------------------------------------------------
"$PTC" rules list >list
grep -qx llama list && grep -qx phi3 list && ok || bad "rules list: $(cat list)"
"$PTC" rules show llama >show
grep -q '^# HF Llama' show && grep -q 'unless=lm_head.weight' show && ok || bad "rules show llama"
"$PTC" rules show --canonical llama --param num_attention_heads=8 --param num_key_value_heads=2 \
    --param head_dim=8 >canon
grep -q 'k_proj.weight tp=split(0,kv_heads=2,head_dim=8)$' canon && ! grep -q '#' canon && ok \
    || bad "rules show --canonical: $(cat canon)"
expect_fail 2 preset nope -- "$PTC" rules show nope
expect_fail 2 subcommand -- "$PTC" rules frob
expect_fail 2 --param -- "$PTC" rules show --canonical llama --param heads

# ---- a GQA layer (8 heads, 2 kv heads of 8) with config.json, and strays ---------------
mkdir m
python3 - <<'PY'
import json, struct
tensors = [("model.layers.0.self_attn.q_proj.weight", [64, 64]),
           ("model.layers.0.self_attn.k_proj.weight", [16, 64]),
           ("model.layers.0.self_attn.v_proj.weight", [16, 64]),
           ("model.layers.0.self_attn.o_proj.weight", [64, 64]),
           ("model.layers.0.mlp.gate_proj.weight", [8, 64])]
def write(path, tensors):
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        n = 4
        for s in shape:
            n *= s
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(off))
write("m/model.safetensors", tensors)
write("m/strays.safetensors", tensors + [("foo.bar", [3, 4]), ("baz", [7])])
json.dump({"num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 64},
          open("m/config.json", "w"))
PY

"$PTC" rules check --rules llama --config tp=4 m/model.safetensors >out && grep -q '^ok: 5 tensors' out \
    && ok || bad "rules check ok: $(cat out)"
# every problem at once, each with its dtype and shape
expect_fail 1 "6 problems" -- "$PTC" rules check --rules llama --config tp=3 m/strays.safetensors
grep -q "^foo.bar F32 \[3, 4\]: no placement rule" "$T/out" && grep -q '^baz F32 \[7\]: ' "$T/out" \
    && grep -q '^model.layers.0.self_attn.q_proj.weight F32 \[64, 64\]: .*tp=3 would cut' "$T/out" \
    && grep -q '^model.layers.0.self_attn.k_proj.weight .*key/value heads' "$T/out" && ok \
    || bad "rules check lines: $(cat "$T/out")"
set +e
"$PTC" rules check --rules llama --config tp=3 --json m/strays.safetensors >j 2>/dev/null
rc=$?
set -e
[ "$rc" = 1 ] && python3 -c '
import json, sys
o = json.load(open("j"))
assert o["tensors"] == 7, o
names = [p["tensor"] for p in o["problems"]]
assert names == ["model.layers.0.self_attn.%s_proj.weight" % x for x in "qkvo"] + ["foo.bar", "baz"], names
assert {"tensor": "baz", "dtype": "F32", "shape": [7]}.items() <= [p for p in o["problems"] if p["tensor"] == "baz"][0].items()
' && ok || bad "rules check --json: $(cat j)"
# without config.json the rows are split plainly (no heads), so tp=3 passes but strays do not
expect_fail 1 "2 problems" -- "$PTC" rules check --rules llama --config tp=3 --hf-config none m/strays.safetensors

# ---- import reads config.json beside the input --------------------------------------
expect_fail 1 q_proj cut -- "$PTC" import --store st --config tp=3 --rules llama m/model.safetensors
"$PTC" import --store st --config tp=4 --rules llama m/model.safetensors >/dev/null
"$PTC" info --store st --json | python3 -c '
import json, sys
o = json.load(sys.stdin)
pl = {t["name"]: t["placement"] for t in o["versions"][0]["tensors"]}
assert pl["model.layers.0.self_attn.k_proj.weight"].startswith("tp=split(0,kv_heads=2,head_dim=8)"), pl
' && ok || bad "import placement: $("$PTC" info --store st --json | head -c 600)"
"$PTC" import --store st --config tp=3 --rules llama --hf-config none m/model.safetensors >/dev/null && ok \
    || bad "import --hf-config none"

# ---- versions delete ----------------------------------------------------------------
"$PTC" versions --store st delete 1 >out && grep -q 'deleted version 1' out && ok || bad "delete"
"$PTC" versions --store st --json | python3 -c '
import json, sys
assert [v["version"] for v in json.load(sys.stdin)["versions"]] == [2]' && ok || bad "after delete"
"$PTC" verify --store st >/dev/null && ok || bad "verify after delete"
"$PTC" gc --store st >/dev/null && [ ! -e st/packs/v1 ] && ok || bad "gc after delete: $(ls st/packs)"
expect_fail 1 1 -- "$PTC" versions --store st delete 1
expect_fail 2 version -- "$PTC" versions --store st delete zero
expect_fail 2 exactly -- "$PTC" versions --store st delete
finish
