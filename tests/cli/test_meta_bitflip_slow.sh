#!/usr/bin/env bash
# labels: slow
# Metadata integrity, the campaign: 1500 single-bit flips of a store's
# data.mdb (tests/cli/bitflip.py), each a clean error or no effect.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_bitflip.sh"
bitflip_store "$T/st"
if python3 "$PTC_SRC/tests/cli/bitflip.py" "$PTC" "$T/st" "${PTC_BITFLIPS:-1500}" 1; then ok; else
    bad "bit flips"; fi
finish
