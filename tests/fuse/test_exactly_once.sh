#!/usr/bin/env bash
# Exactly-once through a real mount: a 1000-line corpus read as step files
# for part of an epoch under dp=4, batch 64, then from the next sample
# position to the end under dp=3, batch 48. The multiset of records equals
# the input, per-step counts follow the split rule, the step past the end is
# ENOENT, and the audit (durable while mounted and after unmount) reports
# every record served once. A zstd-compressed copy serves identical bytes.
# The first mount saves its counts only when asked (an fsync of a file or
# directory of the mount) and at unmount: its periodic flush is set to a
# day, so no wait could make the counts appear.
. "$(dirname "$0")/lib.sh"

python3 -c 'import random
r = random.Random(7)
for i in range(1000):
    print("rec-%04d-" % i + "x" * r.randrange(0, 300))' >"$T/corpus.txt"
s="$T/store"
"$PTC" dataset ingest --store "$s" --name text --format lines "$T/corpus.txt" >/dev/null
"$PTC" dataset ingest --store "$s" --name textz --format lines --compress zstd:3 "$T/corpus.txt" >/dev/null
# 20 records, every fifth one empty: a batch-1 step file of an empty record
# is empty, never read, and served when its name is looked up
python3 -c 'for i in range(20): print("" if i % 5 == 0 else "r%d" % i)' >"$T/gaps.txt"
"$PTC" dataset ingest --store "$s" --name gaps --format lines "$T/gaps.txt" >/dev/null
# 64 records of 128 KiB: one 8 MiB step file, larger than the readahead
head -c $((8 << 20)) /dev/urandom >"$T/big.bin"
"$PTC" dataset ingest --store "$s" --name big --format tokens:u32:32768 "$T/big.bin" >/dev/null
mount_store "$s" --flush-ms 86400000

if python3 - "$MNT" "$T/corpus.txt" <<'PY'; then ok; else bad "exactly-once reads"; fi
import collections, errno, os, struct, sys
mnt, corpus = sys.argv[1], sys.argv[2]
want = open(corpus, "rb").read().split(b"\n")[:-1]
N = len(want)
assert N == 1000
base = mnt + "/datasets/text/seed-11/epoch-2"

