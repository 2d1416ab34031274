#!/usr/bin/env python3
"""The bit-flip campaign against a store's metadata (issue 33, item 4).

  bitflip.py PTC STORE N SEED

For each of N flips: copy STORE, flip one random bit of the copy's
meta/data.mdb (half of the flips anywhere in the file, half next to the
bytes of a record: a tensor name, a configuration, the dataset's format),
and run what reads metadata: ptc info (newest version and version 1),
versions, verify --all, dataset ls / info, export of the newest version and
of version 1. Each command must either fail cleanly (exit 1 with one
"ptc: error:" line) or report exactly what it reports on the intact store
(exports compared by their bytes); a crash, a hang, an exit 0 with another
answer fails the campaign. Prints the counts; exit 0 when every flip passed.
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys

PTC, SRC, N, SEED = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
COMMANDS = [
    ["info", "--json"], ["info", "--json", "--version", "1"], ["versions", "--json"],
    ["verify", "--all", "--json"], ["dataset", "ls", "--json"],
    ["dataset", "info", "--name", "d", "--json"],
    ["export", "--out", "OUT"], ["export", "--version", "1", "--out", "OUT"],
]
ANCHORS = [b"model.", b"dp=1", b"lines", b"format", b"ptc.", b"versions", b"datasets"]


def run(store):
    got = []
    out = store + ".export"
    for c in COMMANDS:
        sub = 2 if c[0] == "dataset" else 1
        argv = [PTC] + c[:sub] + ["--store", store] + [out if a == "OUT" else a for a in c[sub:]]
        if os.path.exists(out):
            os.remove(out)
        try:
            p = subprocess.run(argv, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            got.append(("hang", b"", b""))
            continue
        o = p.stdout.replace(store.encode(), b"STORE")
        if c[0] == "export" and p.returncode == 0:
            with open(out, "rb") as f:
                o = hashlib.sha256(f.read()).hexdigest().encode()
        got.append((p.returncode, o, p.stderr))
    return got


def main():
    base = run(SRC)
    for c, (rc, _, err) in zip(COMMANDS, base):
        if rc != 0:
            sys.exit("the intact store fails %s: %s" % (c, err.decode(errors="replace")))
    mdb = os.path.join(SRC, "meta", "data.mdb")
    data = open(mdb, "rb").read()
    near = sorted({i for a in ANCHORS for i in range(len(data)) if data.startswith(a, i)})
    rnd = random.Random(SEED)
    tmp = SRC.rstrip("/") + ".flip"
    counts = {"no effect": 0, "clean error": 0}
    bad = []
    for k in range(N):
        if k % 2 and near:
            off = min(len(data) - 1, max(0, rnd.choice(near) + rnd.randrange(-48, 64)))
        else:
            off = rnd.randrange(len(data))
        bit = rnd.randrange(8)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(SRC, tmp, ignore=shutil.ignore_patterns("lock.mdb"))
        with open(os.path.join(tmp, "meta", "data.mdb"), "r+b") as f:
            f.seek(off)
            f.write(bytes([data[off] ^ (1 << bit)]))
        errors = 0
        for c, (rc, out, err), (_, want, _) in zip(COMMANDS, run(tmp), base):
            lines = err.decode(errors="replace").splitlines()
            if rc == "hang" or rc < 0 or rc > 2:
                bad.append("flip %d (byte %d bit %d): %s crashed or hung (%s)" % (k, off, bit, c, rc))
            elif rc == 0 and out != want:
                bad.append("flip %d (byte %d bit %d): %s changed silently" % (k, off, bit, c))
            elif rc != 0 and (rc != 1 or len(lines) != 1 or not lines[0].startswith("ptc: error: ")):
                bad.append("flip %d (byte %d bit %d): %s: exit %d, %r" % (k, off, bit, c, rc, lines))
            errors += rc != 0
        counts["clean error" if errors else "no effect"] += 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("%d flips of %s (%d bytes): %d no effect, %d clean errors, %d failures" % (
        N, mdb, len(data), counts["no effect"], counts["clean error"], len(bad)))
    for b in bad[:20]:
        print("FAIL: " + b)
    sys.exit(1 if bad else 0)


main()
