#!/usr/bin/env bash
# The store stays inside its directory: a symbolic link (or a hard link) planted
# at any path the store creates, writes or removes — the packs directory, a
# version directory, a pack file, the datasets directory, a dataset pack, the
# lock, the metadata directory and its files — is reported as foreign with one
# "ptc: error:" line (exit 1) and never followed: nothing outside the store
# changes, whatever the command (import, reshard, gc, dataset ingest, info).
. "$(dirname "$0")/lib.sh"
mkdir "$T/w" && cd "$T/w"
"$PTC" synth --preset llama-tiny --seed 3 --out m.safetensors
printf 'alpha\nbeta\ngamma\n' >lines.txt
"$PTC" import --store base --config tp=2 --rules llama m.safetensors >/dev/null
"$PTC" dataset ingest --store base --name d --format lines lines.txt >/dev/null
# base: version 1 (packs/v1), dataset id 1 (packs/datasets/d1.pack); the next
# version is 2 and the next dataset id 2

# the outside world the links point into
mkdir out
for f in rank-0.pack rank-1.pack d2.pack data.mdb lock.mdb lock file; do
    printf 'precious %s\n' "$f" >"out/$f"
done
mkdir out/sub && printf 'deep\n' >out/sub/rank-0.pack
snapshot() { (cd out && find . -printf '%p %y %s %m\n' | sort && find . -type f -exec md5sum {} + | sort); }
snapshot >"$T/out.before"

# case NAME PLANT-COMMANDS: a fresh copy of the base store in st/, then PLANT
# (run with the store as the working directory) plants the links.
fresh() {
    rm -rf st
    cp -a base st
}
out_same() {
    snapshot >"$T/out.after"
    if cmp -s "$T/out.before" "$T/out.after"; then ok; else
        bad "$1: something outside the store changed"; diff "$T/out.before" "$T/out.after" >&2 || true
        rm -rf out && mkdir out
        for f in rank-0.pack rank-1.pack d2.pack data.mdb lock.mdb lock file; do
            printf 'precious %s\n' "$f" >"out/$f"
        done
        mkdir out/sub && printf 'deep\n' >out/sub/rank-0.pack
        snapshot >"$T/out.before"
    fi
}
O=$T/w/out
import() { "$PTC" import --store st --config tp=2 --rules llama m.safetensors; }
reshard() { "$PTC" reshard --store st --to tp=1; }
gc() { "$PTC" gc --store st; }
ingest() { "$PTC" dataset ingest --store st --name e --format lines lines.txt; }
info() { "$PTC" info --store st; }
export() { "$PTC" export --store st --out "$T/whole.safetensors"; }

# expect_foreign WHAT WORDS -- CMD: CMD fails naming the foreign entry
expect_foreign() {
    what=$1; shift
    expect_fail 1 "$@"
    out_same "$what"
}

# packs/ itself is a link to a directory outside
fresh; rm -rf st/packs; ln -s "$O/sub" st/packs
for c in import reshard gc ingest; do
    expect_foreign "packs link, $c" packs symbolic -- $c
done

# the next version's directory packs/v2 is a link (import and reshard write
# there; gc would empty it)
fresh; ln -s "$O" st/packs/v2
for c in import reshard gc; do
    expect_foreign "packs/v2 link, $c" packs/v2 symbolic -- $c
done
# an old, unreferenced version directory that is a link (the gc case)
fresh; ln -s "$O/sub" st/packs/v7
expect_foreign "packs/v7 link, gc" packs/v7 symbolic -- gc
expect_foreign "packs/v7 link, gc again" packs/v7 symbolic -- gc

# pack files planted as links in a real version directory
fresh; mkdir st/packs/v2 && ln -s "$O/rank-0.pack" st/packs/v2/rank-0.pack
for c in import reshard gc; do
    expect_foreign "packs/v2/rank-0.pack link, $c" rank-0.pack symbolic -- $c