def split(size, n, r):
    c = -(-size // n)
    return max(0, min((r + 1) * c, size) - min(r * c, size))

def read_step(d, B, X, D, r, k):
    p = f"{base}/batch-{B}/start-{X}/dp-{D}/rank-{r}/step-{k}"
    data = open(p, "rb").read()
    idx = open(p + ".idx", "rb").read()
    offs = struct.unpack("<%dQ" % (len(idx) // 8), idx)
    assert offs[0] == 0 and offs[-1] == len(data), p
    assert os.stat(p).st_size == len(data)
    return [data[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]

got = []
# phase 1: dp=4, batch 64, steps 0..5 (384 samples)
B, D, X = 64, 4, 0
for k in range(6):
    for r in range(D):
        recs = read_step(base, B, X, D, r, k)
        assert len(recs) == split(64, D, r), (k, r, len(recs))
        got += recs
# phase 2: dp=3, batch 48 from position 384 to the end
B2, D2, X2 = 48, 3, 6 * 64
steps = -(-(N - X2) // B2)
for k in range(steps):
    size = min(B2, N - X2 - k * B2)
    for r in range(D2):
        recs = read_step(base, B2, X2, D2, r, k)
        assert len(recs) == split(size, D2, r), (k, r, len(recs), size)
        got += recs
for r in range(D2):
    for path in (f"{base}/batch-{B2}/start-{X2}/dp-{D2}/rank-{r}/step-{steps}",
                 f"{base}/batch-{B}/start-{N}/dp-{D}/rank-{r}/step-0"):
        try:
            os.stat(path)
            raise SystemExit("exists past the end: " + path)
        except OSError as e:
            assert e.errno == errno.ENOENT, (path, e)
assert collections.Counter(got) == collections.Counter(want), "multiset differs"
# samples/ and the compressed copy
for i in (0, 1, 499, 999):
    assert open(f"{mnt}/datasets/text/samples/{i}", "rb").read() == want[i]
    assert open(f"{mnt}/datasets/textz/samples/{i}", "rb").read() == want[i]
zs = f"{mnt}/datasets/textz/seed-11/epoch-2/batch-{B}/start-0/dp-{D}/rank-1/step-3"
assert open(zs, "rb").read() == open(zs.replace("textz", "text"), "rb").read()
print("records", len(got))
PY

if python3 - "$MNT" <<'PY'; then ok; else bad "empty step files"; fi
import os, sys
base = sys.argv[1] + "/datasets/gaps/seed-4/epoch-0/batch-1/start-0/dp-1/rank-0"
sizes = [os.stat(f"{base}/step-{k}").st_size for k in range(20)]
assert sizes.count(0) == 4, sizes
for k in range(20):  # stat again and open: the name is cached, no second count
    os.stat(f"{base}/step-{k}")
    if sizes[k] == 0:
        assert open(f"{base}/step-{k}", "rb").read() == b""
PY

# durable while mounted once a program asks: sync of the mount point is an
# fsync of its root directory
a=$("$PTC" dataset audit --store "$s" --name text --seed 11 --epoch 2 --json)
if [ "$a" = '{"samples":1000,"once":0,"repeated":0,"missing":1000}' ]; then ok; else bad "audit before sync: $a"; fi
sync "$MNT"
a=$("$PTC" dataset audit --store "$s" --name text --seed 11 --epoch 2 --json)
if [ "$a" = '{"samples":1000,"once":1000,"repeated":0,"missing":0}' ]; then ok; else bad "audit while mounted: $a"; fi

# A record counts when its last byte is served. Direct I/O (no page cache,
# no readahead) serves exactly the bytes asked for: 3.5 records of the big
# step file count 3; the rest of the file serves the other 61, each once.
if python3 - "$MNT" "$T/big.bin" "$PTC" "$s" <<'PY'; then ok; else bad "partial reads"; fi
import json, os, subprocess, sys
mnt, big, ptc, store = sys.argv[1:]
R = 128 << 10
p = mnt + "/datasets/big/seed-1/epoch-0/batch-64/start-0/dp-1/rank-0/step-0"

def audit(fd=None):
    if fd is not None:
        os.fsync(fd)  # the mount saves its served counts before answering
    out = subprocess.run([ptc, "dataset", "audit", "--store", store, "--name", "big",
                          "--seed", "1", "--epoch", "0", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
head = os.pread(fd, 3 * R + R // 2, 0)
assert len(head) == 3 * R + R // 2
a = audit()  # not saved yet: no fsync, no periodic flush
assert a == {"samples": 64, "once": 0, "repeated": 0, "missing": 64}, a
a = audit(fd)
assert a == {"samples": 64, "once": 3, "repeated": 0, "missing": 61}, a
rest = b""
while True:
    k = os.pread(fd, 1 << 20, len(head) + len(rest))
    if not k:
        break
    rest += k
a = audit(fd)
os.close(fd)
assert a == {"samples": 64, "once": 64, "repeated": 0, "missing": 0}, a
want = open(big, "rb").read()
split = lambda b: sorted(b[i:i + R] for i in range(0, len(b), R))
assert split(head + rest) == split(want), "the big step file is not its records"
PY

# the same positions through another file (dp=1) are served again: counted
# as repeats (re-reads of one file come from the kernel page cache)
cat "$MNT/datasets/text/seed-11/epoch-2/batch-64/start-0/dp-1/rank-0/step-0" >/dev/null
unmount_store
a=$("$PTC" dataset audit --store "$s" --name text --seed 11 --epoch 2 --json)
if [ "$a" = '{"samples":1000,"once":936,"repeated":64,"missing":0}' ]; then ok; else bad "audit after unmount: $a"; fi
a=$("$PTC" dataset audit --store "$s" --name big --seed 1 --epoch 0 --json)
if [ "$a" = '{"samples":64,"once":64,"repeated":0,"missing":0}' ]; then ok; else bad "audit of big: $a"; fi
a=$("$PTC" dataset audit --store "$s" --name gaps --seed 4 --epoch 0 --json)
if [ "$a" = '{"samples":20,"once":4,"repeated":0,"missing":16}' ]; then ok; else bad "audit of gaps: $a"; fi
a=$("$PTC" dataset audit --store "$s" --name textz --seed 11 --epoch 2 --json)
if [ "$a" = '{"samples":1000,"once":16,"repeated":0,"missing":984}' ]; then ok; else bad "audit of textz: $a"; fi

# A dataset replaced while mounted: the mount keeps serving the generation it
# opened, and those reads never count toward the new one.
seq 1 100 | sed 's/^/small /' >"$T/small.txt"
# (this mount keeps a single decoded block of the zstd copy: eight threads
# reading its step files at once evict each other's blocks, and still get
# the bytes of the uncompressed copy)
mount_store "$s" --cache-mib 1
if python3 - "$MNT" <<'PY'; then ok; else bad "zstd step files under a one-block cache"; fi
import concurrent.futures, sys
base = sys.argv[1] + "/datasets/%s/seed-5/epoch-1/batch-32/start-0/dp-2/rank-%d/step-%d"
jobs = [(r, k) for k in range(32) for r in range(2)]
def same(job):
    r, k = job
    return open(base % ("textz", r, k), "rb").read() == open(base % ("text", r, k), "rb").read()
with concurrent.futures.ThreadPoolExecutor(8) as ex:
    assert all(ex.map(same, jobs))
PY
cat "$MNT/datasets/text/seed-9/epoch-0/batch-64/start-0/dp-1/rank-0/step-0" >/dev/null
"$PTC" dataset ingest --store "$s" --name text --format lines --replace "$T/small.txt" >/dev/null
for k in 1 2 3 4 5 6 7 8 9 10; do
    cat "$MNT/datasets/text/seed-9/epoch-0/batch-64/start-0/dp-1/rank-0/step-$k" >/dev/null
done
unmount_store
a=$("$PTC" dataset audit --store "$s" --name text --seed 9 --epoch 0 --json)
if [ "$a" = '{"samples":100,"once":0,"repeated":0,"missing":100}' ]; then ok; else bad "audit after a replace while mounted: $a"; fi
finish
