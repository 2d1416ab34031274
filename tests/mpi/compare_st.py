#!/usr/bin/env python3
"""Compare two safetensors files of F32 tensors (same names and shapes).

usage: compare_st.py A B [--rel EPS]
Without --rel every byte must match. With --rel each element must satisfy
|a - b| <= EPS * max_j |b_j| (relative to the tensor's largest element, so
biases that start at zero are judged against the tensor's size).
Prints the largest relative difference; exit 1 on a mismatch."""
import json, struct, sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n])
    hdr.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        a, b = t["data_offsets"]
        if t["dtype"] != "F32":
            sys.exit("%s: %s is %s, not F32" % (path, name, t["dtype"]))
        raw = data[base + a:base + b]
        out[name] = (t["shape"], raw, struct.unpack("<%df" % ((b - a) // 4), raw))
    return out


def main():
    args = sys.argv[1:]
    rel = None
    if "--rel" in args:
        i = args.index("--rel")
        rel = float(args[i + 1])
        del args[i:i + 2]
    a, b = load(args[0]), load(args[1])
    if sorted(a) != sorted(b):
        sys.exit("tensor names differ: %s" % sorted(set(a) ^ set(b)))
    worst, bad = 0.0, 0
    for name in sorted(a):
        sa, ra, va = a[name]
        sb, rb, vb = b[name]
        if sa != sb:
            sys.exit("%s: shape %s vs %s" % (name, sa, sb))
        if rel is None:
            if ra != rb:
                print("%s: bytes differ" % name)
                bad += 1
            continue
        scale = max((abs(x) for x in vb), default=0.0)
        for x, y in zip(va, vb):
            d = abs(x - y) / max(scale, 1e-30)
            worst = max(worst, d)
            if d > rel:
                bad += 1
                if bad <= 5:
                    print("%s: %r vs %r (rel %.3g)" % (name, x, y, d))
    print("tensors %d, largest relative difference %.3g, mismatches %d" % (len(a), worst, bad))
    sys.exit(1 if bad else 0)


main()
