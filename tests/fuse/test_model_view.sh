#!/usr/bin/env bash
# The model view of a real mount: rank files for configurations the store
# never held equal `ptc export --config` byte for byte and pass the strict,
# independent check; model.safetensors equals the imported checkpoint;
# eight threads reading different and identical files at once get the same
# bytes; bad paths are ENOENT or EINVAL and never bring the mount down.
. "$(dirname "$0")/lib.sh"
check="python3 $PTC_SRC/tests/cli/check_rank_files.py"

"$PTC" synth --preset llama-tiny --seed 3 --optim --out "$T/llama.safetensors"
s="$T/store"
"$PTC" import --store "$s" --config dp=2,tp=2,pp=1 --rules llama --compress zstd:3 \
    "$T/llama.safetensors" >/dev/null
seq 1 100 >"$T/lines.txt"
"$PTC" dataset ingest --store "$s" --name small --format lines "$T/lines.txt" >/dev/null
mkdir -p "$T/exp"
cfgs="dp1-tp1-pp1 dp1-tp3-pp1 dp2-tp1-pp3 dp2-tp2-pp2-zero1 dp3-tp1-pp2-zero1-layers1:2"
for c in $cfgs; do "$PTC" export --store "$s" --config "$c" --out-dir "$T/exp/$c"; done
"$PTC" export --store "$s" --out "$T/whole.safetensors"
mount_store "$s"

for c in $cfgs; do
    d="$MNT/models/1/$c"
    n=$(ls "$T/exp/$c" | wc -l)
    if [ "$(ls "$d" | wc -l)" = "$n" ]; then ok; else bad "$c: listing has $(ls "$d" | wc -l) files, want $n"; fi
    same=1
    for f in "$T/exp/$c"/rank-*.safetensors; do
        cmp -s "$f" "$d/$(basename "$f")" || { same=0; bad "$c: $(basename "$f") differs from ptc export"; }
    done
    [ $same = 1 ] && ok
    keys=$(echo "$c" | sed 's/-/,/g; s/^dp/dp=/; s/,tp/,tp=/; s/,pp/,pp=/; s/,zero1/,zero=1/; s/,layers/,layers=/')
    if $check "$T/llama.safetensors" "$keys" llama "$d" >/dev/null; then ok; else bad "$c: strict check of the mounted files"; fi
done
if cmp -s "$T/llama.safetensors" "$MNT/models/1/model.safetensors"; then ok; else bad "model.safetensors differs from the imported file"; fi
if python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["version"]==1 and j["tensor_count"]==len(j["tensors"])>0' \
    "$MNT/models/1/info.json"; then ok; else bad "models/1/info.json"; fi
if [ "$(ls "$MNT/models")" = "1" ]; then ok; else bad "models/ lists $(ls "$MNT/models")"; fi

# eight threads at once: different and identical files, small and odd reads
if python3 - "$MNT" "$T/exp" <<'PY'; then ok; else bad "concurrent reads"; fi
import os, sys, threading
mnt, exp = sys.argv[1], sys.argv[2]
jobs = [("dp2-tp1-pp3", 0), ("dp2-tp1-pp3", 5), ("dp1-tp3-pp1", 1), ("dp1-tp3-pp1", 1),
        ("dp2-tp2-pp2-zero1", 7), ("dp2-tp2-pp2-zero1", 7), ("dp1-tp1-pp1", 0),
        ("dp3-tp1-pp2-zero1-layers1:2", 4)]
errors = []
def work(i, cfg, r):
    try:
        want = open(f"{exp}/{cfg}/rank-{r}.safetensors", "rb").read()
        p = f"{mnt}/models/1/{cfg}/rank-{r}.safetensors"
        for rep in range(3):
            fd = os.open(p, os.O_RDONLY)
            step = [4096, 1000 + i, 65536][rep]
            got = b"".join(os.pread(fd, step, o) for o in range(0, len(want) + step, step))
            os.close(fd)
            if got != want:
                errors.append(f"thread {i}: {cfg} rank {r} differs (read size {step})")
    except Exception as e:
        errors.append(f"thread {i}: {e!r}")
ts = [threading.Thread(target=work, args=(i, c, r)) for i, (c, r) in enumerate(jobs)]
for t in ts: t.start()
for t in ts: t.join()
if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
PY

