#!/usr/bin/env bash
# labels: slow
# Metadata integrity, the campaign: single-bit flips of the data.mdb of two
# stores (tests/cli/bitflip.py; 1500 and 2000, PTC_BITFLIPS sets both),
# each a clean error or no effect. The larger store's sequence (seed 7) is
# the one whose flip 1847 crashed liblmdb before data.mdb's pages were
# checked.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_bitflip.sh"
bitflip_store "$T/st"
if python3 "$PTC_SRC/tests/cli/bitflip.py" "$PTC" "$T/st" "${PTC_BITFLIPS:-1500}" 1; then ok; else
    bad "bit flips"; fi
bitflip_store_big "$T/big"
if python3 "$PTC_SRC/tests/cli/bitflip.py" "$PTC" "$T/big" "${PTC_BITFLIPS:-2000}" 7; then ok; else
    bad "bit flips of the larger store"; fi
finish
