#!/usr/bin/env bash
# Memory is bounded by the input's real size: a small file whose header (or
# format) claims more than the file holds — 2^40 empty npy rows, a 1 GiB npy
# row, a 1 GiB tfrecord record, a 1 GiB token window, a jsonl line that would
# take gigabytes to parse, an index that never ends — fails at once with one
# clear "ptc: error:" line (or stores what the file really holds), never
# allocating for the claim.
#
# Every command runs under `ulimit -d` (RLIMIT_DATA: heap and private
# mappings, which is what a runaway allocation grows; `ulimit -v` would
# also refuse LMDB's sparse map), so a regression fails fast with "out of
# memory" instead of filling the machine.
. "$(dirname "$0")/lib.sh"
mkdir "$T/w" && cd "$T/w"
export OPENBLAS_NUM_THREADS=1 # keeps the program's own start-up memory small
LIMIT_KB=$((512 * 1024))
limited() { (ulimit -d $LIMIT_KB && exec "$@"); }

# the limit leaves room for an honest ingest
printf 'a\nb\n' >small.txt
if limited "$PTC" dataset ingest --store st --name small --format lines small.txt >/dev/null; then
    ok; else bad "a tiny ingest does not fit the memory limit"; fi

python3 - <<'PY'
import struct

def npy(name, descr, shape, data=b"", version=1, pad_to=None):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        descr, "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")")
    pre = 10 if version == 1 else 12
    total = pre + len(h) + 1
    total += -total % 64
    h = h + " " * (total - pre - len(h) - 1) + "\n"
    length = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    with open(name, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([version, 0]) + length + h.encode() + data)

# 2^40 rows of 0 bytes in a file of 128 bytes
npy("zero_rows.npy", "|u1", (1 << 40, 0))
# two rows of 1 GiB each (the largest record), 16 bytes of data
npy("big_rows.npy", "<f4", (2, 1 << 28), b"\0" * 16)
# a v2 header whose length word claims 60 MiB
with open("long_header.npy", "wb") as f:
    f.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 60 << 20) + b"{'descr': '<f4', ")

# tfrecord: a length of 1 GiB with a correct length crc, then 4 bytes
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF
def masked(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
n = struct.pack("<Q", 1 << 30)
with open("big.tfrecord", "wb") as f:
    f.write(n + struct.pack("<I", masked(crc32c(n))) + b"abcd")

# tokens: 100 u32 tokens
with open("tok.bin", "wb") as f:
    f.write(struct.pack("<100I", *range(100)))

# jsonl: one line of 24 MB that jansson would need about 600 MB to build,
# then an honest line
with open("dense.jsonl", "w") as f:
    f.write("[" + "0," * (12 << 20) + "0]\n")
    f.write('{"ok": true}\n')
PY

expect_fail 1 rows "0 bytes" -- limited "$PTC" dataset ingest --store st --name z --format npy zero_rows.npy
expect_fail 1 truncated needs -- limited "$PTC" dataset ingest --store st --name b --format npy big_rows.npy
expect_fail 1 truncated -- limited "$PTC" dataset ingest --store st --name h --format npy long_header.npy
expect_fail 1 record truncated -- limited "$PTC" dataset ingest --store st --name t --format tfrecord big.tfrecord
expect_fail 1 "too many" json -- limited "$PTC" dataset ingest --store st --name j --format jsonl dense.jsonl

# a 1 GiB token window over a 400-byte file: no window fits, which is an
# error (not zero records and success), and nothing allocated for it
expect_fail 1 "fewer than one window" -- limited "$PTC" dataset ingest --store st --name tk --format tokens:u32:268435456 tok.bin

# files: one record per file; a sparse file over the 1 GiB record limit is
# refused before it is read
truncate -s $(((1 << 30) + 1)) huge.bin
mkdir files && mv huge.bin files/
expect_fail 1 larger -- limited "$PTC" dataset ingest --store st --name f --format files files

# lines: every record costs at least one byte (its newline)
head -c 200000 /dev/zero | tr '\0' '\n' >newlines.txt
set +e
limited "$PTC" dataset ingest --store st --name nl --format lines newlines.txt >"$T/out" 2>"$T/err"
rc=$?
set -e
if [ $rc = 0 ] && grep -q "200000 records" "$T/out"; then ok; else
    bad "200000 empty lines: rc $rc: $(cat "$T/out" "$T/err")"; fi

# a safetensors index that is a FIFO streaming without end is not read
mkfifo endless.index.json
( printf '{"weight_map":{"a":"'; yes | tr -d '\n' ) >endless.index.json 2>/dev/null &
writer=$!
expect_fail 1 endless.index.json regular -- limited timeout 60 "$PTC" import --store st2 --config tp=1 --rules none endless.index.json
kill $writer 2>/dev/null || true
exec 3<>endless.index.json; exec 3>&- # unblock a writer still opening the FIFO
wait $writer 2>/dev/null || true

# the store took none of the failed datasets
"$PTC" dataset ls --store st >"$T/ls"
if ! grep -qE '^(z|b|h|t|j|f)\b' "$T/ls"; then ok; else bad "a failed ingest left a dataset: $(cat "$T/ls")"; fi
finish
