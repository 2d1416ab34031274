#!/bin/sh
# Regenerates docs/cli.md from the commands' own --help texts, so the
# reference cannot drift from the binary (tests/cli/test_help.sh checks it).
set -eu
PTC=${1:-build/ptc}
out=${2:-docs/cli.md}
{
    echo "# The ptc command"
    echo
    echo "Generated from \`ptc COMMAND --help\` by scripts/gen-cli-doc.sh; do not edit by hand."
    echo "Exit status: 0 on success, 1 on failure, 2 on a usage error. Errors go to"
    echo "stderr as one line starting \`ptc: error:\`. \`--json\` output is one JSON object."
    echo "Environment: \`PTC_LOCK_TIMEOUT=SECONDS\` is how long a command that writes a"
    echo "store waits for its writer lock when another process holds it (default 60;"
    echo "0: fail at once; \`--lock-timeout\` of gc and dataset ingest overrides it)."
    echo "\`PTC_VERBOSE=1\` in the environment logs debug lines. (Fault injection,"
    echo "\`PTC_FAULT_*\`, is the test build's: build/test-hooks/ptc, never installed.)"
    for c in $("$PTC" --help | awk '/^commands:/{on=1; next} on && NF {print $1}'); do
        echo
        echo "## ptc $c"
        echo
        echo '```'
        "$PTC" "$c" --help
        echo '```'
    done
} >"$out"