done
fresh; mkdir st/packs/v9 && ln -s "$O/rank-1.pack" st/packs/v9/rank-1.pack
expect_foreign "packs/v9/rank-1.pack link, gc" rank-1.pack symbolic -- gc
# a dangling link where a pack file goes is not created through either
fresh; mkdir st/packs/v2 && ln -s "$O/new.pack" st/packs/v2/rank-0.pack
expect_foreign "dangling rank-0.pack, import" rank-0.pack symbolic -- import
[ ! -e "$O/new.pack" ] && ok || { bad "a file was created through a dangling link"; rm -f "$O/new.pack"; }
# a committed version's pack file replaced by a link: readers name it, never
# read through it (the bytes outside are not served as the model)
fresh; cp st/packs/v1/rank-0.pack "$T/v1-rank-0.pack"; rm st/packs/v1/rank-0.pack
ln -s "$T/v1-rank-0.pack" st/packs/v1/rank-0.pack
for c in export reshard; do
    expect_foreign "packs/v1/rank-0.pack link, $c" rank-0.pack symbolic -- $c
done
rm -f "$T/v1-rank-0.pack"

# datasets: the directory and the next dataset's pack file
fresh; rm -rf st/packs/datasets; ln -s "$O/sub" st/packs/datasets
for c in ingest gc; do
    expect_foreign "packs/datasets link, $c" datasets symbolic -- $c
done
fresh; ln -s "$O/d2.pack" st/packs/datasets/d2.pack
for c in ingest gc; do
    expect_foreign "packs/datasets/d2.pack link, $c" d2.pack symbolic -- $c
done

# the writer lock: a link, and a hard link to a file outside
fresh; rm -f st/lock; ln -s "$O/lock" st/lock
for c in import reshard gc ingest; do
    expect_foreign "lock link, $c" lock symbolic -- $c
done
fresh; rm -f st/lock; ln "$O/lock" st/lock
for c in import gc ingest; do
    expect_foreign "lock hard link, $c" lock hard -- $c
done

# the metadata: its directory and LMDB's two files (LMDB writes lock.mdb
# even to read, so every command is refused, info included)
fresh; mv st/meta "$O/meta.store"; ln -s "$O/meta.store" st/meta
snapshot >"$T/out.before"
for c in import gc ingest info; do
    expect_foreign "meta link, $c" meta symbolic -- $c
done
rm -rf "$O/meta.store"; snapshot >"$T/out.before"
fresh; rm -f st/meta/lock.mdb; ln -s "$O/lock.mdb" st/meta/lock.mdb
for c in import gc ingest info; do
    expect_foreign "meta/lock.mdb link, $c" lock.mdb symbolic -- $c
done
fresh; cp st/meta/data.mdb "$T/data.copy"; rm st/meta/data.mdb
cp "$T/data.copy" "$O/data.mdb.store"; ln -s "$O/data.mdb.store" st/meta/data.mdb
snapshot >"$T/out.before"
for c in import gc ingest info; do
    expect_foreign "meta/data.mdb link, $c" data.mdb symbolic -- $c
done
rm -f "$O/data.mdb.store"; snapshot >"$T/out.before"

# a new store whose meta/ or packs/ (allowed remains of an interrupted
# creation) are links: not created through them
rm -rf new && mkdir new && ln -s "$O/sub" new/meta
expect_foreign "new store, meta link" meta symbolic -- \
    "$PTC" import --store new --config tp=1 --rules llama m.safetensors
rm -rf new && mkdir new && ln -s "$O/sub" new/packs
expect_foreign "new store, packs link" packs symbolic -- \
    "$PTC" import --store new --config tp=1 --rules llama m.safetensors

# the base store, never touched by the cases, is whole; removing a planted
# link lets the store work again
"$PTC" verify --store base --all >/dev/null && ok || bad "base store damaged"
fresh; ln -s "$O/sub" st/packs/v7
expect_foreign "packs/v7 link before removal" packs/v7 -- gc
rm st/packs/v7
if gc >/dev/null && import >/dev/null && ingest >/dev/null; then ok; else
    bad "store unusable after the link was removed"; fi
"$PTC" verify --store st --all >/dev/null && ok || bad "verify after recovery"
out_same "after recovery"
finish
