#!/usr/bin/env bash
# Metadata integrity, fast tier: 24 single-bit flips of a store's data.mdb;
# each gives a clean error or changes nothing that info, versions, verify,
# dataset ls/info or export report; never a crash or a silent change
# (tests/cli/bitflip.py; the large campaign is test_meta_bitflip_slow.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_bitflip.sh"
bitflip_store "$T/st"
if python3 "$PTC_SRC/tests/cli/bitflip.py" "$PTC" "$T/st" 24 33; then ok; else bad "bit flips"; fi
finish
