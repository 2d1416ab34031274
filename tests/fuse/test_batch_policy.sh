#!/usr/bin/env bash
# Batch policies through a real mount. A 1000-line corpus read as whole
# epochs under batch 64, dp 3 (1000 = 15*64 + 40; 64 = 3*21 + 1) with
# policy-drop-last, policy-equal and policy-drop-last+equal (one epoch
# each), and a 5-record corpus under batch 5, dp 4 (2, 2, 1, 0 by the split
# rule; 1, 1, 1, 1 under equal). Per-rank counts follow the policy, the
# step past the end is ENOENT, the records are distinct records of the
# corpus in epoch order, the default tree is unchanged (dp-<D> lists only
# ranks, the partial last step exists without a policy), and the audit with
# --policy reports every read record once, the dropped ones as dropped and
# none missing.
. "$(dirname "$0")/lib.sh"

python3 -c 'import random
r = random.Random(3)
for i in range(1000):
    print("rec-%04d-" % i + "y" * r.randrange(0, 200))' >"$T/corpus.txt"
printf 'a\nbb\nccc\ndddd\neeeee\n' >"$T/five.txt"
s="$T/store"
"$PTC" dataset ingest --store "$s" --name text --format lines "$T/corpus.txt" >/dev/null
"$PTC" dataset ingest --store "$s" --name five --format lines "$T/five.txt" >/dev/null
mount_store "$s" --flush-ms 86400000

if python3 - "$MNT" "$T/corpus.txt" "$T/five.txt" <<'PY'; then ok; else bad "reads under policies"; fi
import collections, errno, os, struct, sys
mnt, corpus, five = sys.argv[1:]

def records(path):
    data = open(path, "rb").read()
    idx = open(path + ".idx", "rb").read()
    offs = struct.unpack("<%dQ" % (len(idx) // 8), idx)
    assert offs[0] == 0 and offs[-1] == len(data) == os.stat(path).st_size, path
    return [data[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]

def enoent(path):
    try:
        os.stat(path)
    except OSError as e:
        assert e.errno == errno.ENOENT, (path, e)
        return True
    return False

def split(size, n, r):
    c = -(-size // n)
    return max(0, min((r + 1) * c, size) - min(r * c, size))

want = open(corpus, "rb").read().split(b"\n")[:-1]
N, B, D = 1000, 64, 3
dp = f"{mnt}/datasets/text/seed-11/epoch-%d/batch-{B}/start-0/dp-{D}"
# the default tree: dp-3 lists its ranks only; the partial step 15 exists
assert sorted(os.listdir(dp % 0)) == ["rank-0", "rank-1", "rank-2"], os.listdir(dp % 0)
assert [len(records(f"{dp % 9}/rank-{r}/step-15")) for r in range(D)] == [14, 14, 12]
assert sorted(os.listdir(dp % 0 + "/policy-equal")) == ["rank-0", "rank-1", "rank-2"]
for bad in ("policy-none", "policy-", "policy-equal+drop-last", "policy-Equal"):
    assert enoent(f"{dp % 0}/{bad}"), bad
    assert enoent(f"{dp % 0}/{bad}/rank-0/step-0"), bad

# whole epochs: (policy, epoch, steps, records per rank of step k)
cases = [("drop-last", 0, 15, lambda k, r: split(64, D, r)),
         ("equal", 1, 16, lambda k, r: 21 if k < 15 else 13),
         ("drop-last+equal", 2, 15, lambda k, r: 21)]
for pol, epoch, steps, per in cases:
    base = f"{dp % epoch}/policy-{pol}"
    got = []
    for k in range(steps):
        for r in range(D):
            recs = records(f"{base}/rank-{r}/step-{k}")
            assert len(recs) == per(k, r), (pol, k, r, len(recs))
            got += recs
    for r in range(D):
        assert enoent(f"{base}/rank-{r}/step-{steps}"), (pol, r)
        assert enoent(f"{base}/rank-{r}/step-{steps}.idx"), (pol, r)
    c = collections.Counter(got)
    assert max(c.values()) == 1 and not (set(c) - set(want)), pol
    dropped = {"drop-last": 40, "equal": 16, "drop-last+equal": 55}[pol]
    assert len(got) == N - dropped, (pol, len(got))
    # equal is a truncation of nothing but the batch's tail: its first
    # 21 + 21 + 21 records of step 0 are the split-rule records 0..62
    if pol == "equal":
        plain = [x for r in range(D) for x in records(f"{dp % 7}/rank-{r}/step-0")]
        eq7 = [x for r in range(D) for x in records(f"{dp % 7}/policy-equal/rank-{r}/step-0")]
        assert eq7 == plain[:63], "equal does not keep the epoch order"

# 5 records over 4 ranks
fv = f"{mnt}/datasets/five/seed-1/epoch-%d/batch-5/start-0/dp-4"
assert [len(records(f"{fv % 0}/rank-{r}/step-0")) for r in range(4)] == [2, 2, 1, 0]
eq = [records(f"{fv % 1}/policy-equal/rank-{r}/step-0") for r in range(4)]
assert [len(x) for x in eq] == [1, 1, 1, 1], eq
assert enoent(f"{fv % 1}/policy-equal/rank-0/step-1")
# batch 5 is full: drop-last keeps it
assert [len(records(f"{fv % 2}/policy-drop-last/rank-{r}/step-0")) for r in range(4)] == [2, 2, 1, 0]
PY

# the counts are saved by a sync of the mount (an fsync of its root)
sync "$MNT"
audit() {
    local name=$1 epoch=$2 want=$3; shift 3
    local a
    a=$("$PTC" dataset audit --store "$s" --name "$name" --seed "${SEED:-11}" --epoch "$epoch" --json "$@")
    if [ "$a" = "$want" ]; then ok; else bad "audit $name epoch $epoch $*: $a (want $want)"; fi
}
audit text 0 '{"samples":1000,"once":960,"repeated":0,"missing":0,"dropped":40}' --policy drop-last --batch 64 --dp 3
audit text 1 '{"samples":1000,"once":984,"repeated":0,"missing":0,"dropped":16}' --policy equal --batch 64 --dp 3
audit text 2 '{"samples":1000,"once":945,"repeated":0,"missing":0,"dropped":55}' --policy drop-last+equal --batch 64 --dp 3
# without --policy the same epoch's dropped records are missing, as before
audit text 1 '{"samples":1000,"once":984,"repeated":0,"missing":16}'
# another policy reports only what it drops: of equal's 16, drop-last drops
# the one in the partial last batch; the other 15 are missing
audit text 1 '{"samples":1000,"once":984,"repeated":0,"missing":15,"dropped":1}' --policy drop-last --batch 64 --dp 3
unmount_store
SEED=1 audit five 0 '{"samples":5,"once":5,"repeated":0,"missing":0}'
SEED=1 audit five 1 '{"samples":5,"once":4,"repeated":0,"missing":0,"dropped":1}' --policy equal --batch 5 --dp 4
SEED=1 audit five 2 '{"samples":5,"once":5,"repeated":0,"missing":0,"dropped":0}' --policy drop-last --batch 5 --dp 4
finish
