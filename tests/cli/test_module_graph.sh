#!/bin/bash
# The module graph measured from this build (includes from the compiler,
# calls from the object files) has no arrow against DESIGN.md's order and no
# circle of files; and the include paths reject what the order forbids: a
# deliberate bad include, compiled with a module's real flags, fails (a
# control include that the order allows compiles, so the probe can fail).
set -eu
: "${PTC_SRC:?}" "${PTC_BUILD:?}"
out=$(python3 "$PTC_SRC/scripts/module_graph.py" "$PTC_BUILD" --check-includes) || {
    echo "$out"
    exit 1
}
echo "$out"
echo "$out" | grep -q " 0 problems$" || { echo "FAIL: the report does not say 0 problems"; exit 1; }
n=$(echo "$out" | grep -c " is rejected  *ok$")
[ "$n" -ge 10 ] || { echo "FAIL: only $n bad includes were rejected"; exit 1; }
echo "$out" | grep -q " compiles  *ok$" || { echo "FAIL: no control include compiled"; exit 1; }
echo "ok: module graph as DESIGN.md orders it; $n bad includes rejected"
