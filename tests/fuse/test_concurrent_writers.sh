#!/usr/bin/env bash
# Writers and readers of one store at once, as real processes:
#  - a second ptc reshard, and ptc gc, while a reshard holds the store's
#    lock (the holder stopped with SIGSTOP, so the overlap is certain) fail
#    with one "locked ... (pid HOLDER)" error; the holder then completes;
#  - pairs of reshards started at the same moment: both succeed, the second
#    queued for the lock (with no wait, PTC_LOCK_TIMEOUT=0, never both fail,
#    and a failure is only ever "locked");
#  - ptc versions delete + ptc gc while a mount serves the deleted version
#    to a reader holding its rank files open: the reader keeps reading the
#    right bytes (ptc export's) to the end, readers of another version never
#    see a wrong byte, the listing drops the version, gc removed its pack
#    files; ptc verify passes after.
. "$(dirname "$0")/lib.sh"

# 178 MB of F32: a rank file assembled from pieces spans many pack files
"$PTC" synth --preset llama-tiny --seed 8 --hidden 512 --layers 4 --vocab 32000 \
    --out "$T/m.safetensors"
s="$T/store"
"$PTC" import --store "$s" --config tp=2 --rules llama "$T/m.safetensors" >/dev/null

# ---- writers against a held lock --------------------------------------------------------
"$PTC" reshard --store "$s" --to tp=4 >"$T/ra.out" 2>"$T/ra.err" &
a=$!
for _ in $(seq 1 2000); do
    [ "$(head -n1 "$s/lock" 2>/dev/null)" = "$a" ] && break
    kill -0 $a 2>/dev/null || break
    sleep 0.005
done
if kill -STOP $a 2>/dev/null && [ "$(head -n1 "$s/lock")" = "$a" ]; then
    ok
    # (writers wait for the lock by default: these must not)
    expect_fail 1 locked "pid $a" -- env PTC_LOCK_TIMEOUT=0 "$PTC" reshard --store "$s" --to tp=1
    expect_fail 1 locked "pid $a" -- "$PTC" gc --store "$s" --lock-timeout 0
    kill -CONT $a
else
    bad "the first reshard ended before it could be seen holding the lock"
fi
if wait $a; then ok; else bad "the first reshard failed: $(cat "$T/ra.err")"; fi
if [ "$("$PTC" versions --store "$s" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))')" = 2 ]; then
    ok; else bad "want 2 versions after the first reshard"; fi

# ---- reshards started together -----------------------------------------------------------
both_failed=0 other=0 lost=0
for i in 1 2 3 4 5 6; do
    "$PTC" reshard --store "$s" --version 2 --to tp=1 >/dev/null 2>"$T/e1" &
    p1=$!
    "$PTC" reshard --store "$s" --version 2 --to dp=2,tp=2 >/dev/null 2>"$T/e2" &
    p2=$!
    r1=0 r2=0
    wait $p1 || r1=$?
    wait $p2 || r2=$?
    [ $r1 != 0 ] && [ $r2 != 0 ] && both_failed=$((both_failed + 1))
    for e in 1 2; do
        if [ -s "$T/e$e" ]; then
            lost=$((lost + 1))
            grep -q '^ptc: error: .*locked.*(pid [1-9][0-9]*)' "$T/e$e" || {
                other=$((other + 1)); cat "$T/e$e" >&2; }
        fi
    done
done
if [ $both_failed = 0 ]; then ok; else bad "$both_failed of 6 pairs: both reshards failed"; fi
if [ $other = 0 ]; then ok; else bad "$other failures other than 'locked'"; fi
echo "pairs: $lost of 12 reshards lost the race with a locked error"
if "$PTC" verify --store "$s" >/dev/null; then ok; else bad "verify after the racing reshards"; fi

# ---- gc under a mount's readers -------------------------------------------------------------
# version 2 is tp=4 (its own pack files); the newest is the stable one
"$PTC" reshard --store "$s" --version 1 --to dp=1,tp=1 >/dev/null
stable=$("$PTC" versions --store "$s" --json | python3 -c 'import json,sys; print(max(v["version"] for v in json.load(sys.stdin)["versions"]))')
mkdir -p "$T/exp2" "$T/exps"
"$PTC" export --store "$s" --version 2 --config dp1-tp3-pp1 --out-dir "$T/exp2"
"$PTC" export --store "$s" --version 2 --rank 0 --out "$T/exp2/stored-0.safetensors"
"$PTC" export --store "$s" --version "$stable" --config dp1-tp2-pp2 --out-dir "$T/exps"
mount_store "$s"

