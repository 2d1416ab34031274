#!/bin/bash
# STYLE.md's size limits hold in the whole C tree: no function over 200 lines,
# no file over 1,000 lines unless scripts/check_sizes.py names its one job.
# The checker's own heuristic is checked too: a planted 201-line function and
# a 1,001-line file are found, a 200-line function is not.
set -eu
: "${PTC_SRC:?}"
out=$(python3 "$PTC_SRC/scripts/check_sizes.py" "$PTC_SRC") || { echo "$out"; exit 1; }
echo "$out"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 - "$T" <<'PY'
import sys
d = sys.argv[1]
def fn(name, lines):
    body = "".join("    x += %d; /* { not a brace */\n" % i for i in range(lines - 4))
    return "static int %s(int x)\n{\n%s    return x;\n}\n" % (name, body)
with open(d + "/a.c", "w") as f:
    f.write('struct s { int a; };\nstatic const char *k = "}{";\n')
    f.write(fn("long_one", 201) + fn("just_fits", 200))
with open(d + "/b.h", "w") as f:
    f.write("/* one line */\n" * 1001)
PY
set +e
got=$(python3 "$PTC_SRC/scripts/check_sizes.py" "$T")
rc=$?
set -e
echo "$got"
[ "$rc" = 1 ] || { echo "FAIL: planted problems not found (exit $rc)"; exit 1; }
echo "$got" | grep -q "a.c:3: long_one is 201 lines" || { echo "FAIL: 201-line function"; exit 1; }
echo "$got" | grep -q "just_fits" && { echo "FAIL: a 200-line function reported"; exit 1; }
echo "$got" | grep -q "b.h: 1001 lines" || { echo "FAIL: 1,001-line file"; exit 1; }
echo "$got" | grep -q " 2 problems$" || { echo "FAIL: expected 2 problems"; exit 1; }
echo "ok: size limits hold"