# the CLI's short and key spellings of a configuration are accepted on lookup
# and serve the canonical directory's bytes; the listing stays canonical
for pair in tp3:dp1-tp3-pp1 dp2-tp1-pp3:dp2-tp1-pp3 pp3-dp2:dp2-tp1-pp3 \
    dp=2,tp=2,pp=2,zero=1:dp2-tp2-pp2-zero1 tp2-dp2-pp2-zero1:dp2-tp2-pp2-zero1; do
    alias=${pair%%:*} canon=${pair#*:}
    n=$(ls "$T/exp/$canon" | wc -l)
    if [ "$(ls "$MNT/models/1/$alias" | wc -l)" = "$n" ]; then ok; else bad "$alias: listing"; fi
    for f in "$T/exp/$canon"/rank-*.safetensors; do
        if cmp -s "$f" "$MNT/models/1/$alias/$(basename "$f")"; then ok; else bad "$alias/$(basename "$f") differs from $canon"; fi
    done
done
if ls "$MNT/models/1" | grep -qx -e tp3 -e pp3-dp2 -e 'dp=2,tp=2,pp=2,zero=1'; then bad "models/1 lists a non-canonical name: $(ls "$MNT/models/1" | tr '\n' ' ')"; else ok; fi

# bad paths: ENOENT or EINVAL, never a crash
if python3 - "$MNT" <<'PY'; then ok; else bad "bad paths"; fi
import errno, os, sys
mnt = sys.argv[1]
ds = mnt + "/datasets/small/seed-1/epoch-0/batch-8/start-0"
cases = {
    ds + "/dp-4/rank-0/step-abc": errno.ENOENT,
    ds + "/dp-4/rank-0/step-01": errno.ENOENT,
    ds + "/dp-0/rank-0/step-0": errno.ENOENT,
    ds + "/dp-4/rank-9/step-0": errno.ENOENT,
    ds + "/dp-4/rank-0/step-13": errno.ENOENT,
    ds + "/dp-4/rank-0/step-99999999999999999999999": errno.EINVAL,
    ds + "/dp-2000000/rank-0/step-0": errno.EINVAL,
    mnt + "/datasets/small/seed-184467440737095516160/epoch-0": errno.EINVAL,
    mnt + "/datasets/small/samples/100": errno.ENOENT,
    mnt + "/datasets/small/samples/-1": errno.ENOENT,
    mnt + "/datasets/nope/info.json": errno.ENOENT,
    mnt + "/datasets/small/seed-1/epoch-0/batch-0": errno.ENOENT,
    mnt + "/models/1/dp4-tp1-pp1/rank-9.safetensors": errno.ENOENT,
    mnt + "/models/1/notacfg/rank-0.safetensors": errno.ENOENT,
    mnt + "/models/1/dp01-tp2-pp1/rank-0.safetensors": errno.ENOENT,
    mnt + "/models/1/tp=02/rank-0.safetensors": errno.ENOENT,
    mnt + "/models/1/tp2/rank-2.safetensors": errno.ENOENT,
    mnt + "/models/1/dp1-tp1-pp2-layers5:5/rank-0.safetensors": errno.ENOENT,
    mnt + "/models/2/info.json": errno.ENOENT,
    mnt + "/models/0/info.json": errno.ENOENT,
    mnt + "/models/99999999999999999999999/info.json": errno.EINVAL,
    mnt + "/nothing": errno.ENOENT,
}
bad = []
for p, want in cases.items():
    try:
        os.stat(p)
        bad.append(f"{p}: exists")
    except OSError as e:
        if e.errno != want:
            bad.append(f"{p}: {errno.errorcode.get(e.errno)} (want {errno.errorcode[want]})")
try:
    open(mnt + "/README.txt", "w")
    bad.append("README.txt opened for writing")
except OSError as e:
    if e.errno not in (errno.EROFS, errno.EACCES):
        bad.append(f"write open: {e}")
assert open(mnt + "/datasets/small/samples/99", "rb").read() == b"100"
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
PY
if is_mounted && [ -e "$MNT/README.txt" ]; then ok; else bad "the mount is gone after bad paths"; fi

# mount errors: one line, exit 1
mkdir -p "$T/empty"
expect_fail 1 "does not exist" -- "$PTC" mount --store "$s" "$T/nope"
expect_fail 1 "not a directory" -- "$PTC" mount --store "$s" "$T/lines.txt"
expect_fail 1 "already a mount point" -- "$PTC" mount --store "$s" "$MNT"
expect_fail 1 "store" -- "$PTC" mount --store "$T/nostore" "$T/empty"
expect_fail 2 "MOUNTPOINT" -- "$PTC" mount --store "$s"
unmount_store
finish