python3 - "$MNT" "$T" "$stable" >"$T/readers.out" 2>&1 <<'PY' &
import os, sys, threading, time
mnt, t, stable = sys.argv[1], sys.argv[2], sys.argv[3]
errors = []
# the deleted version: files open (and partly read) before the delete
# (tp=3's rank 2 needs packs 2 and 3 of tp=4; its first bytes only pack 2)
held = [(f"{mnt}/models/2/dp1-tp3-pp1/rank-2.safetensors", f"{t}/exp2/rank-2.safetensors"),
        (f"{mnt}/models/2/dp1-tp4-pp1/rank-0.safetensors", f"{t}/exp2/stored-0.safetensors")]
fds = []
for p, e in held:
    want = open(e, "rb").read()
    fd = os.open(p, os.O_RDONLY)
    if os.pread(fd, 4096, 0) != want[:4096]:
        errors.append(f"{p}: first bytes differ")
    fds.append((fd, want, p))
stop = False
def stable_reader(i):
    n = 0
    while not stop or n == 0:
        r = (i + n) % 4
        want = open(f"{t}/exps/rank-{r}.safetensors", "rb").read()
        try:
            got = open(f"{mnt}/models/{stable}/dp1-tp2-pp2/rank-{r}.safetensors", "rb").read()
        except OSError as ex:
            errors.append(f"stable reader {i}: {ex!r}"); return
        if got != want:
            errors.append(f"stable reader {i}: rank {r} differs")
        n += 1
        # its pages dropped: the next pass reads through the daemon again
        fd = os.open(f"{mnt}/models/{stable}/dp1-tp2-pp2/rank-{r}.safetensors", os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
ts = [threading.Thread(target=stable_reader, args=(i,)) for i in range(2)]
for th in ts: th.start()
open(f"{t}/ready", "w").close()
for _ in range(3000):
    if os.path.exists(f"{t}/go"): break
    time.sleep(0.01)
# the rest of each held file, in 1 MiB reads, from the end backwards (the
# kernel's readahead of the first bytes must not have answered them)
for fd, want, p in fds:
    step = 1 << 20
    offs = list(range(4096, len(want), step))[::-1]
    got = {}
    try:
        for o in offs:
            got[o] = os.pread(fd, min(step, len(want) - o), o)
    except OSError as ex:
        errors.append(f"{p}: {ex!r}"); continue
    if want[:4096] + b"".join(got[o] for o in sorted(got)) != want:
        errors.append(f"{p}: bytes differ after the delete and gc")
    os.close(fd)
stop = True
for th in ts: th.join()
print("\n".join(errors) if errors else "readers ok")
sys.exit(1 if errors else 0)
PY
readers=$!
for _ in $(seq 1 3000); do [ -e "$T/ready" ] && break; sleep 0.01; done
if "$PTC" versions --store "$s" delete 2 >/dev/null && "$PTC" gc --store "$s" >"$T/gc.out" 2>&1; then
    ok; else bad "delete + gc under readers: $(cat "$T/gc.out")"; fi
if [ ! -e "$s/packs/v2" ]; then ok; else bad "gc left packs/v2: $(ls "$s/packs/v2")"; fi
touch "$T/go"
if wait $readers; then ok; else bad "readers: $(cat "$T/readers.out")"; fi
if ls "$MNT/models" | grep -qx 2; then bad "models/ still lists the deleted version"; else ok; fi
# a file of the deleted version opened now: gone, or (the mount still holds
# the version it resolved) the right bytes — never a half version
if out=$(cat "$MNT/models/2/dp1-tp3-pp1/rank-1.safetensors" 2>"$T/late.err" | cmp - "$T/exp2/rank-1.safetensors" 2>&1); then
    ok
elif grep -q "No such file" "$T/late.err"; then ok
else bad "a late open of the deleted version: $out $(cat "$T/late.err")"; fi
unmount_store
if "$PTC" verify --store "$s" >/dev/null; then ok; else bad "verify after gc under readers"; fi
finish
