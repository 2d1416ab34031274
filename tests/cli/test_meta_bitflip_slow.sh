#!/usr/bin/env bash
# labels: slow
# Metadata integrity, the campaign: 1500 single-bit flips of the data.mdb
# of each of two stores (tests/cli/bitflip.py), each a clean error or no
# effect (PTC_BITFLIPS=3000 and seed 7 on the larger store reach the flip
# that crashed liblmdb before data.mdb's pages were checked: flip 1847).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_bitflip.sh"
bitflip_store "$T/st"
if python3 "$PTC_SRC/tests/cli/bitflip.py" "$PTC" "$T/st" "${PTC_BITFLIPS:-1500}" 1; then ok; else
    bad "bit flips"; fi
bitflip_store_big "$T/big"
if python3 "$PTC_SRC/tests/cli/bitflip.py" "$PTC" "$T/big" "${PTC_BITFLIPS:-1500}" 2; then ok; else
    bad "bit flips of the larger store"; fi
finish
