#!/usr/bin/env bash
# Every command answers --help with exit 0, and docs/cli.md is up to date.
. "$(dirname "$0")/lib.sh"
for c in $("$PTC" --help | awk '/^commands:/{on=1; next} on && NF {print $1}'); do
    if "$PTC" "$c" --help >"$T/h" && grep -q usage "$T/h"; then ok; else bad "$c --help"; fi
done
sh "$PTC_SRC/scripts/gen-cli-doc.sh" "$PTC" "$T/cli.md"
if cmp -s "$T/cli.md" "$PTC_SRC/docs/cli.md"; then ok; else
    bad "docs/cli.md is stale: run scripts/gen-cli-doc.sh build/ptc"; fi
finish
