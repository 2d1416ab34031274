#!/usr/bin/env bash
# Bad input: every case exits 1 (2 for usage errors) with one line
# "ptc: error: ..." naming the problem, writes no file outside the store,
# and leaves the store's committed versions unchanged.
. "$(dirname "$0")/lib.sh"
mkdir "$T/w" && cd "$T/w"
"$PTC" synth --preset llama-tiny --seed 1 --out good.safetensors
"$PTC" import --store st --config tp=2 --rules llama good.safetensors >/dev/null
before=$("$PTC" versions --store st --json)

# Hostile safetensors files, crafted byte by byte.
python3 - <<'PY'
import json, struct
def st(name, header, data=b"", raw=None, pad=True):
    h = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    open(name, "wb").write(struct.pack("<Q", len(h)) + h + data)
t = lambda dt, shape, a, b: {"dtype": dt, "shape": shape, "data_offsets": [a, b]}
open("empty.safetensors", "wb").write(b"")
good = open("good.safetensors", "rb").read()
open("truncated.safetensors", "wb").write(good[: len(good) // 2])
open("shortlen.safetensors", "wb").write(b"\x10\x00\x00")
open("beyond.safetensors", "wb").write(struct.pack("<Q", 4096) + b"{}      ")
open("huge.safetensors", "wb").write(struct.pack("<Q", 200_000_000) + b"{}      ")
st("notjson.safetensors", None, raw=b"{not json at all")
st("overlap.safetensors", {"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, b"\0" * 12)
st("gap.safetensors", {"a": t("F32", [2], 0, 8), "b": t("F32", [2], 12, 20)}, b"\0" * 20)
st("wrongsize.safetensors", {"a": t("F32", [3], 0, 8)}, b"\0" * 8)
st("negative.safetensors", {"a": t("F32", [-2], 0, 8)}, b"\0" * 8)
st("negoffset.safetensors", {"a": t("F32", [2], -8, 0)}, b"\0" * 8)
st("overflow.safetensors", {"a": t("F32", [2**62, 2**62], 0, 8)}, b"\0" * 8)
st("dtype.safetensors", {"a": t("F31", [2], 0, 8)}, b"\0" * 8)
st("dup.safetensors", None, b"\0" * 16,
   raw=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
       b'"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}')
st("norule.safetensors", {"model.layers.0.mystery.weight": t("F32", [2], 0, 8)}, b"\0" * 8)
st("evil.safetensors", {"../../ptc-evil-x": t("F32", [2], 0, 8)}, b"\0" * 8)
PY
mkdir notastore && echo hi > notastore/file
ls -A >"$T/listing.before"

expect_fail 1 empty -- "$PTC" import --store st --config tp=1 --rules none empty.safetensors
expect_fail 1 truncat -- "$PTC" import --store st --config tp=1 --rules llama truncated.safetensors
expect_fail 1 -- "$PTC" import --store st --config tp=1 --rules none shortlen.safetensors
expect_fail 1 header -- "$PTC" import --store st --config tp=1 --rules none beyond.safetensors
expect_fail 1 header -- "$PTC" import --store st --config tp=1 --rules none huge.safetensors
expect_fail 1 json -- "$PTC" import --store st --config tp=1 --rules none notjson.safetensors
expect_fail 1 overlap -- "$PTC" import --store st --config tp=1 --rules none overlap.safetensors
expect_fail 1 gap -- "$PTC" import --store st --config tp=1 --rules none gap.safetensors
expect_fail 1 a -- "$PTC" import --store st --config tp=1 --rules none wrongsize.safetensors
expect_fail 1 shape -- "$PTC" import --store st --config tp=1 --rules none negative.safetensors
expect_fail 1 offset -- "$PTC" import --store st --config tp=1 --rules none negoffset.safetensors
expect_fail 1 -- "$PTC" import --store st --config tp=1 --rules none overflow.safetensors
expect_fail 1 F31 -- "$PTC" import --store st --config tp=1 --rules none dtype.safetensors
expect_fail 1 duplicate -- "$PTC" import --store st --config tp=1 --rules none dup.safetensors
expect_fail 1 mystery -- "$PTC" import --store st --config tp=1 --rules llama norule.safetensors
expect_fail 1 missing.safetensors -- "$PTC" import --store st --config tp=1 --rules none missing.safetensors
expect_fail 1 rules -- "$PTC" import --store st --config tp=1 --rules no-such-rules good.safetensors
expect_fail 1 layers -- "$PTC" import --store st --config pp=2,layers=1:1 --rules llama good.safetensors

# Nonsense configurations are usage errors.
expect_fail 2 tp -- "$PTC" import --store st --config tp=0 --rules llama good.safetensors
expect_fail 2 abc -- "$PTC" import --store st --config dp=abc --rules llama good.safetensors
expect_fail 2 foo -- "$PTC" import --store st --config foo=2 --rules llama good.safetensors
expect_fail 2 large -- "$PTC" import --store st --config dp=99999999999999999999 --rules llama good.safetensors
expect_fail 2 world -- "$PTC" import --store st --config dp=4096,tp=4096 --rules llama good.safetensors
expect_fail 2 -- "$PTC" export --store st --config tp=-1 --out-dir x
expect_fail 2 -- "$PTC" import --store st --rules llama good.safetensors
expect_fail 2 unknown -- "$PTC" frobnicate
expect_fail 2 --bogus -- "$PTC" versions --store st --bogus
expect_fail 2 --store -- "$PTC" info --store
expect_fail 2 --frob -- "$PTC" import --frob x --store st --config tp=1 --rules llama good.safetensors
expect_fail 2 -- "$PTC" export --store st --version 0 --out x.safetensors

# Stores and versions that do not exist.
expect_fail 1 notastore -- "$PTC" info --store notastore
expect_fail 1 "not empty" -- "$PTC" import --store notastore --config tp=1 --rules llama good.safetensors
[ ! -e notastore/meta ] && ok || bad "a store was created inside a non-empty directory"
expect_fail 1 nowhere -- "$PTC" info --store nowhere
expect_fail 1 version -- "$PTC" export --store st --version 7 --out x.safetensors
expect_fail 1 version -- "$PTC" info --store st --version 9
expect_fail 1 rank -- "$PTC" export --store st --rank 5 --out x.safetensors

# A name like ../../x is a legal tensor name and never a path (the name
# used is unusual enough that no such file exists before).
"$PTC" import --store st --config dp=1 --rules none evil.safetensors >/dev/null && ok || bad "../../x import"
"$PTC" export --store st --out evil-out.safetensors && cmp -s evil.safetensors evil-out.safetensors && ok ||
    bad "../../x round trip"
[ ! -e ../../ptc-evil-x ] && [ ! -e ../ptc-evil-x ] && [ ! -e st/ptc-evil-x ] && ok ||
    bad "a file named after the tensor appeared outside the store"
rm -f evil-out.safetensors
"$PTC" versions --store st --json | python3 -c 'import json,sys; assert len(json.load(sys.stdin)["versions"]) == 2' && ok || bad "evil import did not commit"

# The failures above changed nothing: same files here, same committed versions.
ls -A >"$T/listing.after"
if cmp -s "$T/listing.before" "$T/listing.after"; then ok; else bad "files appeared: $(diff "$T/listing.before" "$T/listing.after" | tr '\n' ' ')"; fi
after=$("$PTC" versions --store st --json | python3 -c 'import json,sys; v=json.load(sys.stdin); v["versions"]=v["versions"][:1]; print(json.dumps(v,separators=(",",":")))')
before1=$(echo "$before" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(json.dumps(v,separators=(",",":")))')
if [ "$after" = "$before1" ]; then ok; else bad "version 1 changed"; fi
"$PTC" verify --store st --all >/dev/null && ok || bad "verify after failures"
"$PTC" export --store st --version 1 --out w.safetensors && cmp -s w.safetensors good.safetensors && ok ||
    bad "version 1 no longer exports byte-identically"
finish
