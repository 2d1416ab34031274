#!/usr/bin/env python3
"""Independent check of per-rank safetensors files.

Given the original (global) checkpoint, a parallel configuration and a rules
preset, slice every tensor the way DESIGN.md specifies — written here from
the specification, sharing no code with PTC — and compare with the
rank-<R>.safetensors files PTC exported: same tensor names, dtypes, local
shapes and bytes. Also parses every file strictly (8-byte length, JSON
header, offsets contiguous from 0 to the end of the file).

usage: check_rank_files.py MODEL.safetensors CONFIG PRESET DIR
"""
import json
import re
import struct
import sys

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4,
              "I64": 8, "U64": 8, "F16": 2, "BF16": 2, "F32": 4, "F64": 8,
              "F8_E4M3": 1, "F8_E5M2": 1}


def fail(msg):
    print("check_rank_files: " + msg, file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    data = open(path, "rb").read()
    if len(data) < 8:
        fail(f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n % 8 != 0 or 8 + n > len(data):
        fail(f"{path}: bad header length {n}")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    tensors = {}
    spans = []
    for name, t in header.items():
        a, b = t["data_offsets"]
        vol = 1
        for s in t["shape"]:
            vol *= s
        if b - a != vol * DTYPE_SIZE[t["dtype"]]:
            fail(f"{path}: {name}: byte count does not match shape")
        tensors[name] = (t["dtype"], list(t["shape"]), data[8 + n + a:8 + n + b])
        spans.append((a, b))
    spans.sort()
    pos = 0
    for a, b in spans:
        if a != pos:
            fail(f"{path}: gap or overlap at {a}")
        pos = b
    if 8 + n + pos != len(data):
        fail(f"{path}: data does not end at the end of the file")
    return tensors, meta


def parse_config(text):
    cfg = {"dp": 1, "tp": 1, "pp": 1, "zero": 0, "layers": None}
    for item in text.split(","):
        k, v = item.split("=")
        cfg[k] = [int(x) for x in v.split(":")] if k == "layers" else int(v)
    return cfg


def split(extent, n, i):
    c = -(-extent // n)
    return min(i * c, extent), min((i + 1) * c, extent)


# Placements of the two presets `ptc synth` names use, from DESIGN.md and the
# preset documentation: (pattern, tp, pp) with tp = None (replicate),
# (dim,) or (dim, blocks).
LLAMA = [
    (r"model\.embed_tokens\.weight", (0,), "first"),
    (r"lm_head\.weight", (0,), "last"),
    (r"model\.norm\.weight", None, "last"),
    (r".*\.self_attn\.[qkv]_proj\.weight", (0,), None),
    (r".*\.self_attn\.o_proj\.weight", (1,), None),
    (r".*\.mlp\.(gate|up)_proj\.weight", (0,), None),
    (r".*\.mlp\.down_proj\.weight", (1,), None),
    (r".*layernorm\.weight", None, None),
]
GPT2 = [
    (r"transformer\.wte\.weight", (0,), "first+last"),
    (r"transformer\.wpe\.weight", None, "first"),
    (r"transformer\.ln_f\..*", None, "last"),
    (r".*\.attn\.c_attn\.weight", (1, 3), None),
    (r".*\.attn\.c_attn\.bias", (0, 3), None),
    (r".*\.attn\.c_proj\.weight", (0,), None),
    (r".*\.attn\.c_proj\.bias", None, None),
    (r".*\.mlp\.c_fc\.weight", (1,), None),
    (r".*\.mlp\.c_fc\.bias", (0,), None),
    (r".*\.mlp\.c_proj\.weight", (0,), None),
    (r".*\.mlp\.c_proj\.bias", None, None),
    (r".*\.ln_[12]\..*", None, None),
]
PRESETS = {"llama": (LLAMA, r"model\.layers\.(\d+)\."),
           "gpt2": (GPT2, r"transformer\.h\.(\d+)\.")}
OPTIM = (".exp_avg_sq", ".exp_avg", ".master")


def placement(name, preset):
    rules, layer_re = PRESETS[preset]
    optim = False
    base = name
    for sfx in OPTIM:
        if name.endswith(sfx):
            base, optim = name[: -len(sfx)], True
            break
    for pat, tp, pp in rules:
        if re.fullmatch(pat, base):
            layer = None
            m = re.search(layer_re, base)
            if pp is None:
                if not m:
                    fail(f"{name}: no layer index")
                pp, layer = "layer", int(m.group(1))
            return tp, pp, layer, optim
    fail(f"{name}: no placement in the test's table")


def stage_of_layer(cfg, n, layer):
    if cfg["layers"]:
        end = 0
        for s, c in enumerate(cfg["layers"]):
            end += c
            if layer < end:
                return s
    P = cfg["pp"]
    for s in range(P):
        if s * n // P <= layer < (s + 1) * n // P:
            return s
    fail("layer outside the model")


def strides(shape):
    st, s = [], 1
    for d in reversed(shape):
        st.insert(0, s)
        s *= d
    return st


def take(data, shape, esize, dim, lo, hi):
    """Elements with index in [lo, hi) along dim, row-major bytes."""
    outer = 1
    for d in shape[:dim]:
        outer *= d
    inner = esize
    for d in shape[dim + 1:]:
        inner *= d
    row = shape[dim] * inner
    out = bytearray()
    for o in range(outer):
        out += data[o * row + lo * inner:o * row + hi * inner]
    return bytes(out)


def expected(tensors, cfg, preset, rank):
    T, D = cfg["tp"], cfg["dp"]
    tp_i = rank % T
    dp_i = (rank // T) % D
    pp_i = rank // (T * D)
    layers = set()
    places = {}
    for name in tensors:
        places[name] = placement(name, preset)
        if places[name][1] == "layer":
            layers.add(places[name][2])
    n = len(layers)
    if layers != set(range(n)):
        fail("layer indices are not 0..n-1")
    out = {}
    for name, (dt, shape, data) in tensors.items():
        tp, pp, layer, optim = places[name]
        P = cfg["pp"]
        if pp == "layer":
            on = stage_of_layer(cfg, n, layer) == pp_i
        else:
            on = {"first": pp_i == 0, "last": pp_i == P - 1,
                  "first+last": pp_i in (0, P - 1), "all": True}[pp]
        if not on:
            continue
        es = DTYPE_SIZE[dt]
        local = list(shape)
        body = data
        if tp is not None:
            dim = tp[0]
            nblocks = tp[1] if len(tp) > 1 else 1
            bsize = shape[dim] // nblocks
            parts = []
            total = 0
            for b in range(nblocks):
                lo, hi = split(bsize, T, tp_i)
                parts.append(take(data, shape, es, dim, b * bsize + lo, b * bsize + hi))
                total += hi - lo
            local[dim] = total
            # concatenating along dim: interleave the parts row by row
            outer = 1
            for d in shape[:dim]:
                outer *= d
            inner = es
            for d in shape[dim + 1:]:
                inner *= d
            rows = []
            for o in range(outer):
                for b, p in enumerate(parts):
                    k = len(p) // outer
                    rows.append(p[o * k:(o + 1) * k])
            body = b"".join(rows)
        if cfg["zero"] and optim:
            vol = len(body) // es
            lo, hi = split(vol, D, dp_i)
            body = body[lo * es:hi * es]
            local = [hi - lo]
        out[name] = (dt, local, body)
    return out


def main():
    if len(sys.argv) != 5:
        fail(__doc__.strip().splitlines()[-1])
    model, cfg_text, preset, d = sys.argv[1:]
    tensors, _ = read_safetensors(model)
    cfg = parse_config(cfg_text)
    world = cfg["dp"] * cfg["tp"] * cfg["pp"]
    for r in range(world):
        want = expected(tensors, cfg, preset, r)
        got, meta = read_safetensors(f"{d}/rank-{r}.safetensors")
        if meta.get("ptc.rank") != str(r):
            fail(f"rank {r}: ptc.rank metadata is {meta.get('ptc.rank')!r}")
        if set(got) != set(want):
            fail(f"rank {r}: tensors differ: missing {sorted(set(want) - set(got))[:3]}, "
                 f"extra {sorted(set(got) - set(want))[:3]}")
        for name, (dt, shape, body) in want.items():
            gdt, gshape, gbody = got[name]
            if (gdt, gshape) != (dt, shape):
                fail(f"rank {r}: {name}: got {gdt}{gshape}, want {dt}{shape}")
            if gbody != body:
                fail(f"rank {r}: {name}: bytes differ")
    print(f"{world} rank files match the independent slicing ({cfg_text}, {preset})")


if __name__ == "__main__":
    main()
